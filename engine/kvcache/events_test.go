package kvcache

import (
	"sync"
	"testing"
)

func TestEventLogRing(t *testing.T) {
	l := newEventLog(4)
	for i := range 10 {
		l.Push(Event{Kind: EventAlloc, Seq: SeqID(i)})
	}
	tests := []struct {
		name        string
		after       uint64
		max         int
		wantIDs     []uint64
		wantNext    uint64
		wantDropped uint64
	}{
		{"from the start", 0, 0, []uint64{7, 8, 9, 10}, 10, 6},
		{"caught up", 10, 0, nil, 10, 0},
		{"partly behind", 8, 0, []uint64{9, 10}, 10, 0},
		{"at most two", 0, 2, []uint64{7, 8}, 8, 6},
		{"just inside", 6, 1, []uint64{7}, 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, next, dropped := l.Since(tt.after, tt.max)
			var ids []uint64
			for _, e := range evs {
				ids = append(ids, e.ID)
				if e.Seq != SeqID(e.ID-1) {
					t.Errorf("event %d holds sequence %d, want %d", e.ID, e.Seq, e.ID-1)
				}
			}
			if len(ids) != len(tt.wantIDs) || next != tt.wantNext || dropped != tt.wantDropped {
				t.Fatalf("Since(%d, %d) = ids %v next %d dropped %d; want %v %d %d",
					tt.after, tt.max, ids, next, dropped, tt.wantIDs, tt.wantNext, tt.wantDropped)
			}
			for i := range ids {
				if ids[i] != tt.wantIDs[i] {
					t.Fatalf("ids %v, want %v", ids, tt.wantIDs)
				}
			}
		})
	}
	if l.Total() != 10 {
		t.Errorf("total %d, want 10", l.Total())
	}
	select {
	case <-l.Notify():
	default:
		t.Error("no notification after pushes")
	}
	if s := (Event{ID: 3, Step: 2, Kind: EventEvict, Seq: 5, Blocks: []int{1}, Reason: "why"}).String(); s != "#3 step 2 evict seq 5 blocks [1]: why" {
		t.Errorf("event string %q", s)
	}
}

// TestConcurrentReaders: a slow event reader and a snapshot reader on other
// goroutines never block the manager and see consistent values (run with
// -race).
func TestConcurrentReaders(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4, EventBuffer: 8, HostBudget: 1 << 20}, 32)
	snaps := make(chan *Snapshot, 1)
	var wg sync.WaitGroup
	var got, dropped uint64
	done := make(chan struct{})
	wg.Add(2)
	go func() { // slow event consumer
		defer wg.Done()
		var cursor uint64
		for {
			select {
			case <-done:
				evs, _, d := m.Events().Since(cursor, 0)
				got += uint64(len(evs))
				dropped += d
				return
			case <-m.Events().Notify():
			}
			evs, next, d := m.Events().Since(cursor, 3)
			got += uint64(len(evs))
			dropped += d
			cursor = next
		}
	}()
	go func() { // UI: reads published snapshots
		defer wg.Done()
		for s := range snaps {
			used := 0
			for _, b := range s.Blocks {
				if b.State == BlockUsed {
					used++
				}
			}
			if used != s.Metrics.UsedBlocks {
				t.Errorf("snapshot at step %d: %d used blocks listed, metrics say %d", s.Step, used, s.Metrics.UsedBlocks)
			}
		}
	}()
	for i := range 300 {
		id := SeqID(i)
		mustAllocate(t, m, st, id, seqTokens(int32(i%7), 9), SeqOptions{})
		mustAppend(t, m, st, id, []int32{1})
		if i%3 == 0 {
			m.Preempt(id, Swap)
			m.SwapIn(id)
		}
		m.Free(id)
		m.Tick()
		select { // publish without ever waiting
		case snaps <- m.Snapshot():
		default:
		}
	}
	close(snaps)
	close(done)
	wg.Wait()
	total := m.Events().Total()
	if got+dropped != total {
		t.Errorf("reader saw %d events and %d drops, %d were written", got, dropped, total)
	}
	t.Logf("%d events written, reader got %d, dropped %d", total, got, dropped)
	mustCheck(t, m, st)
}
