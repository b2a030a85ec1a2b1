package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
)

// TestSlowMotionTwoChats runs two chats under slow motion, the second
// submitted while the first's step delay runs (it wakes the engine), and
// checks that steps come once per delay, within 20 %: the engine used to
// keep the wake-up and run at full speed from then on.
func TestSlowMotionTwoChats(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	const delay = 80 * time.Millisecond
	if err := e.SetDelay(delay); err != nil {
		t.Fatal(err)
	}
	type obs struct {
		at   time.Time
		step int64
		dur  time.Duration
		live int
	}
	var mu sync.Mutex
	var seen []obs
	stop := e.Subscribe(func(s *Snapshot) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 || seen[len(seen)-1].step != s.Last.Step {
			seen = append(seen, obs{time.Now(), s.Last.Step, s.Last.Duration, len(s.Requests)})
		}
	})
	defer stop()
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	submit := func(p string) *Stream {
		st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 16, IgnoreEOS: true, Sampling: &sp})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a := submit("Once upon a time")
	<-a.C // the first token: the second chat comes during a delay
	b := submit("One day, a little bird")
	a.Collect()
	b.Collect()
	mu.Lock()
	defer mu.Unlock()
	// The steps while both chats ran.
	var both []obs
	for _, o := range seen {
		if o.live == 2 {
			both = append(both, o)
		}
	}
	if len(both) < 8 {
		t.Fatalf("only %d steps seen with both chats running", len(both))
	}
	first, last := both[0], both[len(both)-1]
	steps := float64(last.step - first.step)
	var work time.Duration
	for _, o := range both[1:] {
		work += o.dur
	}
	want := 1 / (delay + work/time.Duration(len(both)-1)).Seconds() // steps a second
	got := steps / last.at.Sub(first.at).Seconds()
	t.Logf("%.0f steps in %v: %.2f steps/s, want %.2f (delay %v)", steps, last.at.Sub(first.at), got, want, delay)
	if got > want*1.2 || got < want*0.8 {
		t.Errorf("two chats under a %v delay ran at %.2f steps/s; the setting gives %.2f", delay, got, want)
	}
}

// TestWaitForAndClearCache waits for a request's blocks through the
// subscription, then clears the cache: no block stays cached and the
// counters start again.
func TestWaitForAndClearCache(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	st, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time, there was a little girl named Lily. She loved to play", MaxTokens: 40, IgnoreEOS: true, Sampling: &sp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.WaitFor(ctx, func(s *Snapshot) bool { return len(s.Requests) == 1 && s.Requests[0].Samples[0].Generated >= 5 })
	if err != nil {
		t.Fatal(err)
	}
	if s.Cache.Metrics.UsedBlocks == 0 {
		t.Error("the snapshot WaitFor returned shows no used block")
	}
	st.Collect()
	if _, err := e.WaitFor(ctx, func(s *Snapshot) bool { return len(s.Requests) == 0 && s.Cache.Metrics.CachedBlocks > 0 }); err != nil {
		t.Fatal(err)
	}
	if err := e.ClearCache(); err != nil {
		t.Fatal(err)
	}
	m2 := e.Snapshot().Cache.Metrics
	if m2.CachedBlocks != 0 || m2.PrefixQueryTokens != 0 || m2.UsedBlocks != 0 {
		t.Errorf("after ClearCache: %d cached blocks, %d prefix queries, %d used", m2.CachedBlocks, m2.PrefixQueryTokens, m2.UsedBlocks)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	if _, err := e.WaitFor(wctx, func(*Snapshot) bool { return false }); err != context.DeadlineExceeded {
		t.Errorf("WaitFor on a condition never true: %v", err)
	}
}

// TestCapacityMatchesThePool checks Capacity against the engine's pool.
func TestCapacityMatchesThePool(t *testing.T) {
	m, tok := stories(t)
	for _, p := range []kvstore.Precision{kvstore.F16, kvstore.Int4} {
		cfg := DefaultConfig()
		cfg.Cache.K, cfg.Cache.V = p, p
		cfg.Cache.Budget = 256 << 10
		f, err := Capacity(m, cfg, 200)
		if err != nil {
			t.Fatal(err)
		}
		e := newEngine(t, m, tok, cfg)
		got := e.Snapshot().Cache.Metrics
		if f.Blocks != got.TotalBlocks || f.BlockBytes != got.BlockBytes || f.PerSeq != 13 || f.Seqs != got.TotalBlocks/13 {
			t.Errorf("%s: Capacity %+v; the pool has %d blocks of %d bytes", p, f, got.TotalBlocks, got.BlockBytes)
		}
		cfg.Cache.Allocator = kvcache.Contiguous
		c, err := Capacity(m, cfg, 200)
		if err != nil {
			t.Fatal(err)
		}
		if want := (m.Context + 15) / 16; c.PerSeq != want {
			t.Errorf("%s contiguous: %d blocks a sequence, want the context's %d", p, c.PerSeq, want)
		}
	}
}

// TestDecodeRateFollowsSlowMotionAndIdles: the tokens/s figure is over
// the last RateWindow of wall time, so under slow motion it is the slow
// rate (not the rate of the steps' own work), and it falls to zero once
// the engine is idle.
func TestDecodeRateFollowsSlowMotionAndIdles(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	const delay = 50 * time.Millisecond
	if err := e.SetDelay(delay); err != nil {
		t.Fatal(err)
	}
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	st, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 60, IgnoreEOS: true, Sampling: &sp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// After a full window of generation, one token a step.
	s, err := e.WaitFor(ctx, func(s *Snapshot) bool {
		return len(s.Requests) == 1 && s.Requests[0].Samples[0].Generated >= 2+int(RateWindow/delay)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 1 / (delay + s.Last.Duration).Seconds()
	if s.DecodeTPS > want*1.25 || s.DecodeTPS < want*0.75 {
		t.Errorf("at %v a step the rate reads %.1f tokens/s; one token a step is %.1f", delay, s.DecodeTPS, want)
	}
	st.Collect()
	if _, err := e.WaitFor(ctx, func(s *Snapshot) bool { return len(s.Requests) == 0 && s.DecodeTPS == 0 }); err != nil {
		t.Errorf("the rate never fell to zero once idle: %v (last %.1f)", err, e.Snapshot().DecodeTPS)
	}
}
