package kvcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"kvscope/engine/kvstore"
)

// driver plays a random engine against a Manager over a real kvstore:
// allocate, append, fork, free, preempt (both modes), swap in, requeue,
// policy changes and ticks. After every operation it checks the manager's
// invariants, that a refused operation changed nothing, and that every
// computed token of every sequence reads back from the store as written.
type driver struct {
	m        *Manager
	st       *kvstore.Store
	rnd      func(n int) int // in [0, n); -1 when the input is used up
	alloc    Allocator
	live     []SeqID
	requeue  map[SeqID][]int32
	opts     map[SeqID]SeqOptions
	next     SeqID
	prefixes [][]int32
	ops      int
}

func newDriver(tb testing.TB, rnd func(int) int) (*driver, error) {
	bs := []int{1, 2, 3, 4, 5, 8, 16}[max(0, rnd(7))]
	alloc := Allocator(max(0, rnd(2)))
	blocks := 12 + max(0, rnd(20))
	sc := storeConfig(bs, blocks)
	st, err := kvstore.New(sc)
	if err != nil {
		return nil, err
	}
	bb := kvstore.BlockBytes(sc)
	m, err := New(Config{BlockSize: bs, BlockBytes: bb, Budget: int64(blocks * bb), Allocator: alloc,
		Eviction: EvictionPolicy(max(0, rnd(3))), HostBudget: int64(max(0, rnd(3)) * 4 * (bb + 64)),
		EventBuffer: 64, KPrecision: "f32", VPrecision: "f32"}, st)
	if err != nil {
		return nil, err
	}
	d := &driver{m: m, st: st, rnd: rnd, alloc: alloc, requeue: map[SeqID][]int32{}, opts: map[SeqID]SeqOptions{}}
	for i := range 3 {
		d.prefixes = append(d.prefixes, seqTokens(int32(1000*(i+1)), 40))
	}
	return d, nil
}

func (d *driver) pick(swapped bool) (SeqID, bool) {
	var c []SeqID
	for _, id := range d.live {
		if d.m.Swapped(id) == swapped {
			c = append(c, id)
		}
	}
	if len(c) == 0 {
		return 0, false
	}
	i := d.rnd(len(c))
	if i < 0 {
		return 0, false
	}
	return c[i], true
}

func (d *driver) drop(id SeqID) {
	d.live = slices.DeleteFunc(d.live, func(x SeqID) bool { return x == id })
}

func (d *driver) seqOptions() SeqOptions {
	bs := d.m.BlockSize()
	pol := OverflowPolicy(max(0, d.rnd(3)))
	o := SeqOptions{Overflow: &pol}
	if d.alloc == Contiguous || d.rnd(2) == 1 {
		lo := max(10, (d.m.sinkBlocks(4)+2)*bs)
		o.MaxLen = lo + max(0, d.rnd(4*bs+8))
	}
	return o
}

// allocate registers tokens under id, writes what is not cached, commits.
func (d *driver) allocate(id SeqID, toks []int32, o SeqOptions) error {
	r, err := d.m.Allocate(id, toks, o)
	if err != nil {
		return err
	}
	d.live = append(d.live, id)
	d.opts[id] = o
	return writeKV(d.m, d.st, id, r.Computed)
}

// step runs one random operation; it returns false when the input ran out.
func (d *driver) step() (bool, error) {
	op := d.rnd(12)
	if op < 0 {
		return false, nil
	}
	d.ops++
	before := d.m.Snapshot()
	var err error
	what := ""
	switch op {
	case 0, 1, 2: // a new request, often sharing a prefix
		id := d.next
		d.next++
		p := d.prefixes[max(0, d.rnd(3))]
		toks := slices.Clone(p[:max(0, d.rnd(len(p)))])
		for range 1 + max(0, d.rnd(12)) {
			toks = append(toks, int32(max(0, d.rnd(50))))
		}
		what = fmt.Sprintf("allocate %d (%d tokens)", id, len(toks))
		err = d.allocate(id, toks, d.seqOptions())
	case 3, 4:
		id, ok := d.pick(false)
		if !ok {
			return true, nil
		}
		toks := seqTokens(int32(max(0, d.rnd(50))), 1+max(0, d.rnd(6)))
		what = fmt.Sprintf("append %d tokens to %d", len(toks), id)
		var r AppendResult
		if r, err = d.m.Append(id, toks); err == nil {
			if r.Overflow != nil && r.Overflow.Policy == RollingWindow {
				rotate(d.m, d.st, id, r.Overflow)
			}
			err = writeKV(d.m, d.st, id, r.Start)
		}
	case 5:
		id, ok := d.pick(false)
		if !ok {
			return true, nil
		}
		child := d.next
		d.next++
		what = fmt.Sprintf("fork %d into %d", id, child)
		if err = d.m.Fork(id, child); err == nil {
			d.live = append(d.live, child)
			d.opts[child] = d.opts[id]
		}
	case 6:
		id, ok := d.pick(d.rnd(4) == 0)
		if !ok {
			return true, nil
		}
		what = fmt.Sprintf("free %d", id)
		if err = d.m.Free(id); err == nil {
			d.drop(id)
		}
	case 7, 8:
		id, ok := d.pick(false)
		if !ok {
			return true, nil
		}
		mode := PreemptMode(op - 7)
		what = fmt.Sprintf("preempt %d (%s)", id, mode)
		var r PreemptResult
		if r, err = d.m.Preempt(id, mode); err == nil && r.Mode == Recompute {
			d.drop(id)
			d.requeue[id] = r.Tokens
		}
	case 9:
		id, ok := d.pick(true)
		if !ok {
			return true, nil
		}
		what = fmt.Sprintf("swap in %d", id)
		err = d.m.SwapIn(id)
	case 10:
		for id, toks := range d.requeue {
			what = fmt.Sprintf("requeue %d", id)
			if err = d.allocate(id, toks, d.opts[id]); err == nil {
				delete(d.requeue, id)
			}
			break
		}
	case 11:
		what = "tick"
		d.m.Tick()
		if d.rnd(4) == 0 {
			err = d.m.SetEviction(EvictionPolicy(max(0, d.rnd(3))))
		}
	}
	if err != nil {
		if !expected(err) {
			return false, fmt.Errorf("op %d, %s: %w", d.ops, what, err)
		}
		if after := d.m.Snapshot(); !sameState(before, after) {
			return false, fmt.Errorf("op %d, %s: refused (%v) but changed the manager", d.ops, what, err)
		}
	}
	if err := d.m.Check(); err != nil {
		return false, fmt.Errorf("op %d, %s: %w", d.ops, what, err)
	}
	for _, id := range d.live {
		if err := verifyKV(d.m, d.st, id); err != nil {
			return false, fmt.Errorf("op %d, %s: %w", d.ops, what, err)
		}
	}
	return true, nil
}

// TestInvariantsRandom runs seeded random operation sequences.
func TestInvariantsRandom(t *testing.T) {
	seeds, steps := 60, 400
	if testing.Short() {
		seeds = 10
	}
	var totals Metrics
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 42))
		d, err := newDriver(t, func(n int) int { return rng.IntN(n) })
		if err != nil {
			t.Fatal(err)
		}
		for range steps {
			if _, err := d.step(); err != nil {
				t.Fatalf("seed %d (block size %d, %s, %s): %v", seed, d.m.BlockSize(), d.alloc, d.m.Config().Eviction, err)
			}
		}
		x := d.m.Metrics()
		totals.PrefixHitTokens += x.PrefixHitTokens
		totals.Evictions += x.Evictions
		totals.CoWCopies += x.CoWCopies
		totals.SwapPreemptions += x.SwapPreemptions
		totals.SwapFallbacks += x.SwapFallbacks
		totals.RecomputePreemptions += x.RecomputePreemptions
		totals.Overflows += x.Overflows
		totals.ShiftCopies += x.ShiftCopies
	}
	// The random walk must actually reach every mechanism.
	for name, v := range map[string]int64{
		"prefix hits": totals.PrefixHitTokens, "evictions": totals.Evictions, "copies on write": totals.CoWCopies,
		"swaps": totals.SwapPreemptions, "swap fallbacks": totals.SwapFallbacks, "recomputes": totals.RecomputePreemptions,
		"overflows": totals.Overflows, "contiguous shifts": totals.ShiftCopies,
	} {
		if v == 0 {
			t.Errorf("no %s in %d random runs", name, seeds)
		}
	}
	t.Logf("%d runs of %d ops: %+v", seeds, steps, totals)
}

// FuzzManager drives the manager with operations decoded from the input.
func FuzzManager(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 3, 10, 4, 0, 5, 0, 8, 9, 0, 7, 10, 6})
	f.Add([]byte{3, 1, 2, 5, 0, 1, 20, 9, 1, 1, 30, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox"))
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		rnd := func(n int) int {
			if i >= len(data) {
				return -1
			}
			b := int(data[i])
			i++
			return b % n
		}
		d, err := newDriver(t, rnd)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ok, err := d.step()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
		}
	})
}
