//go:build unix

package gguf

import (
	"os"
	"syscall"
)

func mmap(fd *os.File, size int64) ([]byte, func() error, error) {
	if int64(int(size)) != size {
		return nil, nil, syscall.EFBIG
	}
	b, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, &os.PathError{Op: "mmap", Path: fd.Name(), Err: err}
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
