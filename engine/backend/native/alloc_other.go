//go:build !linux

package native

// allocPacked returns size bytes for packed weights, 64-byte aligned, from
// the Go heap.
func allocPacked(size int, owner *Packed) []byte { return heapAligned(size) }
