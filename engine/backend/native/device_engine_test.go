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
// the engine keeps running after a refused Reconfigure.
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
	bad := engine.DefaultConfig()
	bad.Cache.K, bad.Cache.V = kvstore.Int4, kvstore.Int4
	if _, err := engine.New(m, tok, bad); err == nil || !strings.Contains(err.Error(), "int4 keys are refused") || !strings.Contains(err.Error(), "KIVI") {
		t.Errorf("engine.New with int4 keys: %v, want the refusal with its reason", err)
	}
	e, err := engine.New(m, tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "int4 keys are refused") {
		t.Errorf("Reconfigure to int4 keys: %v, want the refusal with its reason", err)
	}
	s, err := e.Submit(context.Background(), engine.Request{Prompt: "Once upon a time", MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for c := range s.C {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
		if !c.Done {
			tokens++
		}
	}
	if tokens == 0 {
		t.Error("no tokens generated on the device backend")
	}
}
