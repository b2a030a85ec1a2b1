//go:build unix

package gguf

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Open refuses whatever is not a regular file with an error naming the path
// and the kind of file, and returns at once: a FIFO with no writer is never
// opened for reading (which would block).
func TestOpenNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	sock := filepath.Join(dir, "model.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link.gguf")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"fifo", fifo, "named pipe"},
		{"symlink to a fifo", link, "named pipe"},
		{"directory", dir, "directory"},
		{"socket", sock, "socket"},
		{"device", os.DevNull, "device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := Open(tc.path)
				if f != nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Open(%s) = %v, want an error naming the path and %q", tc.path, err, tc.want)
				}
			case <-time.After(5 * time.Second):
				// Unblock the stuck open so the test binary can exit.
				if w, err := os.OpenFile(tc.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("Open(%s) blocked", tc.path)
			}
		})
	}
}
