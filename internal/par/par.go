// Package par runs the parts of one job on goroutines at once and gives a
// panic in any part, a fault reading a memory-mapped file included, back to
// the caller's goroutine, where it can be recovered.
//
// Model weights are read from a mapped file: a page the file lost on disk
// (truncated or rewritten while in use) faults on read. In a goroutine that
// set debug.SetPanicOnFault the fault is a panic that the engine recovers
// and reports; in a helper goroutine of its own it would kill the process.
// engine/quant's matrix products and engine/backend/native's packing both
// read weights on several goroutines, so both go through Run.
package par

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Run calls part(k) for every k in [0, n): part(0) on the caller's
// goroutine, the others on goroutines of their own (with
// debug.SetPanicOnFault set), and returns once all have returned. A panic
// in a part is raised again in the caller once every part is done (the
// first one, when several panic).
func Run(n int, part func(k int)) {
	var wg sync.WaitGroup
	var panicked atomic.Pointer[any]
	for k := 1; k < n; k++ {
		wg.Go(func() {
			debug.SetPanicOnFault(true)
			defer func() {
				if r := recover(); r != nil {
					panicked.CompareAndSwap(nil, &r)
				}
			}()
			part(k)
		})
	}
	func() {
		defer wg.Wait() // also when part(0) panics: no part outlives the call
		if n > 0 {
			part(0)
		}
	}()
	if r := panicked.Load(); r != nil {
		panic(*r)
	}
}
