// Package turn runs one reply of a conversation on the engine, with no UI:
// it makes the reply's prompt, submits it, reads the stream, and reports
// the reply as it grows (its text, the token ids the model generated, its
// speed) and once more when it ends (how, and the prompt tokens the prefix
// cache served). Stop ends it; the text so far stays.
//
// The chat pane starts a Turn for each reply and hands its reports to the
// widgets through fyne.Do; this package imports no Fyne, so the lifecycle
// is tested on the engine alone.
package turn

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"kvscope/app/store"
	"kvscope/engine"
	"kvscope/engine/sample"
)

// Every is how often a Turn reports a reply while it streams, at most.
const Every = 50 * time.Millisecond

// FinishError is the Finish of a reply whose prompt could not be made or
// submitted, or whose stream ended with an error.
const FinishError = string(engine.FinishError)

// Progress is a reply as it stands.
type Progress struct {
	Text string // the reply's text so far
	IDs  []int  // the token ids generated so far (the Progress's own copy)
	// End, when Done, is the end-of-generation token the model ended the
	// reply on (engine.Chunk.End).
	End []int
	TPS float64

	// Done says the reply has ended: no report follows. Finish then says
	// how ("stop", "length", "cancelled" or "error"), and Err, when not
	// "", what went wrong (with "length": that the context ended it).
	Done   bool
	Finish string
	Err    string
	// Refused, when Done, says that the prompt could not be made or the
	// engine refused the request, so no token was generated.
	Refused bool
	// Prompt and Cached, when Done, are the prompt's tokens and those of
	// them the prefix cache served; Generated the tokens generated.
	Prompt, Cached, Generated int
}

// Apply writes p into the reply's message m, whose token ids belong to the
// vocabulary vocab (see store.Message.Vocab).
func (p Progress) Apply(m *store.Message, vocab string) {
	n := len(p.IDs)
	m.Text, m.Tokens, m.IDs, m.Vocab = p.Text, n, p.IDs, vocab
	if p.Done {
		m.End = p.End
	}
	if p.TPS > 0 {
		m.TPS = p.TPS
	}
	if !p.Done {
		return
	}
	m.Finish, m.Error = p.Finish, p.Err
	if p.Refused {
		return
	}
	m.Prompt, m.Cached = p.Prompt, p.Cached
	if p.Generated > 0 {
		m.Tokens = p.Generated
	}
}

// Sampling returns the engine's sampling parameters for a conversation's
// settings; seed 0 draws a random seed.
func Sampling(s store.Sampling) sample.Params {
	sp := sample.DefaultParams()
	sp.Temperature, sp.TopK, sp.TopP, sp.MinP, sp.RepeatPenalty = s.Temperature, s.TopK, s.TopP, s.MinP, s.RepeatPenalty
	sp.Seed = s.Seed
	if sp.Seed == 0 {
		sp.Seed = rand.Uint64()
	}
	return sp
}

// Hooks are what a Turn tells its owner, from the Turn's own goroutine
// (the pane passes them to the UI goroutine). Either may be nil.
type Hooks struct {
	// Submitted gives the engine's request id once the prompt is submitted.
	Submitted func(req uint64)
	// Progress reports the reply at most every Every while it streams,
	// and once with Done when it ends, whatever ended it.
	Progress func(Progress)
}

// Turn is one reply being generated.
type Turn struct {
	cancel context.CancelFunc
}

// Start generates one reply on e, on a goroutine of its own: prompt makes
// the prompt's token ids (a chat template's rendering may take a while),
// which go to the engine as req's Tokens (one sample: req.N is ignored).
// A request that turns out not to fit ends with an error report.
func Start(e *engine.Engine, prompt func() ([]int, error), req engine.Request, h Hooks) *Turn {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Turn{cancel: cancel}
	go t.run(ctx, e, prompt, req, h)
	return t
}

// Stop ends the reply; its final report says "cancelled" unless it had
// already ended. It returns at once.
func (t *Turn) Stop() { t.cancel() }

// run makes the prompt, submits it and reads the stream.
func (t *Turn) run(ctx context.Context, e *engine.Engine, prompt func() ([]int, error), req engine.Request, h Hooks) {
	defer t.cancel()
	report := func(p Progress) {
		if h.Progress != nil {
			h.Progress(p)
		}
	}
	ids, err := prompt()
	var stream *engine.Stream
	if err == nil {
		req.Tokens, req.N = ids, 1
		stream, err = e.Submit(ctx, req)
	}
	if err != nil {
		p := Progress{Done: true, Refused: true, Finish: FinishError, Err: err.Error()}
		if ctx.Err() != nil { // stopped meanwhile: not a failure
			p.Finish, p.Err = string(engine.FinishCancelled), ""
		}
		report(p)
		return
	}
	if h.Submitted != nil {
		h.Submitted(stream.ID)
	}
	var text strings.Builder
	var got []int
	var first, last time.Time
	progress := func() Progress {
		p := Progress{Text: text.String(), IDs: slices.Clone(got)}
		if n := len(got); n > 1 {
			p.TPS = float64(n-1) / time.Since(first).Seconds()
		}
		return p
	}
	ended := false
	for ch := range stream.C {
		if ended {
			continue // drain: one sample, already reported
		}
		text.WriteString(ch.Text)
		if ch.Done {
			p := progress()
			p.Done, p.Finish, p.End = true, string(ch.Reason), slices.Clone(ch.End)
			if ch.Err != nil {
				p.Err = ch.Err.Error()
			}
			p.Prompt, p.Cached, p.Generated = ch.PromptTokens, ch.CachedTokens, ch.Generated
			report(p)
			ended = true
			continue
		}
		if ch.Token >= 0 { // not the held-back text that ends a reply
			if len(got) == 0 {
				first = time.Now()
			}
			got = append(got, ch.Token)
		}
		if time.Since(last) >= Every {
			last = time.Now()
			report(progress())
		}
	}
	if !ended { // the stream closed without a final chunk
		p := progress()
		p.Done, p.Finish = true, string(engine.FinishCancelled)
		report(p)
	}
}
