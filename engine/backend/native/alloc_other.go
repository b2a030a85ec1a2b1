//go:build !linux

package native

// allocPacked returns size bytes for packed weights, 64-byte aligned, from
// the Go heap.
func allocPacked[T any](size int, owner *T) []byte { return heapAligned(size) }

// releaseMapped does nothing here: the system keeps the file's pages.
func releaseMapped(b []byte) {}
