package kvcache

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"block size 0", Config{BlockSize: 0, BlockBytes: 8, Budget: 64}, "block size must be 1 to 256 tokens, got 0"},
		{"block size 257", Config{BlockSize: 257, BlockBytes: 8, Budget: 64}, "got 257"},
		{"no block bytes", Config{BlockSize: 16, Budget: 64}, "block bytes must be positive"},
		{"budget too small", Config{BlockSize: 16, BlockBytes: 100, Budget: 99}, "budget of 99 bytes holds no block of 100 bytes"},
		{"bad eviction", Config{BlockSize: 16, BlockBytes: 1, Budget: 4, Eviction: 9}, "unknown eviction policy"},
		{"negative host budget", Config{BlockSize: 16, BlockBytes: 1, Budget: 4, HostBudget: -1}, "negative setting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in    string
		parse func(string) (any, error)
		want  any
	}{
		{"LRU", func(s string) (any, error) { return ParseEvictionPolicy(s) }, LRU},
		{"lfu", func(s string) (any, error) { return ParseEvictionPolicy(s) }, LFU},
		{"fifo", func(s string) (any, error) { return ParseEvictionPolicy(s) }, FIFO},
		{"paged", func(s string) (any, error) { return ParseAllocator(s) }, Paged},
		{"Contiguous", func(s string) (any, error) { return ParseAllocator(s) }, Contiguous},
		{"swap", func(s string) (any, error) { return ParsePreemptMode(s) }, Swap},
		{"recompute", func(s string) (any, error) { return ParsePreemptMode(s) }, Recompute},
		{"rolling", func(s string) (any, error) { return ParseOverflowPolicy(s) }, RollingWindow},
		{"truncate", func(s string) (any, error) { return ParseOverflowPolicy(s) }, TruncateMiddle},
		{"stop", func(s string) (any, error) { return ParseOverflowPolicy(s) }, Stop},
	}
	for _, tt := range tests {
		got, err := tt.parse(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parse %q = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if s := got.(interface{ String() string }).String(); !strings.EqualFold(s, tt.in) {
			t.Errorf("%v.String() = %q, want %q", got, s, strings.ToLower(tt.in))
		}
		if _, err := tt.parse("bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
			t.Errorf("parse of bogus gave %v, want an error naming it", err)
		}
	}
}

func TestHashBlock(t *testing.T) {
	a := HashBlock(BlockHash{}, []int32{1, 2, 3})
	tests := []struct {
		name  string
		other BlockHash
		same  bool
	}{
		{"same input", HashBlock(BlockHash{}, []int32{1, 2, 3}), true},
		{"other tokens", HashBlock(BlockHash{}, []int32{1, 2, 4}), false},
		{"other order", HashBlock(BlockHash{}, []int32{3, 2, 1}), false},
		{"other parent", HashBlock(BlockHash{1}, []int32{1, 2, 3}), false},
		{"longer", HashBlock(BlockHash{}, []int32{1, 2, 3, 0}), false},
	}
	for _, tt := range tests {
		if (a == tt.other) != tt.same {
			t.Errorf("%s: equal = %v, want %v", tt.name, a == tt.other, tt.same)
		}
	}
	if len(a.String()) != 32 {
		t.Errorf("hash string %q, want 32 hex digits", a)
	}
}

// TestPrefixSharing: a second request sharing a 100-token prefix gets the
// prefix's full cached blocks back, counted in tokens.
func TestPrefixSharing(t *testing.T) {
	const bs = 16
	m, st := newTestManager(t, Config{BlockSize: bs, HostBudget: 1 << 20}, 64)
	prefix := seqTokens(1000, 100)
	a := slices.Concat(prefix, seqTokens(5000, 10))
	b := slices.Concat(prefix, seqTokens(7000, 10))

	if r := mustAllocate(t, m, st, 1, a, SeqOptions{}); r.Computed != 0 {
		t.Fatalf("cold request: %d tokens computed, want 0", r.Computed)
	}
	if err := m.Free(1); err != nil { // finished: its full blocks stay cached
		t.Fatal(err)
	}
	if got := m.CachedPrefix(b); got != 96 {
		t.Errorf("CachedPrefix = %d, want 96", got)
	}
	r := mustAllocate(t, m, st, 2, b, SeqOptions{})
	if want := 100 / bs * bs; r.Computed != want {
		t.Fatalf("second request reused %d tokens, want %d", r.Computed, want)
	}
	x := m.Metrics()
	if x.PrefixQueryTokens != 220 || x.PrefixHitTokens != 96 {
		t.Errorf("prefix counters: %d queried, %d hit; want 220 and 96", x.PrefixQueryTokens, x.PrefixHitTokens)
	}
	if x.CachedBlocks != 0 || x.UsedBlocks != 7 {
		t.Errorf("blocks: %d used, %d cached; want 7 and 0", x.UsedBlocks, x.CachedBlocks)
	}
	evs, _, _ := m.Events().Since(0, 0)
	var hit *Event
	for i := range evs {
		if evs[i].Kind == EventCacheHit {
			hit = &evs[i]
		}
	}
	if hit == nil || hit.Seq != 2 || hit.Tokens != 96 || len(hit.Blocks) != 6 {
		t.Errorf("cache-hit event %v, want sequence 2, 96 tokens, 6 blocks", hit)
	}
	mustCheck(t, m, st)

	// A prompt made only of cached blocks still computes its last block,
	// so the model has logits for the last token.
	mustAllocate(t, m, st, 3, seqTokens(1, 32), SeqOptions{})
	if r := mustAllocate(t, m, st, 4, seqTokens(1, 32), SeqOptions{}); r.Computed != 16 {
		t.Errorf("fully cached 32-token prompt: %d computed, want 16", r.Computed)
	}
	// Fully cached but one token longer: both blocks reused.
	if r := mustAllocate(t, m, st, 5, seqTokens(1, 33), SeqOptions{}); r.Computed != 32 {
		t.Errorf("33-token prompt over 2 cached blocks: %d computed, want 32", r.Computed)
	}
	mustCheck(t, m, st)
}

// TestForkCopyOnWrite: forking shares every block; the first append into
// the shared, partly filled last block copies exactly that block.
func TestForkCopyOnWrite(t *testing.T) {
	const bs = 16
	m, st := newTestManager(t, Config{BlockSize: bs}, 16)
	mustAllocate(t, m, st, 1, seqTokens(1, 20), SeqOptions{})
	if err := m.Fork(1, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.BlockTable(1), m.BlockTable(2)) {
		t.Fatalf("fork tables differ: %v and %v", m.BlockTable(1), m.BlockTable(2))
	}
	used := m.Metrics().UsedBlocks
	shared := m.BlockTable(1)[1]
	mustAppend(t, m, st, 1, []int32{100})
	x := m.Metrics()
	if x.CoWCopies != 1 || x.UsedBlocks != used+1 {
		t.Fatalf("after the parent's append: %d copies, %d used blocks; want 1 and %d", x.CoWCopies, x.UsedBlocks, used+1)
	}
	if got := m.BlockTable(2)[1]; got != shared {
		t.Errorf("the child's block changed to %d, want %d kept", got, shared)
	}
	if got := m.BlockTable(1)[1]; got == shared {
		t.Errorf("the parent still writes into shared block %d", got)
	}
	// The child is now the only owner: no second copy.
	mustAppend(t, m, st, 2, []int32{200})
	if x := m.Metrics(); x.CoWCopies != 1 {
		t.Errorf("the child's append copied again: %d copies", x.CoWCopies)
	}
	if m.Tokens(1)[20] != 100 || m.Tokens(2)[20] != 200 {
		t.Errorf("diverged tokens: %d and %d", m.Tokens(1)[20], m.Tokens(2)[20])
	}
	evs, _, _ := m.Events().Since(0, 0)
	n := 0
	for _, e := range evs {
		if e.Kind == EventCoW {
			n++
			if e.Seq != 1 || len(e.Blocks) != 2 || e.Blocks[0] != shared {
				t.Errorf("cow event %v, want sequence 1 copying block %d", e, shared)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d cow events, want 1", n)
	}
	mustCheck(t, m, st) // the copy reads back with the parent's tokens
}

// TestEvictionOrder: which cached block each policy evicts first.
// A's two blocks were cached first, then hit once by C, then released at
// step 3; B's were cached later, never hit, released at step 5.
func TestEvictionOrder(t *testing.T) {
	tests := []struct {
		policy EvictionPolicy
		want   []string // eviction order
	}{
		{LRU, []string{"a1", "a0", "b1", "b0"}},  // oldest release first, tail of a chain first
		{LFU, []string{"b1", "b0", "a1", "a0"}},  // never-hit blocks first
		{FIFO, []string{"a0", "a1", "b0", "b1"}}, // first cached first
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			const bs = 4
			m, st := newTestManager(t, Config{BlockSize: bs, Eviction: tt.policy}, 6)
			pa := seqTokens(100, 8)
			mustAllocate(t, m, st, 1, slices.Concat(pa, []int32{1}), SeqOptions{})
			names := map[int]string{m.BlockTable(1)[0]: "a0", m.BlockTable(1)[1]: "a1"}
			m.Tick()
			m.Free(1)
			m.Tick()
			if r := mustAllocate(t, m, st, 2, slices.Concat(pa, []int32{2}), SeqOptions{}); r.Computed != 8 {
				t.Fatalf("C reused %d tokens, want 8", r.Computed)
			}
			m.Tick()
			m.Free(2)
			m.Tick()
			mustAllocate(t, m, st, 3, slices.Concat(seqTokens(200, 8), []int32{3}), SeqOptions{})
			names[m.BlockTable(3)[0]], names[m.BlockTable(3)[1]] = "b0", "b1"
			m.Tick()
			m.Free(3)
			m.Tick()
			if x := m.Metrics(); x.CachedBlocks != 4 || x.FreeBlocks != 2 {
				t.Fatalf("%d cached, %d free; want 4 and 2", x.CachedBlocks, x.FreeBlocks)
			}
			// The snapshot's ranks predict the order.
			predicted := make([]string, 4)
			for _, b := range m.Snapshot().Blocks {
				if b.EvictRank >= 0 {
					predicted[b.EvictRank] = names[b.ID]
				}
			}
			if !slices.Equal(predicted, tt.want) {
				t.Errorf("snapshot ranks predict %v, want %v", predicted, tt.want)
			}
			_, cursor, _ := m.Events().Since(0, 0)
			var got []string
			for i := range 6 { // two free blocks, then four evictions
				mustAllocate(t, m, st, SeqID(10+i), []int32{int32(i)}, SeqOptions{})
				var evs []Event
				evs, cursor, _ = m.Events().Since(cursor, 0)
				for _, e := range evs {
					if e.Kind == EventEvict {
						for _, b := range e.Blocks {
							got = append(got, names[b])
						}
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("eviction order %v, want %v", got, tt.want)
			}
			if x := m.Metrics(); x.Evictions != 4 || x.CachedBlocks != 0 {
				t.Errorf("%d evictions, %d cached; want 4 and 0", x.Evictions, x.CachedBlocks)
			}
			mustCheck(t, m, st)
		})
	}
}

// TestSetEviction: changing the policy reorders the blocks already cached.
func TestSetEviction(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 2}, 4)
	mustAllocate(t, m, st, 1, seqTokens(1, 3), SeqOptions{}) // block x cached at step 0
	x := m.BlockTable(1)[0]
	m.Free(1)
	m.Tick()
	mustAllocate(t, m, st, 2, seqTokens(50, 3), SeqOptions{})
	y := m.BlockTable(2)[0]
	m.Free(2)
	m.Tick()
	mustAllocate(t, m, st, 3, seqTokens(1, 3), SeqOptions{}) // hit x: LRU would now keep x
	m.Free(3)
	if err := m.SetEviction(FIFO); err != nil {
		t.Fatal(err)
	}
	if err := m.SetEviction(9); err == nil {
		t.Error("SetEviction(9) accepted an unknown policy")
	}
	for i := range 3 {
		mustAllocate(t, m, st, SeqID(10+i), []int32{9}, SeqOptions{})
	}
	// Free blocks went first, then FIFO evicted x (cached first), not y.
	snap := m.Snapshot()
	if snap.Blocks[x].Hashed || !snap.Blocks[y].Hashed {
		t.Errorf("after FIFO eviction: x hashed %v, y hashed %v; want x evicted, y kept", snap.Blocks[x].Hashed, snap.Blocks[y].Hashed)
	}
	mustCheck(t, m, st)
}

func TestNoSpaceChangesNothing(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4}, 4)
	mustAllocate(t, m, st, 1, seqTokens(1, 10), SeqOptions{})
	before := m.Snapshot()
	_, err := m.Allocate(2, seqTokens(100, 8), SeqOptions{})
	var ns *NoSpaceError
	if !errors.As(err, &ns) || ns.Need != 2 || ns.Available != 1 || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("allocate beyond the pool: %v, want a NoSpaceError needing 2 of 1", err)
	}
	if !strings.Contains(err.Error(), "needs 2 blocks, 1 are free or evictable") {
		t.Errorf("message %q does not say what is missing", err)
	}
	if _, err := m.Append(1, seqTokens(20, 7)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append beyond the pool: %v", err)
	}
	if !sameState(before, m.Snapshot()) {
		t.Error("a refused operation changed the manager")
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown append", func() error { _, err := m.Append(9, []int32{1}); return err }(), "unknown sequence 9"},
		{"empty append", func() error { _, err := m.Append(1, nil); return err }(), "no tokens"},
		{"duplicate", func() error { _, err := m.Allocate(1, []int32{1}, SeqOptions{}); return err }(), "already exists"},
		{"empty prompt", func() error { _, err := m.Allocate(5, nil, SeqOptions{}); return err }(), "no tokens"},
		{"commit too far", m.Commit(1, 11), "cannot commit 11"},
		{"free unknown", m.Free(7), "unknown sequence 7"},
		{"fork unknown", m.Fork(7, 8), "unknown sequence 7"},
		{"swap in unswapped", m.SwapIn(1), "not swapped out"},
		{"contiguous without limit", func() error {
			c, _ := New(Config{BlockSize: 4, BlockBytes: 1, Budget: 8, Allocator: Contiguous}, nil)
			_, err := c.Allocate(1, []int32{1}, SeqOptions{})
			return err
		}(), "needs a maximum length"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, tt.err, tt.want)
		}
	}
	mustCheck(t, m, st)
}

// TestPreempt covers both modes, the host pool bound and swap-in.
func TestPreempt(t *testing.T) {
	t.Run("recompute", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4}, 8)
		toks := seqTokens(1, 10)
		mustAllocate(t, m, st, 1, toks, SeqOptions{})
		mustAppend(t, m, st, 1, []int32{42})
		r, err := m.Preempt(1, Recompute)
		if err != nil || r.Mode != Recompute {
			t.Fatalf("preempt: %+v, %v", r, err)
		}
		if want := append(slices.Clone(toks), 42); !slices.Equal(r.Tokens, want) {
			t.Fatalf("requeued tokens %v, want %v", r.Tokens, want)
		}
		if m.Has(1) || m.Metrics().UsedBlocks != 0 || m.Metrics().RecomputePreemptions != 1 {
			t.Fatalf("after recompute preemption: has %v, metrics %+v", m.Has(1), m.Metrics())
		}
		// Requeued: its two full blocks are still cached.
		if a := mustAllocate(t, m, st, 1, r.Tokens, SeqOptions{}); a.Computed != 8 {
			t.Errorf("requeued sequence reused %d tokens, want 8", a.Computed)
		}
		mustCheck(t, m, st)
	})
	t.Run("swap", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4, HostBudget: 1 << 20}, 6)
		mustAllocate(t, m, st, 1, seqTokens(1, 10), SeqOptions{})
		before := m.BlockTable(1)
		r, err := m.Preempt(1, Swap)
		if err != nil || r.Mode != Swap || r.Bytes == 0 {
			t.Fatalf("swap: %+v, %v", r, err)
		}
		if !m.Swapped(1) || m.BlockTable(1) != nil {
			t.Fatal("swapped sequence still on the device")
		}
		if _, err := m.Append(1, []int32{1}); err == nil || !strings.Contains(err.Error(), "swapped out") {
			t.Errorf("append to a swapped sequence: %v", err)
		}
		mustCheck(t, m, st)
		// Another sequence overwrites every device block meanwhile.
		mustAllocate(t, m, st, 2, seqTokens(500, 24), SeqOptions{})
		if err := m.SwapIn(1); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("swap in with a full pool: %v", err)
		}
		m.Free(2)
		if err := m.SwapIn(1); err != nil {
			t.Fatal(err)
		}
		x := m.Metrics()
		if x.SwapPreemptions != 1 || x.SwapOutBytes != r.Bytes || x.HostBytes != 0 || x.HostBlocks != 0 {
			t.Errorf("metrics after swap in: %+v", x)
		}
		if x.SwapInBytes != x.SwapOutBytes {
			t.Errorf("swapped %d bytes out, %d in; every block was evicted, so all must load", x.SwapOutBytes, x.SwapInBytes)
		}
		t.Logf("table before %v, after %v", before, m.BlockTable(1))
		mustCheck(t, m, st) // the tokens read back from wherever they landed
		mustAppend(t, m, st, 1, []int32{7, 8, 9})
		mustCheck(t, m, st)
	})
	t.Run("swap in reuses cached blocks", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4, HostBudget: 1 << 20}, 6)
		mustAllocate(t, m, st, 1, seqTokens(1, 10), SeqOptions{})
		r, _ := m.Preempt(1, Swap)
		if err := m.SwapIn(1); err != nil {
			t.Fatal(err)
		}
		// Its two full blocks never left the prefix cache: only the partial one loads.
		if x := m.Metrics(); x.SwapInBytes != r.Bytes/3 {
			t.Errorf("swap in loaded %d bytes of %d, want one block's %d", x.SwapInBytes, r.Bytes, r.Bytes/3)
		}
		mustCheck(t, m, st)
	})
	t.Run("host pool full", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4, HostBudget: 100}, 6)
		mustAllocate(t, m, st, 1, seqTokens(1, 10), SeqOptions{})
		r, err := m.Preempt(1, Swap)
		if err != nil || r.Mode != Recompute || !strings.Contains(r.Reason, "host pool full") || len(r.Tokens) != 10 {
			t.Fatalf("swap into a too small host pool: %+v, %v", r, err)
		}
		evs, _, _ := m.Events().Since(0, 0)
		last := evs[len(evs)-1]
		if last.Kind != EventPreempt || !strings.Contains(last.Reason, "swap fell back to recompute: host pool full") {
			t.Errorf("last event %v, want a preempt saying swap fell back", last)
		}
		if x := m.Metrics(); x.SwapFallbacks != 1 || x.RecomputePreemptions != 1 || x.HostBytes != 0 {
			t.Errorf("metrics: %+v", x)
		}
		mustCheck(t, m, st)
	})
	t.Run("freed while swapped", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4, HostBudget: 1 << 20}, 6)
		mustAllocate(t, m, st, 1, seqTokens(1, 10), SeqOptions{})
		m.Preempt(1, Swap)
		if err := m.Free(1); err != nil {
			t.Fatal(err)
		}
		if x := m.Metrics(); x.HostBytes != 0 || x.Sequences != 0 {
			t.Errorf("after freeing a swapped sequence: %+v", x)
		}
		mustCheck(t, m, st)
	})
}

// TestHashCollision: a cached block under the right hash but holding other
// tokens (what a collision would look like) is not reused.
func TestHashCollision(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4}, 8)
	toks := seqTokens(1, 9)
	mustAllocate(t, m, st, 1, toks, SeqOptions{})
	b0 := m.BlockTable(1)[0]
	m.Free(1)
	m.p.blocks[b0].tokens[0] = 999 // same hash, different contents
	r, err := m.Allocate(2, toks, SeqOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Computed != 0 || m.Metrics().HashCollisions != 1 {
		t.Errorf("computed %d, %d collisions; want 0 and 1", r.Computed, m.Metrics().HashCollisions)
	}
	if slices.Contains(m.BlockTable(2), b0) {
		t.Errorf("the colliding block %d was reused", b0)
	}
}
