package engine

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvscope/engine/model"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// Config and Submit answer at once while the engine is busy with a long
// step: they read the published settings instead of waiting for the loop.
func TestConfigAndSubmitDoNotWaitForAStep(t *testing.T) {
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Sched.StepTokens = 2048 // one long prefill step
	e := newEngine(t, m, tok, cfg)
	long := strings.Repeat("the cache holds keys and values ", 40)
	st, err := e.Submit(context.Background(), Request{Prompt: long, MaxTokens: 2, Sampling: greedy, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the engine is inside the prefill step.
	deadline := time.Now().Add(10 * time.Second)
	for e.Snapshot().Step == 0 && len(e.Snapshot().Requests) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var worst time.Duration
	for range 20 {
		t0 := time.Now()
		_ = e.Config()
		s2, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 1, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(t0))
		go s2.Collect()
		time.Sleep(5 * time.Millisecond)
	}
	st.Collect()
	t.Logf("slowest Config+Submit during a long step: %v", worst)
	if worst > 50*time.Millisecond {
		t.Errorf("Config and Submit took %v while the engine stepped; they must not wait for it", worst)
	}
}

// Streams end and their goroutines exit at Close, whether or not anyone
// reads them and whether or not their context is ever cancelled.
func TestUnreadStreamsEndAtClose(t *testing.T) {
	m, tok := stories(t)
	before := runtime.NumGoroutine()
	e, err := New(m, tok, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.abandonAfter = 20 * time.Millisecond
	ctx := context.Background() // never cancelled
	for range 4 {
		if _, err := e.Submit(ctx, Request{Prompt: "Once upon a time", MaxTokens: 200, Sampling: greedy, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	e.Close()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
