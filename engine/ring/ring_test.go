package ring

import (
	"fmt"
	"sync"
	"testing"
)

type ev struct {
	ID  uint64
	Val int
}

func TestSince(t *testing.T) {
	l := New(4, func(e *ev, id uint64) { e.ID = id })
	for i := range 6 {
		l.Push(ev{Val: i})
	}
	tests := []struct {
		after, max        int
		wantIDs           []uint64
		wantNext, dropped uint64
	}{
		{0, 0, []uint64{3, 4, 5, 6}, 6, 2},
		{4, 0, []uint64{5, 6}, 6, 0},
		{2, 1, []uint64{3}, 3, 0},
		{6, 0, nil, 6, 0},
	}
	for _, tc := range tests {
		got, next, dropped := l.Since(uint64(tc.after), tc.max)
		var ids []uint64
		for _, e := range got {
			ids = append(ids, e.ID)
			if int(e.ID)-1 != e.Val {
				t.Errorf("entry %d holds value %d", e.ID, e.Val)
			}
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) || next != tc.wantNext || dropped != tc.dropped {
			t.Errorf("Since(%d, %d) = %v, %d, %d; want %v, %d, %d", tc.after, tc.max, ids, next, dropped, tc.wantIDs, tc.wantNext, tc.dropped)
		}
	}
	if l.Total() != 6 {
		t.Errorf("Total %d", l.Total())
	}
}

func TestConcurrentReaders(t *testing.T) {
	l := New[int](16, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur uint64
			seen := uint64(0)
			for seen < 1000 {
				got, next, dropped := l.Since(cur, 0)
				seen += uint64(len(got)) + dropped
				cur = next
				if len(got) == 0 {
					<-l.Notify()
				}
			}
		}()
	}
	for i := range 1000 {
		l.Push(i)
	}
	// Readers may be waiting on a coalesced notification: keep nudging.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		default:
			l.Push(-1)
		}
	}
}

func ExampleLog() {
	l := New[string](2, nil)
	l.Push("alloc")
	l.Push("free")
	l.Push("evict")
	got, next, dropped := l.Since(0, 0)
	fmt.Println(got, next, dropped)
	// Output: [free evict] 3 1
}
