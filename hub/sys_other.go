//go:build !unix

package hub

import (
	"errors"
	"syscall"
)

// isNoSpace reports whether err is the file system's "no space left".
func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// syncDir does nothing: folders cannot be synced here.
func syncDir(string) {}
