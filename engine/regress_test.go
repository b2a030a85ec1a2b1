package engine

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
)

// These tests pin bugs a review found; each failed before its fix.

func blocksOf(m interface {
	CacheConfig(int, int, kvstore.Precision, kvstore.Precision) kvstore.Config
}, n, bs int) int64 {
	return int64(n * kvstore.BlockBytes(m.CacheConfig(bs, 1, kvstore.F16, kvstore.F16)))
}

// A lone sequence that outgrows the whole pool under swap preemption used
// to swap itself out and in forever; now it ends, saying why.
func TestOutgrowingTheWholeCacheEnds(t *testing.T) {
	m, tok := stories(t)
	for _, mode := range []kvcache.PreemptMode{kvcache.Swap, kvcache.Recompute} {
		cfg := DefaultConfig()
		cfg.Cache.BlockSize = 8
		cfg.Cache.Preempt = mode
		cfg.Cache.HostBudget = 1 << 20
		cfg.Cache.Budget = blocksOf(m, 4, 8) // 32 token slots
		e := newEngine(t, m, tok, cfg)
		s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 100, Sampling: greedy, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan Chunk)
		go func() { _, f := s.Collect(); done <- f[0] }()
		select {
		case f := <-done:
			if f.Reason != FinishLength || f.Err == nil || !strings.Contains(f.Err.Error(), "whole cache has 4") || f.Generated < 20 {
				t.Errorf("%s: ended %s after %d tokens: %v", mode, f.Reason, f.Generated, f.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the request never finished", mode)
		}
		checkNoLeak(t, e)
	}
}

// With a step delay, a command arriving while the loop waited could
// deadlock the engine goroutine.
func TestDelayAndCommandsDoNotDeadlock(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	if err := e.SetDelay(time.Microsecond); err != nil {
		t.Fatal(err)
	}
	s, _ := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 200, Sampling: greedy, IgnoreEOS: true})
	go s.Collect()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.do(func() {})
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	res := make(chan struct{})
	go func() { e.Config(); close(res) }()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine goroutine is stuck")
	}
}

// Text held back as a possible stop string must not be lost when the
// sample ends on an end-of-generation token.
func TestHeldTextSurvivesEOS(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	e.Pause()
	s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 10, Sampling: greedy, Stop: []string{"The end"}})
	if err != nil {
		t.Fatal(err)
	}
	e.call(func() error {
		sm := e.reqs[s.ID].samples[0]
		text, _ := sm.cutStop("Once The", sm.r.req.Stop) // "The" is held back
		sm.r.stream.push(Chunk{Text: text})
		e.finish(sm, FinishStop, nil) // as sampleNext does on EOS
		return nil
	})
	if texts, _ := s.Collect(); texts[0] != "Once The" {
		t.Fatalf("output %q, want %q", texts[0], "Once The")
	}
}

// The stop string earliest in the text wins, not the first in the list.
func TestEarliestStopStringWins(t *testing.T) {
	var s seqState
	s.cutStop("ab", []string{"cd", "abc"})
	if text, stopped := s.cutStop("cd", []string{"cd", "abc"}); !stopped || text != "" {
		t.Fatalf("got %q, stopped %v; want \"\" (\"abc\" starts first)", text, stopped)
	}
}

// Cache events of a finishing sample still name its request.
func TestFreeEventsNameTheirRequest(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	runAll(t, e, []Request{{Prompt: "Once upon a time", MaxTokens: 5, Sampling: greedy}})
	checkNoLeak(t, e)
	evs, _, _ := e.Events(0, 0)
	for _, ev := range evs {
		if ev.Kind == "free" {
			if ev.Request == 0 || !strings.Contains(ev.Text, "request 1") {
				t.Fatalf("free event without its request: %+v", ev)
			}
			return
		}
	}
	t.Fatal("no free event")
}

// Submit racing Close must not report ErrClosed for a request it ran.
func TestSubmitRacingClose(t *testing.T) {
	m, tok := stories(t)
	for range 100 {
		e, err := New(m, tok, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		go e.Close()
		_, err = e.Submit(context.Background(), Request{Prompt: "Once", MaxTokens: 1, Sampling: greedy})
		e.Close()
		if errors.Is(err, ErrClosed) {
			evs, _, _ := e.Events(0, 0)
			for _, ev := range evs {
				if ev.Kind == "submit" {
					t.Fatal("Submit returned ErrClosed for a request the engine registered")
				}
			}
		}
	}
}

// A step report counts only the work that ran.
func TestStepReportCountsWhatRan(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Cache.BlockSize = 8
	cfg.Cache.Budget = blocksOf(m, 24, 8)
	e := newEngine(t, m, tok, cfg)
	e.Pause()
	for i := range prompts {
		if _, err := e.Submit(context.Background(), request(i)); err != nil {
			t.Fatal(err)
		}
	}
	preempted := 0
	for range 1000 {
		rep, err := e.Step()
		if err != nil {
			break
		}
		preempted += len(rep.Preempted)
		sum := 0
		for _, w := range rep.Seqs {
			sum += w.Tokens
		}
		if rep.Decode+rep.Prefill != sum {
			t.Fatalf("step %d: %d decode + %d prefill tokens reported, %d ran", rep.Step, rep.Decode, rep.Prefill, sum)
		}
	}
	if preempted == 0 {
		t.Error("the budget forced no preemption")
	}
}

// In contiguous mode, parallel samples with no room to fork wait for room
// instead of failing.
func TestContiguousForksWaitForRoom(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Cache.BlockSize = 8
	cfg.Cache.Allocator = kvcache.Contiguous
	cfg.Cache.Budget = blocksOf(m, 10, 8)
	e := newEngine(t, m, tok, cfg)
	s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 20, N: 3, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	texts, finals := s.Collect()
	for i, f := range finals {
		if f.Reason != FinishLength || texts[i] != texts[0] {
			t.Errorf("sample %d ended %s (%v): %q", i, f.Reason, f.Err, texts[i])
		}
	}
	checkNoLeak(t, e)
	// One reservation of 25 tokens cannot fit 3 blocks of 8: refused.
	cfg.Cache.Budget = blocksOf(m, 3, 8)
	small := newEngine(t, m, tok, cfg)
	if _, err := small.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 20, N: 3}); err == nil {
		t.Error("a request whose reservation cannot fit the cache was accepted")
	}
}

// Reconfigure refuses a pool too small for a running sequence.
func TestReconfigureRefusesAPoolTooSmall(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	e.Pause()
	s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 200, Sampling: greedy, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 60 {
		e.Step()
	}
	c := e.Config()
	c.Cache.Budget = blocksOf(m, 3, 16)
	if err := e.Reconfigure(c); err == nil || !strings.Contains(err.Error(), "needs 5") {
		t.Errorf("shrinking below a running sequence: %v", err)
	}
	e.Resume()
	if _, finals := s.Collect(); finals[0].Reason != FinishLength {
		t.Errorf("the request ended %s: %v", finals[0].Reason, finals[0].Err)
	}
}

// A rebuild's drain shows in the event log.
func TestDrainIsLogged(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	e.Pause()
	if _, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 50, Sampling: greedy}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.Step()
	}
	c := e.Config()
	c.Cache.BlockSize = 32
	if err := e.Reconfigure(c); err != nil {
		t.Fatal(err)
	}
	evs, _, _ := e.Events(0, 0)
	for _, ev := range evs {
		if ev.Kind == "free" {
			return
		}
	}
	t.Fatal("no free event for the drained sequence")
}

// A caller that cancels and stops reading does not leak the stream's
// goroutine for ever.
func TestAbandonedStreamsEnd(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	e.call(func() error { e.abandonAfter = 50 * time.Millisecond; return nil })
	before := runtime.NumGoroutine()
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := e.Submit(ctx, Request{Prompt: "Once upon a time", MaxTokens: 5, Sampling: greedy}); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-before >= 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before, %d after 20 abandoned requests", before, runtime.NumGoroutine())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A budget that would make more than MaxBlocks blocks is refused with the
// reason; an automatic one is cut to MaxBlocks.
func TestPoolSizeIsBounded(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Cache.BlockSize = 1
	cfg.Cache.Budget = 1 << 30
	if _, err := New(m, tok, cfg); err == nil || !strings.Contains(err.Error(), "at most 65536 blocks") {
		t.Errorf("a 1 GiB pool of 1-token blocks: %v", err)
	}
	e := newEngine(t, m, tok, DefaultConfig())
	c := e.Config()
	c.Cache.BlockSize = 1
	c.Cache.Budget = 1 << 30
	if err := e.Reconfigure(c); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Reconfigure to a 1 GiB pool of 1-token blocks: %v", err)
	}
	sc, _, err := PoolConfig(m, CacheConfig{BlockSize: 1, K: kvstore.F16, V: kvstore.F16}, 1<<20, 64)
	if err != nil || sc.Blocks != MaxBlocks {
		t.Errorf("automatic budget: %d blocks, %v; want %d", sc.Blocks, err, MaxBlocks)
	}
}
