package engine

import (
	"context"
	"strings"
	"testing"

	"kvscope/engine/kvcache"
)

// TestOverflowPolicies generates past a 64-token context under each policy.
func TestOverflowPolicies(t *testing.T) {
	m, tok := stories(t)
	for _, tc := range []struct {
		pol       kvcache.OverflowPolicy
		reason    FinishReason
		generated int
		event     string
	}{
		{kvcache.Stop, FinishLength, 64 - 5 + 1, "context-full"},
		{kvcache.RollingWindow, FinishLength, 150, "shift"},
		{kvcache.TruncateMiddle, FinishLength, 150, "overflow"},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Context = 64
			cfg.Cache.Overflow = tc.pol
			e := newEngine(t, m, tok, cfg)
			s, err := e.Submit(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 150, Sampling: greedy})
			if err != nil {
				t.Fatal(err)
			}
			texts, finals := s.Collect()
			f := finals[0]
			if f.Reason != tc.reason || f.Generated != tc.generated {
				t.Errorf("ended %s after %d tokens (%v), want %s after %d", f.Reason, f.Generated, f.Err, tc.reason, tc.generated)
			}
			if tc.pol == kvcache.Stop && (f.Err == nil || !strings.Contains(f.Err.Error(), "context of 64 tokens is full")) {
				t.Errorf("no explanation of the stop: %v", f.Err)
			}
			if len(texts[0]) < 100 {
				t.Errorf("text %q", texts[0])
			}
			found := false
			evs, _, _ := e.Events(0, 0)
			for _, ev := range evs {
				if ev.Kind == EventKind(tc.event) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s event", tc.event)
			}
			checkNoLeak(t, e)
		})
	}
}

func TestSubmitErrors(t *testing.T) {
	m, tok := stories(t)
	cfg := DefaultConfig()
	cfg.Context = 32
	e := newEngine(t, m, tok, cfg)
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{}, "prompt is empty"},
		{Request{Prompt: strings.Repeat("once upon a time ", 20)}, "context holds 32"},
		{Request{Tokens: []int{1, 99999}}, "outside the vocabulary"},
		{Request{Prompt: "x", N: 100}, "parallel samples"},
		{Request{Prompt: "x", Stop: []string{""}}, "stop string"},
		{Request{Prompt: "x", MaxTokens: -1}, "negative"},
	} {
		if _, err := e.Submit(context.Background(), tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.r, err, tc.want)
		}
	}
}
