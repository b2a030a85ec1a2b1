package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"kvscope/engine/kvcache"
)

// TestNoSettingEndsOtherRequests draws combinations of block size,
// allocator, overflow policy, context, budget, max tokens, per-request
// overflow and n. Each combination is refused at Reconfigure or Submit with
// a reason, or its request finishes with stop or length; a canary request
// running alongside never ends in error, whatever the combination did.
func TestNoSettingEndsOtherRequests(t *testing.T) {
	m, tok := stories(t)
	rng := rand.New(rand.NewPCG(8, 8))
	cases := 160
	if testing.Short() || raceEnabled {
		cases = 40 // the race detector makes each case about ten times slower
	}
	var refusedCfg, refusedReq, served int
	for i := range cases {
		cfg := DefaultConfig()
		cfg.Cache.BlockSize = pick(rng, 1, 3, 16, 32, 64, 128, 256)
		cfg.Cache.Allocator = pick(rng, kvcache.Paged, kvcache.Contiguous)
		cfg.Cache.Overflow = pick(rng, kvcache.Stop, kvcache.RollingWindow, kvcache.TruncateMiddle)
		cfg.Context = pick(rng, 0, 1, 2, 9, 13, 40, 64, 100, 300)
		cfg.Cache.Budget = pick[int64](rng, 0, 0, 64<<10, 256<<10, 1<<20)
		cfg.Sched.MaxSeqs = pick(rng, 1, 2, 8)
		var reqOverflow *kvcache.OverflowPolicy
		if p := pick(rng, -1, 0, 1, 2); p >= 0 {
			pol := kvcache.OverflowPolicy(p)
			reqOverflow = &pol
		}
		r := Request{
			Prompt:    randomPrompt(rng),
			MaxTokens: pick(rng, 0, 1, 5, 10, 60, 256),
			N:         pick(rng, 1, 2, 4),
			Overflow:  reqOverflow,
			Sampling:  greedy,
			IgnoreEOS: rng.IntN(2) == 0,
		}
		if r.MaxTokens == 0 && (cfg.Cache.Overflow != kvcache.Stop || reqOverflow != nil && *reqOverflow != kvcache.Stop) {
			// Rolling and truncating contexts never fill: MaxTokens 0
			// generates until cancelled. Ask for more than the context
			// holds instead, so that the policy acts.
			r.MaxTokens = 700
		}
		name := fmt.Sprintf("case %d: block %d, %s, %s, context %d, budget %d, %d seqs; request max %d, n %d, overflow %v, %d-char prompt",
			i, cfg.Cache.BlockSize, cfg.Cache.Allocator, cfg.Cache.Overflow, cfg.Context, cfg.Cache.Budget, cfg.Sched.MaxSeqs,
			r.MaxTokens, r.N, reqOverflow, len(r.Prompt))

		e := newEngine(t, m, tok, DefaultConfig())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		canary, err := e.Submit(ctx, Request{Prompt: "Once upon a time", MaxTokens: 48, IgnoreEOS: true, Sampling: greedy, Label: "canary"})
		if err != nil {
			t.Fatalf("%s: the canary was refused: %v", name, err)
		}
		if err := e.Reconfigure(cfg); err != nil {
			refusedCfg++
			if err.Error() == "" {
				t.Errorf("%s: refused without a reason", name)
			}
		} else if st, err := e.Submit(ctx, r); err != nil {
			refusedReq++
		} else {
			served++
			_, finals := st.Collect()
			if len(finals) != r.N {
				t.Errorf("%s: %d samples ended, want %d", name, len(finals), r.N)
			}
			for k, f := range finals {
				if f.Reason != FinishStop && f.Reason != FinishLength {
					t.Errorf("%s: sample %d ended with %s: %v", name, k, f.Reason, f.Err)
				}
			}
		}
		_, finals := canary.Collect()
		if f := finals[0]; f.Reason == FinishError || f.Reason == FinishCancelled {
			t.Errorf("%s: the canary ended with %s: %v", name, f.Reason, f.Err)
		}
		cancel()
		e.Close()
	}
	t.Logf("%d combinations: %d settings refused at Reconfigure, %d requests refused at Submit, %d served", cases, refusedCfg, refusedReq, served)
	if served == 0 || refusedCfg == 0 || refusedReq == 0 {
		t.Errorf("the draw missed a class (served %d, settings refused %d, requests refused %d): widen it", served, refusedCfg, refusedReq)
	}
}

// TestUserSettingsTheManagerRefusesAreRefusedUpFront pins the reported
// failures: settings the manager would refuse for every sequence are
// refused by New and Reconfigure, and a contiguous reservation shorter than
// a rolling window's minimum still serves its request.
func TestUserSettingsTheManagerRefusesAreRefusedUpFront(t *testing.T) {
	m, tok := stories(t)
	rolling := kvcache.RollingWindow
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		req  Request
		ok   bool // the request is served
	}{
		{"contiguous rolling, 10 tokens", func(c *Config) {
			c.Cache.Allocator, c.Cache.Overflow = kvcache.Contiguous, kvcache.RollingWindow
		}, Request{Prompt: "Once upon", MaxTokens: 10}, true},
		{"contiguous rolling, block 256, 256 tokens", func(c *Config) {
			c.Cache.Allocator, c.Cache.Overflow, c.Cache.BlockSize = kvcache.Contiguous, kvcache.RollingWindow, 256
		}, Request{Prompt: "Once upon", MaxTokens: 256}, true},
		{"request rolling in a short context", func(c *Config) { c.Context = 20 },
			Request{Prompt: "Once upon", MaxTokens: 10, Overflow: &rolling}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			e := newEngine(t, m, tok, cfg)
			tc.req.Sampling, tc.req.IgnoreEOS = greedy, true
			st, err := e.Submit(context.Background(), tc.req)
			if !tc.ok {
				if err == nil {
					t.Fatal("the request was accepted")
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, finals := st.Collect()
			if f := finals[0]; f.Reason != FinishLength || f.Err != nil {
				t.Fatalf("ended with %s: %v", f.Reason, f.Err)
			}
		})
	}
	// A rolling window the context cannot hold is refused by New and by
	// Reconfigure, with the manager's reason.
	bad := DefaultConfig()
	bad.Context, bad.Cache.Overflow, bad.Cache.BlockSize = 40, kvcache.RollingWindow, 16
	if _, err := New(m, tok, bad); err == nil {
		t.Error("New accepted a rolling window of 40 tokens in blocks of 16")
	}
	e := newEngine(t, m, tok, DefaultConfig())
	if err := e.Reconfigure(bad); err == nil {
		t.Error("Reconfigure accepted a rolling window of 40 tokens in blocks of 16")
	} else {
		t.Logf("refused: %v", err)
	}
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

func randomPrompt(rng *rand.Rand) string {
	words := []string{"Once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named", "Lily", "who", "liked", "to", "play"}
	n := pick(rng, 1, 3, 8, 30, 120, 400)
	s := ""
	for i := range n {
		if i > 0 {
			s += " "
		}
		s += words[rng.IntN(len(words))]
	}
	return s
}
