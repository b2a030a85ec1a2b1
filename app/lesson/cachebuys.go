// This file holds the lesson "What the cache buys": one greedy reply with
// the KV cache, then without it.

package lesson

import (
	"fmt"
	"sync"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/model"
)

// cachePrompt is the first lesson's prompt.
const cachePrompt = "Once upon a time"

// The lesson's reply length, and the token each reply is held at.
const (
	cacheReply  = 64
	cacheHoldAt = 32
)

// CacheBuys shows what the KV cache buys: the same reply with it and
// without it.
var CacheBuys = &Lesson{
	Name:     "What the cache buys",
	Purpose:  "The same greedy reply with the KV cache on, then off: with the cache each token computes one row; without it every token recomputes all before it.",
	Mode:     "owner",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Picture:  3,
	Steps: []Step{{
		Explain: fmt.Sprintf("With the KV cache. Held at token %d of the reply: the step just run computed one row, the new token's, and attended to the keys and values the blocks already store.", cacheHoldAt),
		Promise: "one row computed for the new token",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q, err := v.Submit(greedy(cachePrompt, cacheReply, "with the cache"))
			if err != nil {
				return nil, err
			}
			v.Set("with", q)
			v.Set("with times", trackDecode(v, q))
			return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return generated(s, q) >= cacheHoldAt })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("with").(*Req)
			w, ok := work(s, q.ID, 0)
			r, _ := q.Info(s)
			if !ok || len(r.Samples) == 0 {
				return "the reply was not computed in the step held", false
			}
			return fmt.Sprintf("the last step computed %s (position %d) for token %d; the reply's %d tokens of K/V stay in %s",
				engine.Count(w.Tokens, "row"), w.Start, r.Samples[0].Generated, r.Samples[0].Tokens,
				engine.Count(len(blockTable(s, r.Samples[0].Seq)), "block")), w.Tokens == 1 && !w.Prefill
		},
	}, {
		Explain: fmt.Sprintf("Without the cache, held at token %d again: for one new token the step recomputed the whole prefix, the prompt and every token before it.", cacheHoldAt),
		Promise: "the step computed a row for every position, from 0",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if _, err := v.RunUntil(ended(v.Get("with").(*Req))); err != nil {
				return nil, err
			}
			r := greedy(cachePrompt, cacheReply, "without the cache")
			r.NoCache = true
			q, err := v.Submit(r)
			if err != nil {
				return nil, err
			}
			v.Set("without", q)
			v.Set("without times", trackDecode(v, q))
			return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return generated(s, q) >= cacheHoldAt })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("without").(*Req)
			w, ok := work(s, q.ID, 0)
			r, _ := q.Info(s)
			if !ok || len(r.Samples) == 0 {
				return "the reply was not computed in the step held", false
			}
			return fmt.Sprintf("the last step computed %s (positions %d–%d) for token %d alone", engine.Count(w.Tokens, "row"), w.Start, w.Start+w.Tokens-1,
				r.Samples[0].Generated), w.Start == 0 && w.Tokens >= r.Samples[0].Tokens-1 && w.Tokens > 1
		},
	}, {
		Explain: "Both replies done: the same text, but without the cache every token cost more than the last. The chart shows the time of each token's step.",
		Promise: "every token recomputed its prefix, and the text is the same",
		Do: func(v *Env) (*engine.Snapshot, error) {
			without := v.Get("without").(*Req)
			s, err := v.RunUntil(ended(without))
			if err == nil {
				v.Chart(Series{Name: "with the KV cache", Y: v.Get("with times").(*decodeTimes).get()}, Series{Name: "without it", Y: v.Get("without times").(*decodeTimes).get()})
			}
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			with, without := v.Get("with").(*Req), v.Get("without").(*Req)
			a, b := with.Finals()[0], without.Finals()[0]
			// Token j (from 0) is computed from the prompt and j tokens.
			want := 0
			for j := range b.Generated {
				want += b.PromptTokens + j
			}
			same := with.Text(0) == without.Text(0)
			gaps := v.Get("without times").(*decodeTimes).get()
			q := max(len(gaps)/4, 1)
			text := "the same text"
			if !same {
				text = "different text"
			}
			return fmt.Sprintf("%s computed instead of %s (%.1f×); %.2f ms a token over the first quarter, %.2f over the last; %s",
					humanize.Comma(int64(b.Computed))+" rows", humanize.Comma(int64(a.Computed)), float64(b.Computed)/float64(max(a.Computed, 1)),
					mean(gaps[:min(q, len(gaps))]), mean(gaps[max(len(gaps)-q, 0):]), text),
				b.Computed >= want && same && a.Computed == a.PromptTokens+a.Generated-1 && a.Generated == cacheReply
		},
	}},
}

// decodeTimes records the milliseconds of each step that computed one of a
// request's generated tokens (its prompt's step left out), as the engine
// timed them: the lesson's holds between steps do not count (on the
// engine's goroutine).
type decodeTimes struct {
	mu   sync.Mutex
	id   uint64
	last int64 // the snapshot's step last seen
	seen bool  // the prompt's step has run
	ms   []float64
}

// trackDecode starts recording q's decode steps; the paused engine has not
// run q yet.
func trackDecode(v *Env, q *Req) *decodeTimes {
	d := &decodeTimes{id: q.ID, last: v.E.Snapshot().Step}
	v.Track(d.see)
	return d
}

func (d *decodeTimes) see(s *engine.Snapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.Step == d.last {
		return // published again with no step between (paused)
	}
	d.last = s.Step
	if _, ok := work(s, d.id, 0); ok {
		if d.seen { // the first step computes the prompt (and the first token)
			d.ms = append(d.ms, float64(s.Last.Duration.Microseconds())/1000)
		}
		d.seen = true
	}
}

func (d *decodeTimes) get() []float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]float64(nil), d.ms...)
}
