//go:build unix

package hub

import "golang.org/x/sys/unix"

// freeSpace returns the bytes an unprivileged user may still write on the
// file system that holds dir.
func freeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:unconvert // field types differ between systems
}
