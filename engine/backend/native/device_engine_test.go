package native

import (
	"context"
	"strings"
	"testing"

	"kvscope/engine"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
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
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Use(d); err != nil {
		t.Fatal(err)
	}
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
