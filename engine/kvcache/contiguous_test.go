package kvcache

import (
	"errors"
	"strings"
	"testing"
)

func TestContiguousFragmentation(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4, Allocator: Contiguous}, 12)
	mustAllocate(t, m, st, 1, seqTokens(1, 5), SeqOptions{MaxLen: 16})  // blocks 0-3
	mustAllocate(t, m, st, 2, seqTokens(20, 5), SeqOptions{MaxLen: 16}) // blocks 4-7
	mustAllocate(t, m, st, 3, seqTokens(40, 5), SeqOptions{MaxLen: 12}) // blocks 8-10
	if got := m.BlockTable(2); len(got) != 4 || got[0] != 4 || got[3] != 7 {
		t.Fatalf("second reservation %v, want blocks 4 to 7", got)
	}
	x := m.Metrics()
	if x.UsedBlocks != 11 || x.FilledSlots != 15 || x.ReservedSlots != 44 {
		t.Fatalf("metrics %+v", x)
	}
	if want := 100 * float64(44-15) / 44; x.InternalFragmentation != want {
		t.Errorf("internal fragmentation %.2f%%, want %.2f%%", x.InternalFragmentation, want)
	}
	m.Free(2)
	// Free: blocks 4-7 and 11. Five free blocks, but a 5-block request does not fit.
	_, err := m.Allocate(4, seqTokens(60, 3), SeqOptions{MaxLen: 20})
	var ns *NoSpaceError
	if !errors.As(err, &ns) || ns.Need != 5 || ns.Available != 5 || ns.LargestRun != 4 {
		t.Fatalf("fragmented allocation: %v", err)
	}
	if !strings.Contains(err.Error(), "needs 5 adjacent blocks, 5 are free but the longest free run is 4") {
		t.Errorf("message %q does not name the fragmentation", err)
	}
	if got := m.UnservableBlocks(20); got != 5 {
		t.Errorf("UnservableBlocks(20) = %d, want 5", got)
	}
	if got := m.UnservableBlocks(16); got != 0 {
		t.Errorf("UnservableBlocks(16) = %d, want 0: it fits", got)
	}
	if x := m.Metrics(); x.ExternalFragmentation != 20 || x.LargestFreeRun != 4 {
		t.Errorf("external fragmentation %.1f%%, largest run %d; want 20%% and 4", x.ExternalFragmentation, x.LargestFreeRun)
	}
	// Freeing the neighbour merges the runs: now it fits.
	m.Free(3)
	mustAllocate(t, m, st, 4, seqTokens(60, 3), SeqOptions{MaxLen: 20})
	if got := m.BlockTable(4)[0]; got != 4 {
		t.Errorf("merged run starts at %d, want 4", got)
	}
	// Fork copies the used blocks into a new reservation; swap round-trips.
	mustAppend(t, m, st, 1, seqTokens(9, 4))
	m.Free(4)
	if err := m.Fork(1, 5); err != nil {
		t.Fatal(err)
	}
	if x := m.Metrics(); x.CoWCopies != 3 {
		t.Errorf("contiguous fork copied %d blocks, want 3", x.CoWCopies)
	}
	mustCheck(t, m, st)
}

func TestContiguousSwap(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4, Allocator: Contiguous, HostBudget: 1 << 20}, 8)
	mustAllocate(t, m, st, 1, seqTokens(1, 6), SeqOptions{MaxLen: 16})
	if r, err := m.Preempt(1, Swap); err != nil || r.Mode != Swap {
		t.Fatalf("swap: %+v %v", r, err)
	}
	mustAllocate(t, m, st, 2, seqTokens(50, 30), SeqOptions{MaxLen: 32}) // overwrites every block
	if err := m.SwapIn(1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("swap in to a full pool: %v", err)
	}
	m.Free(2)
	if err := m.SwapIn(1); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, m, st)
}

// TestContiguousVsPaged runs one workload both ways on the same pool: paged
// fits many more sequences, and both keep every token intact.
func TestContiguousVsPaged(t *testing.T) {
	tests := []struct {
		alloc    Allocator
		wantSeqs int
	}{
		{Paged, 21},     // 64 blocks / 3 blocks per 10-token prompt
		{Contiguous, 4}, // 64 blocks / 16 blocks per 64-token reservation
	}
	for _, tt := range tests {
		t.Run(tt.alloc.String(), func(t *testing.T) {
			m, st := newTestManager(t, Config{BlockSize: 4, Allocator: tt.alloc, MaxLen: 64}, 64)
			n := 0
			for ; ; n++ {
				r, err := m.Allocate(SeqID(n), seqTokens(int32(100*n), 10), SeqOptions{})
				if errors.Is(err, ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				writeKV(m, st, SeqID(n), r.Computed)
			}
			if n != tt.wantSeqs {
				t.Errorf("%d sequences fit, want %d", n, tt.wantSeqs)
			}
			for i := range n {
				mustAppend(t, m, st, SeqID(i), []int32{1, 2})
			}
			mustCheck(t, m, st)
			t.Logf("%s: %d sequences, internal fragmentation %.1f%%", tt.alloc, n, m.Metrics().InternalFragmentation)
		})
	}
}
