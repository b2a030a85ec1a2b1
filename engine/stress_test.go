package engine

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
)

// TestStress submits, cancels and reconfigures at random from several
// goroutines. Every request must end exactly once (one final chunk per
// sample, then a closed stream) and no block may leak.
func TestStress(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Cache.Budget = 40 * int64(kvstore.BlockBytes(m.CacheConfig(16, 1, kvstore.F16, kvstore.F16)))
	e := newEngine(t, m, tok, cfg)

	rounds := 30
	if testing.Short() {
		rounds = 20
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := map[string]int{}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range rounds {
				sp := sample.DefaultParams()
				sp.Seed = uint64(i)
				r := Request{Prompt: prompts[rng.IntN(len(prompts))].text, MaxTokens: 1 + rng.IntN(40), N: 1 + rng.IntN(3), Sampling: &sp}
				if rng.IntN(4) == 0 {
					r.Stop = []string{"."}
				}
				for _, reason := range submitAndCheck(t, e, r, rng, 3*time.Millisecond) {
					mu.Lock()
					ended[string(reason)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 1))
		sizes := []int{8, 16, 32}
		precs := []kvstore.Precision{kvstore.F16, kvstore.Q8_0, kvstore.F32, kvstore.Int8}
		for range rounds / 4 {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			c := e.Config()
			c.Cache.BlockSize = sizes[rng.IntN(len(sizes))]
			c.Cache.K = precs[rng.IntN(len(precs))]
			c.Cache.V = precs[rng.IntN(len(precs))]
			c.Cache.Preempt = kvcache.PreemptMode(rng.IntN(2))
			c.Cache.Eviction = kvcache.EvictionPolicy(rng.IntN(3))
			if err := e.Reconfigure(c); err != nil && !strings.Contains(err.Error(), "holds no block") {
				t.Errorf("reconfigure: %v", err)
			}
		}
	}()
	wg.Wait()
	checkNoLeak(t, e)
	t.Logf("finish reasons: %v", ended)
}

// TestReconfigureDuringGeneration changes block size and precision while
// requests run: every request completes.
func TestReconfigureDuringGeneration(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	var streams []*Stream
	for i := range 4 {
		s, err := e.Submit(context.Background(), request(i))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	for range 10 {
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
	c := e.Config()
	c.Cache.BlockSize = 32
	c.Cache.K, c.Cache.V = kvstore.Q8_0, kvstore.Q8_0
	if err := e.Reconfigure(c); err != nil {
		t.Fatal(err)
	}
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		texts, finals := s.Collect()
		if finals[0].Reason != FinishLength || finals[0].Generated != prompts[i].max {
			t.Errorf("request %d ended %s after %d tokens (%v), want length after %d", i, finals[0].Reason, finals[0].Generated, finals[0].Err, prompts[i].max)
		}
		if texts[0] == "" {
			t.Errorf("request %d: no text", i)
		}
	}
	snap := e.Snapshot()
	if snap.Cache.BlockSize != 32 || snap.Config.Cache.K != kvstore.Q8_0 {
		t.Errorf("snapshot shows block size %d, K %s", snap.Cache.BlockSize, snap.Config.Cache.K)
	}
	found := false
	evs, _, _ := e.Events(0, 0)
	for _, ev := range evs {
		if ev.Kind == "reconfigure" && strings.Contains(ev.Text, "block size 16 → 32") && strings.Contains(ev.Text, "recompute") {
			found = true
		}
	}
	if !found {
		t.Error("no reconfigure event explains the rebuild")
	}
	checkNoLeak(t, e)
}

// TestStressHarsh drives the corners together under -race: a tight pool,
// swap preemption, a 64-token context with every overflow policy, n up to
// 4, NoCache, priorities, stop strings, cancellations and reconfiguration.
// No request may hang or fail, every sample ends once, nothing leaks.
func TestStressHarsh(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Cache.BlockSize = 8
	cfg.Cache.Preempt = kvcache.Swap
	cfg.Cache.HostBudget = 1 << 24
	cfg.Context = 64
	cfg.Sched.MaxSeqs = 4
	cfg.Sched.StepTokens = 24
	cfg.Cache.Budget = 14 * int64(kvstore.BlockBytes(m.CacheConfig(8, 1, kvstore.F16, kvstore.F16)))
	e := newEngine(t, m, tok, cfg)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	pols := []kvcache.OverflowPolicy{kvcache.Stop, kvcache.RollingWindow, kvcache.TruncateMiddle}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for i := range rounds {
				sp := sample.DefaultParams()
				sp.Seed = uint64(i)
				pol := pols[rng.IntN(3)]
				r := Request{Prompt: prompts[rng.IntN(len(prompts))].text, MaxTokens: 1 + rng.IntN(120), N: 1 + rng.IntN(4), Sampling: &sp, Overflow: &pol, IgnoreEOS: rng.IntN(2) == 0, NoCache: rng.IntN(8) == 0, Priority: rng.IntN(3)}
				if rng.IntN(4) == 0 {
					r.Stop = []string{"."}
				}
				submitAndCheck(t, e, r, rng, 20*time.Millisecond)
				if err := e.call(func() error { return e.mgr.Check() }); err != nil {
					t.Errorf("check: %v", err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(5, 1))
		for range 8 {
			time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			c := e.Config()
			c.Cache.BlockSize = []int{8, 16}[rng.IntN(2)]
			c.Cache.K = []kvstore.Precision{kvstore.F16, kvstore.Q8_0}[rng.IntN(2)]
			c.Cache.Preempt = kvcache.PreemptMode(rng.IntN(2))
			c.Sched.Policy = 0
			if rng.IntN(2) == 0 {
				c.Sched.Policy = 1
			}
			if err := e.Reconfigure(c); err != nil && !strings.Contains(err.Error(), "stop it or choose a larger budget") {
				t.Errorf("reconfigure: %v", err)
			}
		}
	}()
	wg.Wait()
	checkNoLeak(t, e)
}

// submitAndCheck submits r, cancels it after a random delay under maxDelay
// one time in three, and reads its stream: every sample must end exactly
// once, without error, within 2 minutes. It returns the finish reasons.
func submitAndCheck(t *testing.T, e *Engine, r Request, rng *rand.Rand, maxDelay time.Duration) []FinishReason {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.Submit(ctx, r)
	if err != nil {
		t.Error(err)
		return nil
	}
	if rng.IntN(3) == 0 {
		d := time.Duration(rng.Int64N(int64(maxDelay)))
		go func() { time.Sleep(d); cancel() }()
	}
	done := map[int]int{}
	var reasons []FinishReason
	timeout := time.After(2 * time.Minute) // a hang, not a slow machine (-race, 2 cores)
	for {
		select {
		case c, ok := <-s.C:
			if !ok {
				if len(done) != r.N {
					t.Errorf("%d of %d samples ended", len(done), r.N)
				}
				for i, n := range done {
					if n != 1 {
						t.Errorf("sample %d ended %d times", i, n)
					}
				}
				return reasons
			}
			if c.Done {
				done[c.Sample]++
				reasons = append(reasons, c.Reason)
				if c.Reason == FinishError {
					t.Errorf("request failed: %v", c.Err)
				}
			}
		case <-timeout:
			t.Errorf("request %d hung; snapshot %+v", s.ID, e.Snapshot().Requests)
			return reasons
		}
	}
}
