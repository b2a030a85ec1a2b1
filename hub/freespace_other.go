//go:build !unix && !windows

package hub

import "errors"

// freeSpace is unknown on this system, so the check is skipped.
func freeSpace(string) (uint64, error) {
	return 0, errors.New("free space is not known on this system")
}
