package par

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestRun: every part runs once; a panic in a helper goroutine or in the
// caller's part reaches the caller after every part is done.
func TestRun(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7} {
		var ran [7]atomic.Int32
		Run(n, func(k int) { ran[k].Add(1) })
		for k := range ran {
			want := int32(0)
			if k < n {
				want = 1
			}
			if got := ran[k].Load(); got != want {
				t.Errorf("n %d: part %d ran %d times, want %d", n, k, got, want)
			}
		}
	}
	for _, bad := range []int{0, 3} {
		var done atomic.Int32
		got := func() (r any) {
			defer func() { r = recover() }()
			Run(5, func(k int) {
				if k == bad {
					panic(fmt.Sprintf("part %d", k))
				}
				done.Add(1)
			})
			return nil
		}()
		if got != fmt.Sprintf("part %d", bad) {
			t.Errorf("part %d panicked: the caller got %v", bad, got)
		}
		if d := done.Load(); d != 4 {
			t.Errorf("part %d panicked: %d other parts had finished when Run returned, want 4", bad, d)
		}
	}
}

// ExampleRun sums a slice in four parts.
func ExampleRun() {
	x := make([]int, 1000)
	for i := range x {
		x[i] = i
	}
	var sums [4]int
	Run(4, func(k int) {
		for _, v := range x[len(x)*k/4 : len(x)*(k+1)/4] {
			sums[k] += v
		}
	})
	fmt.Println(sums[0] + sums[1] + sums[2] + sums[3])
	// Output: 499500
}
