package native

import (
	"context"
	"strings"
	"testing"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/sample"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// TestDeviceEngine runs the engine on the device backend (the built-in
// demo model): a request generates through device caches, a K/V precision
// the device refuses fails engine.New and Reconfigure with the reason, and
// the engine keeps running after a refused Reconfigure. Int4 keys and
// values, whose key groups the device backend tracks on the host, generate
// too.
func TestDeviceEngine(t *testing.T) {
	d := hostDevice(t)
	m, tok := demoOn(t, d)
	if d.host() {
		// The CPU library stores every precision: give the host device
		// the CUDA library's answer for fp8 (kvs_kv_supported), so that
		// the refusal path runs here too.
		lib := d.d.kvSupported
		d.d.kvSupported = func(p, key int32) int32 {
			if p == int32(kvstore.FP8) {
				return -1 // KVS_ERR_TYPE
			}
			return lib(p, key)
		}
	}
	bad := engine.DefaultConfig()
	bad.Cache.K, bad.Cache.V = kvstore.FP8, kvstore.FP8
	if _, err := engine.New(m, tok, bad); err == nil || !strings.Contains(err.Error(), "fp8 keys are refused") || !strings.Contains(err.Error(), "stores keys as") {
		t.Errorf("engine.New with fp8 keys: %v, want the refusal with its reason", err)
	}
	e, err := engine.New(m, tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "fp8 keys are refused") {
		t.Errorf("Reconfigure to fp8 keys: %v, want the refusal with its reason", err)
	}
	if n := generate(t, e, 8); n != 8 {
		t.Errorf("%d tokens generated on the device backend, want 8", n)
	}
	cfg := engine.DefaultConfig()
	cfg.Cache.K, cfg.Cache.V = kvstore.Int4, kvstore.Int4
	if err := e.Reconfigure(cfg); err != nil {
		t.Fatalf("Reconfigure to int4 keys and values: %v", err)
	}
	if n := generate(t, e, 8); n != 8 {
		t.Errorf("int4 K/V: %d tokens generated, want 8", n)
	}
}

// demoOn loads the built-in demo model onto the device d; the model is
// closed when the test ends.
func demoOn(t *testing.T, d *Device) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Use(d); err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// generate runs one request of n tokens on e and returns the tokens it got.
func generate(t *testing.T, e *engine.Engine, n int) int {
	t.Helper()
	s, err := e.Submit(context.Background(), engine.Request{Prompt: "Once upon a time", MaxTokens: n, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for c := range s.C {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
		if !c.Done {
			got++
		}
	}
	return got
}

// TestDevicePreemption runs the engine on the device backend with a K/V
// budget too small for its requests at once, preempting by recompute and
// by swap (device blocks saved to the host pool and loaded back), with a
// request of two samples whose shared prompt blocks are copied on their
// first write: every request's greedy text equals its text alone.
func TestDevicePreemption(t *testing.T) {
	d := hostDevice(t)
	m, tok := demoOn(t, d)
	greedy := &sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	reqs := []engine.Request{
		{Prompt: "Once upon a time", MaxTokens: 12, IgnoreEOS: true, Sampling: greedy},
		{Prompt: "The cat sat on the mat and", MaxTokens: 10, IgnoreEOS: true, Sampling: greedy},
		{Prompt: "A", MaxTokens: 14, IgnoreEOS: true, Sampling: greedy, N: 2},
	}
	const bs = 4
	alone := make([][]string, len(reqs))
	for i, r := range reqs {
		cfg := engine.DefaultConfig()
		cfg.Cache.BlockSize = bs
		e, err := engine.New(m, tok, cfg)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = collect(t, e, []engine.Request{r})[0]
		e.Close()
	}
	for _, mode := range []kvcache.PreemptMode{kvcache.Recompute, kvcache.Swap} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := engine.DefaultConfig()
			cfg.Cache.BlockSize = bs
			cfg.Cache.Preempt = mode
			// 8 blocks of 4 slots for four samples of up to 20 tokens
			cfg.Cache.Budget = int64(8 * kvstore.BlockBytes(m.CacheConfig(bs, 1, cfg.Cache.K, cfg.Cache.V)))
			e, err := engine.New(m, tok, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got := collect(t, e, reqs)
			for i := range reqs {
				for s := range got[i] {
					if got[i][s] != alone[i][s] {
						t.Errorf("request %d sample %d under preemption:\n%q\nalone:\n%q", i, s, got[i][s], alone[i][s])
					}
				}
			}
			kinds := map[engine.EventKind]int{}
			events, _, _ := e.Events(0, 1<<20)
			for _, ev := range events {
				kinds[ev.Kind]++
			}
			t.Logf("%s: %d preemptions, %d swapped out, %d blocks copied on write", mode, kinds[engine.EventPreempt], kinds[engine.EventSwapOut], kinds[engine.EventCoW])
			if kinds[engine.EventPreempt] == 0 || kinds[engine.EventCoW] == 0 || (mode == kvcache.Swap) != (kinds[engine.EventSwapOut] > 0) {
				t.Errorf("%s: events %v: want preemptions, copies on write, and swaps exactly when swapping", mode, kinds)
			}
		})
	}
}

// collect runs reqs on e at once and returns each request's texts, one a
// sample. They are submitted while the scheduler is paused, so that its
// first step sees them all: the schedule, and with it which blocks are
// preempted or copied on write, does not hang on how soon the engine's loop
// ran after each Submit.
func collect(t *testing.T, e *engine.Engine, reqs []engine.Request) [][]string {
	t.Helper()
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	streams := make([]*engine.Stream, len(reqs))
	for i, r := range reqs {
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	out := make([][]string, len(reqs))
	for i, s := range streams {
		texts, finals := s.Collect()
		for _, f := range finals {
			if f.Reason == engine.FinishError {
				t.Fatalf("request %d: %v", i, f.Err)
			}
		}
		out[i] = texts
	}
	return out
}
