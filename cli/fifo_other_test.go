//go:build !unix

package cli

import "errors"

// mkfifo makes a named pipe at path, which this system cannot.
func mkfifo(path string) error { return errors.New("no named pipes on this system") }
