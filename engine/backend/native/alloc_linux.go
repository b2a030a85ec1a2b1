package native

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"syscall"
	"unsafe"
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
	mappedBytes.Add(int64(n))
	runtime.AddCleanup(owner, func(b []byte) {
		if syscall.Munmap(b) == nil {
			mappedBytes.Add(-int64(len(b)))
		}
	}, b)
	return b[:size:size]
}

// releaseMapped gives the system back the resident pages of b when b lies
// inside one read-only file mapping (a model's mapped GGUF file): the pages
// wholly inside b are dropped from the process with MADV_DONTNEED (the page
// cache keeps them; a later read pages them in again from the file). Bytes
// anywhere else (the Go heap, where MADV_DONTNEED would zero them) are left
// alone: the mapping is looked up in /proc/self/maps first.
func releaseMapped(b []byte) {
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	if !inFileMapping(start, end) {
		return
	}
	page := uintptr(os.Getpagesize())
	lo, hi := (start+page-1)/page*page, end/page*page
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}

// inFileMapping reports whether [start, end) lies inside one mapping of
// /proc/self/maps that maps a file and is not writable.
func inFileMapping(start, end uintptr) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// address perms offset dev inode path
		f := bytes.Fields(sc.Bytes())
		if len(f) < 6 {
			continue
		}
		lo, hi, ok := parseRange(f[0])
		if !ok || start < lo || end > hi {
			continue
		}
		return len(f[1]) >= 2 && f[1][1] != 'w' && string(f[4]) != "0" && f[5][0] == '/'
	}
	return false
}

// parseRange parses /proc/self/maps's "lo-hi" (hex).
func parseRange(s []byte) (lo, hi uintptr, ok bool) {
	i := bytes.IndexByte(s, '-')
	if i < 0 {
		return 0, 0, false
	}
	var v [2]uintptr
	for k, part := range [][]byte{s[:i], s[i+1:]} {
		if len(part) == 0 {
			return 0, 0, false
		}
		for _, c := range part {
			switch {
			case c >= '0' && c <= '9':
				v[k] = v[k]<<4 | uintptr(c-'0')
			case c >= 'a' && c <= 'f':
				v[k] = v[k]<<4 | uintptr(c-'a'+10)
			default:
				return 0, 0, false
			}
		}
	}
	return v[0], v[1], true
}
