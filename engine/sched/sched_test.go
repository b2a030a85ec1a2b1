package sched

import (
	"kvscope/engine/kvstore"
	"testing"

	"kvscope/engine/kvcache"
)

// newSched makes a scheduler over a bookkeeping-only manager of n blocks of
// 4 tokens (no tensors: the scheduler never touches them).
func newSched(t *testing.T, n int, cfg Config) *Scheduler {
	t.Helper()
	m, err := kvcache.New(kvcache.Config{BlockSize: 4, BlockBytes: 1, Budget: int64(n)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func seq(id int, n int) *Seq {
	q := &Seq{ID: kvcache.SeqID(id), Tokens: make([]int32, n)}
	for i := range q.Tokens {
		q.Tokens[i] = int32(id*1000 + i) // distinct: no prefix sharing
	}
	return q
}

// run executes a plan as the engine would: commit what was computed and
// give every sequence that got logits a new token.
func run(t *testing.T, s *Scheduler, p Plan) {
	t.Helper()
	for _, w := range p.Work {
		if err := s.m.Commit(w.Seq.ID, w.End); err != nil {
			t.Fatal(err)
		}
		if w.Logits {
			w.Seq.Tokens = append(w.Seq.Tokens, 7)
		}
	}
}

func TestChunkedPrefillAndDecodesFirst(t *testing.T) {
	s := newSched(t, 100, Config{MaxSeqs: 4, StepTokens: 10})
	a, b := seq(1, 6), seq(2, 12)
	s.Add(a)
	s.Add(b)
	p, err := s.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	// a's whole prompt (6) and the first 4 tokens of b fill the budget.
	if len(p.Work) != 2 || p.Work[0].End-p.Work[0].Start != 6 || p.Work[1].End-p.Work[1].Start != 4 || p.Work[1].Logits {
		t.Fatalf("step 1: %+v", p.Work)
	}
	run(t, s, p)
	p, _ = s.Schedule()
	// a decodes first (1 token), then b's prefill continues (8 tokens, to its end).
	if len(p.Work) != 2 || p.Work[0].Seq != a || p.Decode != 1 || p.Work[1].Start != 4 || p.Work[1].End != 12 || !p.Work[1].Logits {
		t.Fatalf("step 2: %+v (decode %d, prefill %d)", p.Work, p.Decode, p.Prefill)
	}
}

func TestMaxSeqsAndBudget(t *testing.T) {
	s := newSched(t, 100, Config{MaxSeqs: 2, StepTokens: 100})
	for i := range 3 {
		s.Add(seq(i+1, 3))
	}
	p, _ := s.Schedule()
	if len(p.Admitted) != 2 {
		t.Errorf("admitted %d, want 2 (MaxSeqs)", len(p.Admitted))
	}
	if w, r, _ := s.Counts(); w != 1 || r != 2 {
		t.Errorf("waiting %d, running %d", w, r)
	}
}

// TestPreemptNewestFirst: when the pool is full, FCFS preempts the newest
// running sequence, which then waits and later recomputes.
func TestPreemptNewestFirst(t *testing.T) {
	for _, mode := range []kvcache.PreemptMode{kvcache.Recompute} {
		s := newSched(t, 4, Config{MaxSeqs: 4, StepTokens: 100, Preempt: mode})
		a, b := seq(1, 8), seq(2, 7) // 2 blocks each: the pool is full
		s.Add(a)
		s.Add(b)
		p, _ := s.Schedule()
		run(t, s, p)
		if len(p.Admitted) != 2 {
			t.Fatalf("admitted %d", len(p.Admitted))
		}
		// a now needs a third block (token 9): b, the newest, is preempted.
		p, err := s.Schedule()
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Preempted) != 1 || p.Preempted[0] != b || b.State != Waiting || b.Preemptions != 1 {
			t.Fatalf("preempted %v, b state %s", p.Preempted, b.State)
		}
		if len(p.Work) != 1 || p.Work[0].Seq != a {
			t.Fatalf("work %+v", p.Work)
		}
		run(t, s, p)
		// Once a finishes, b comes back: its first block is still in the
		// prefix cache, so it recomputes only the rest.
		s.Remove(a)
		p, _ = s.Schedule()
		if len(p.Admitted) != 1 || p.Admitted[0] != b || p.Work[0].Start != 4 || p.Work[0].End != len(b.Tokens) {
			t.Fatalf("after a finished: %+v", p)
		}
	}
}

func TestPriorityPolicy(t *testing.T) {
	s := newSched(t, 100, Config{MaxSeqs: 1, StepTokens: 100, Policy: Priority})
	low, high := seq(1, 3), seq(2, 3)
	high.Priority = 5
	s.Add(low)
	s.Add(high)
	p, _ := s.Schedule()
	if len(p.Admitted) != 1 || p.Admitted[0] != high {
		t.Errorf("admitted %v, want the high-priority sequence", p.Admitted)
	}
}

func TestTooBigFails(t *testing.T) {
	s := newSched(t, 2, Config{MaxSeqs: 1, StepTokens: 100})
	q := seq(1, 20)
	s.Add(q)
	p, _ := s.Schedule()
	if len(p.Failed) != 1 || p.Failed[0].Seq != q || q.State != Finished {
		t.Fatalf("failed %v", p.Failed)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{MaxSeqs: 0, StepTokens: 10},
		{MaxSeqs: 4, StepTokens: 2},
		{MaxSeqs: 1, StepTokens: 10, Watermark: 1.5},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestShiftedVictimIsRecomputed: a sequence whose rolling window shifted in
// this plan, and which is then preempted before the engine re-positions its
// kept keys, must not be swapped out with keys at their old positions: it
// is preempted by recompute and its shift dropped.
func TestShiftedVictimIsRecomputed(t *testing.T) {
	sc := kvstore.Config{Layers: 1, KVHeads: 1, HeadDim: 4, BlockSize: 4, Blocks: 5, K: kvstore.F16, V: kvstore.F16}
	st, err := kvstore.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	bb := kvstore.BlockBytes(sc)
	m, err := kvcache.New(kvcache.Config{BlockSize: 4, BlockBytes: bb, Budget: int64(5 * bb), HostBudget: int64(1000 * bb)}, st)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := New(Config{MaxSeqs: 4, StepTokens: 100, Preempt: kvcache.Swap}, m)
	a := seq(1, 8)
	s.Add(a)
	p, _ := s.Schedule()
	run(t, s, p)
	var pp Plan
	if err := s.preempt(a, &pp); err != nil || a.State != Swapped {
		t.Fatalf("setup: swapping a out: %v, %s", err, a.State)
	}
	roll := kvcache.RollingWindow
	d := seq(2, 12)
	d.Opts = kvcache.SeqOptions{MaxLen: 12, Overflow: &roll, Sinks: 4}
	s.Add(d)
	s.swapped = nil // admit d although a is swapped out (a fork could do this)
	p, err = s.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	s.swapped = []*Seq{a}
	run(t, s, p)
	p, err = s.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Preempted) != 1 || p.Preempted[0] != d || d.State != Waiting {
		t.Fatalf("preempted %v, d is %s; want d preempted by recompute", p.Preempted, d.State)
	}
	for _, sh := range p.Shifts {
		if sh.Seq.State == Swapped {
			t.Fatalf("sequence %d was shifted and swapped out in one plan", sh.Seq.ID)
		}
	}
	decode := 0
	for _, w := range p.Work {
		if !w.Prefill {
			decode++
		}
	}
	if decode != p.Decode {
		t.Errorf("plan counts %d decode tokens, its work has %d", p.Decode, decode)
	}
}
