//go:build unix

package hub

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe called *.gguf is reported, not opened (which would block).
func TestInspectFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pipe.gguf")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan Local, 1)
	go func() { done <- Inspect(p) }()
	select {
	case l := <-done:
		if l.Err == nil || l.Runnable() || !strings.Contains(l.Err.Error(), "pipe") {
			t.Errorf("Inspect of a FIFO: %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Inspect blocked on a FIFO")
	}
}
