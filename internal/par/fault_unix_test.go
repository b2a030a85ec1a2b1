//go:build unix

package par

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"
)

// TestRunFault: a helper part reading a mapped file that was truncated
// faults; the fault reaches the caller as a recoverable panic that names
// the address (what gguf.File.Fault turns into an error), instead of
// killing the process.
func TestRunFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weights")
	size := 2 * os.Getpagesize()
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(data)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var sum byte
	got := func() (r any) {
		defer func() { r = recover() }()
		Run(2, func(k int) {
			if k == 1 {
				sum += data[size-1]
			}
		})
		return nil
	}()
	fe, ok := got.(interface{ Addr() uintptr })
	if !ok {
		t.Fatalf("the caller recovered %v (%T), want the fault with its address", got, got)
	}
	start := uintptr(unsafe.Pointer(&data[0]))
	if a := fe.Addr(); a < start || a >= start+uintptr(size) {
		t.Errorf("fault at %#x, outside the mapping at %#x..%#x", a, start, start+uintptr(size))
	}
}
