//go:build unix

package hub

import (
	"errors"
	"os"
	"syscall"
)

// isNoSpace reports whether err is the file system's "no space left" or
// "quota exceeded".
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// syncDir flushes a folder's entries (a rename into it) to disk.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
