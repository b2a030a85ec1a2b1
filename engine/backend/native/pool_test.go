package native

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestParallelCoversOnce checks parallel's ranges for many shapes: every
// element is done exactly once, every range starts on a unit and ends on
// one or at the total, and a failing range's status comes back.
func TestParallelCoversOnce(t *testing.T) {
	for _, nw := range []int{2, 3, 8} {
		for _, unit := range []int{1, 16, 1024} {
			for _, total := range []int{1, 15, 16, 17, 100, 2048, 5632, 32000} {
				t.Run(fmt.Sprintf("nw%d/unit%d/total%d", nw, unit, total), func(t *testing.T) {
					hits := make([]atomic.Int32, total)
					var bad atomic.Int32
					rc := parallel(nw, total, unit, true, func(a, b int) int32 {
						if a < 0 || b > total || a >= b || a%unit != 0 || (b%unit != 0 && b != total) {
							bad.Add(1)
							return -7
						}
						for i := a; i < b; i++ {
							hits[i].Add(1)
						}
						if a == 0 {
							return -3
						}
						return 0
					})
					if bad.Load() != 0 {
						t.Fatalf("%d ranges off the units", bad.Load())
					}
					for i := range hits {
						if n := hits[i].Load(); n != 1 {
							t.Fatalf("element %d done %d times", i, n)
						}
					}
					if rc != -3 {
						t.Errorf("status %d, want the failing range's -3", rc)
					}
				})
			}
		}
	}
}
