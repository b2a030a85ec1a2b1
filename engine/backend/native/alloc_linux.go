package native

import (
	"runtime"
	"syscall"
)

// hugeAlign is the size of a transparent huge page on x86-64 and arm64
// Linux (with 4 KiB base pages).
const hugeAlign = 2 << 20

// allocPacked returns size bytes for packed weights, 64-byte aligned. On
// Linux they are an anonymous mapping of whole 2 MiB pages marked
// MADV_HUGEPAGE (the kernel's default "madvise" mode gives huge pages only
// where asked): a decode step streams every weight once, and with 4 KiB
// pages its TLB misses (dear under a hypervisor's nested paging) cost a
// third of the read rate on the development machine. owner's cleanup
// unmaps them once owner (the Packed or ReadProbe holding them) is
// unreachable. Where the mapping fails, the Go heap serves.
func allocPacked[T any](size int, owner *T) []byte {
	n := (size + hugeAlign - 1) / hugeAlign * hugeAlign
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return heapAligned(size)
	}
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; a kernel without THP refuses, harmlessly
	runtime.AddCleanup(owner, func(b []byte) { syscall.Munmap(b) }, b)
	return b[:size:size]
}
