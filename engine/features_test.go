package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"kvscope/engine/sample"
)

// TestParallelSamples: n = 4 samples share the prompt's blocks, diverge by
// seed, and copy the shared partly filled block on their first write.
func TestParallelSamples(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	sp := sample.DefaultParams()
	sp.Temperature, sp.Seed = 1, 42
	s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 30, N: 4, Sampling: &sp})
	if err != nil {
		t.Fatal(err)
	}
	texts, finals := s.Collect()
	if len(texts) != 4 {
		t.Fatalf("%d samples", len(texts))
	}
	distinct := map[string]bool{}
	for i, f := range finals {
		if f.Reason != FinishLength && f.Reason != FinishStop {
			t.Errorf("sample %d ended %s: %v", i, f.Reason, f.Err)
		}
		distinct[texts[i]] = true
	}
	if len(distinct) < 2 {
		t.Errorf("all samples are the same: %q", texts[0])
	}
	met := metrics(e)
	if met.CoWCopies < 3 {
		t.Errorf("%d copy-on-write copies, want at least 3 (one per forked sample)", met.CoWCopies)
	}
	checkNoLeak(t, e)
}

func TestStopStrings(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	full := runAll(t, e, []Request{{Prompt: "Once upon a time", MaxTokens: 60, Sampling: greedy}})[0]
	i := strings.Index(full, "Lily")
	if i < 0 {
		t.Fatalf("reference text has no 'Lily': %q", full)
	}
	s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 60, Sampling: greedy, Stop: []string{"Lily"}})
	if err != nil {
		t.Fatal(err)
	}
	texts, finals := s.Collect()
	if texts[0] != full[:i] || finals[0].Reason != FinishStop {
		t.Errorf("with stop string: %q (%s), want %q (stop)", texts[0], finals[0].Reason, full[:i])
	}
}

// TestCancelFreesBlocks cancels a running request: its blocks are free at
// once and its stream ends with "cancelled".
func TestCancelFreesBlocks(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	if err := e.SetDelay(5 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.Submit(ctx, Request{Prompt: "Once upon a time", Sampling: greedy, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	<-s.C // the first token
	cancel()
	var last Chunk
	for c := range s.C {
		last = c
	}
	if last.Reason != FinishCancelled {
		t.Errorf("ended %s, want cancelled", last.Reason)
	}
	checkNoLeak(t, e)
}

// TestStepMode pauses the scheduler and steps it: each step reports what
// it ran and explains it in a line.
func TestStepMode(t *testing.T) {
	m, tok := stories(t)
	e := newEngine(t, m, tok, DefaultConfig())
	if _, err := e.Step(); err == nil {
		t.Error("Step while running should fail")
	}
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(); err == nil || !strings.Contains(err.Error(), "nothing to do") {
		t.Errorf("idle step: %v", err)
	}
	s1, _ := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 5, Sampling: greedy})
	s2, _ := e.Submit(context.Background(), Request{Prompt: "Tom and his dog", MaxTokens: 5, Sampling: greedy})
	rep, err := e.Step()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Seqs) != 2 || rep.Prefill == 0 || rep.Decode != 0 || len(rep.Admitted) != 2 || len(rep.Allocated) == 0 {
		t.Errorf("first step: %+v", rep)
	}
	if !strings.Contains(rep.Explain, "admitted") {
		t.Errorf("explanation %q", rep.Explain)
	}
	rep, err = e.Step()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decode != 2 || rep.Prefill != 0 {
		t.Errorf("second step: %d decode, %d prefill tokens; want 2 and 0", rep.Decode, rep.Prefill)
	}
	snap := e.Snapshot()
	if !snap.Paused || len(snap.Requests) != 2 || snap.Requests[0].Samples[0].Generated != 2 {
		t.Errorf("snapshot: paused %v, %d requests %+v", snap.Paused, len(snap.Requests), snap.Requests)
	}
	e.Resume()
	s1.Collect()
	s2.Collect()
}
