// This file holds the lesson "Parallel sampling n = 4": four samples fork
// one prompt and copy its shared last block on their first write.

package lesson

import (
	"fmt"
	"strings"
	"sync"

	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/sample"
)

// parallelPrompt is the n = 4 lesson's prompt.
const parallelPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside with her friends in the park"

// parallelIDs is the prompt's tokens, cut by one if they would fill their
// last block: a partly filled last block is what the samples copy on
// write.
func parallelIDs(v *Env, bs int) []int {
	ids := v.E.Tokenizer().Encode(parallelPrompt, true, false)
	if len(ids)%bs == 0 {
		ids = ids[:len(ids)-1]
	}
	return ids
}

// prefillRows counts the prompt rows the engine computes for one request,
// step by step (on the engine's goroutine).
type prefillRows struct {
	mu   sync.Mutex
	id   uint64
	last int64 // the snapshot's step last counted
	n    int
}

func (p *prefillRows) see(s *engine.Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Step == p.last {
		return // published again with no step between (paused)
	}
	p.last = s.Step
	for _, w := range s.Last.Seqs {
		if w.Request == p.id && w.Prefill {
			p.n += w.Tokens
		}
	}
}

func (p *prefillRows) get() int { p.mu.Lock(); defer p.mu.Unlock(); return p.n }

// Parallel shows n = 4 parallel samples forking one prompt.
var Parallel = &Lesson{
	Name:     "Parallel sampling n = 4",
	Purpose:  "Four samples fork one prompt: they share its blocks, and the first write into the shared last block copies it (copy on write).",
	Mode:     "ref count",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Picture:  2,
	Steps: []Step{{
		Explain: "One request asks for four samples: the prompt is computed once, then the sequence forks into four that share its blocks. Held just after the fork.",
		Promise: "ref count 4 on the prompt's full blocks",
		Do: func(v *Env) (*engine.Snapshot, error) {
			sp := sample.DefaultParams()
			sp.Temperature, sp.Seed = 1, 4
			q, err := v.Submit(engine.Request{Tokens: parallelIDs(v, v.E.Config().Cache.BlockSize), N: 4, MaxTokens: 48, IgnoreEOS: true, Sampling: &sp, Label: "4 samples"})
			if err != nil {
				return nil, err
			}
			v.Set("q", q)
			rows := &prefillRows{id: q.ID, last: v.E.Snapshot().Step} // the paused engine has not run it yet
			v.Set("rows", rows)
			v.Track(rows.see)
			return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return generating(s, 4, q) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("q").(*Req)
			r, _ := q.Info(s)
			k := q.Prompt / s.Cache.BlockSize
			if len(r.Samples) == 0 {
				return "the request is not running", false
			}
			table := blockTable(s, r.Samples[0].Seq)
			if len(table) < k || k < 1 {
				return fmt.Sprintf("the prompt fills %s; sample 1 holds %s", engine.Count(k, "full block"), engine.Count(len(table), "block")), false
			}
			rc := refs(s, table[:k])
			held := true
			for _, n := range rc {
				held = held && n >= 4
			}
			return fmt.Sprintf("%d samples; ref counts of the prompt's %s: %v", len(r.Samples), engine.Count(k, "full block"), rc), held
		},
	}, {
		Explain: "Each sample writes its next token into the prompt's last, partly filled block. Held at the step where the first write into that shared block copied it (copy on write).",
		Promise: "the prompt computed once, and a block copied on write in this step",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q := v.Get("q").(*Req)
			return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return len(s.Last.Copied) > 0 })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("q").(*Req)
			rows := v.Get("rows").(*prefillRows).get()
			cow := s.Cache.Metrics.CoWCopies
			return fmt.Sprintf("%s computed for 4 samples of a prompt of %s (%s); this step copied %s on write (%s so far)",
					engine.Count(rows, "prompt row"), engine.Count(q.Prompt, "token"), times(rows, q.Prompt), copies(s.Last.Copied), engine.Count(int(cow), "copy")),
				rows == q.Prompt && len(s.Last.Copied) >= 2
		},
	}},
}

// copies says which blocks a step copied on write, from its (old, new)
// pairs: "block 2 into 3, 4 and 5".
func copies(pairs []int) string {
	var parts []string
	for i := 0; i+1 < len(pairs); i += 2 {
		old, nw := pairs[i], pairs[i+1]
		if i > 0 && pairs[i-2] == old {
			parts[len(parts)-1] += fmt.Sprintf(", %d", nw)
			continue
		}
		parts = append(parts, fmt.Sprintf("block %d into %d", old, nw))
	}
	for j, p := range parts {
		if k := strings.LastIndex(p, ", "); k >= 0 {
			parts[j] = p[:k] + " and " + p[k+2:]
		}
	}
	return strings.Join(parts, "; ")
}
