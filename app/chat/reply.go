package chat

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/sample"
)

// run is one reply being generated.
type run struct {
	cancel context.CancelFunc
	conv   int64
	msg    int    // index of the assistant message it fills
	req    uint64 // the engine's request, once submitted (0 until then)
	vocab  string // the vocabulary of its token ids
}

// start generates the reply into the last message of conversation id. The
// prompt (a chat template's rendering, which may take a while) is made and
// submitted on a goroutine of its own; until then the reply shows it is
// under way and Stop ends it.
func (p *Pane) start(id int64) {
	c := p.conv(id)
	msg := len(c.Messages) - 1
	sp := sample.DefaultParams()
	s := c.Sampling
	sp.Temperature, sp.TopK, sp.TopP, sp.MinP, sp.RepeatPenalty = s.Temperature, s.TopK, s.TopP, s.MinP, s.RepeatPenalty
	sp.Seed = s.Seed
	if sp.Seed == 0 {
		sp.Seed = rand.Uint64()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, conv: id, msg: msg, vocab: p.prompter.Vocab()}
	p.runs[id] = r
	p.afterChange(id)
	conv := cloneConv(*c)
	// The prompt is token ids: the template's control tokens come from its
	// text alone, and what the user typed is text, so "</s>" or
	// "<|im_end|>" typed in a message is those characters, not the token.
	req := engine.Request{Sampling: &sp, MaxTokens: s.MaxTokens, Label: Name(*c)}
	go p.submit(ctx, r, p.eng, p.prompter, conv, req)
}

// submit makes a reply's prompt and submits it (on its own goroutine),
// then reads its stream. Submit returns at once; a request that turns out
// not to fit ends its stream with an error, which consume shows.
func (p *Pane) submit(ctx context.Context, r *run, e *engine.Engine, pr *Prompter, c store.Conversation, req engine.Request) {
	ids, err := pr.IDs(c, r.msg)
	var stream *engine.Stream
	if err == nil {
		req.Tokens = ids
		stream, err = e.Submit(ctx, req)
	}
	if err != nil {
		uithread.Do(func() { p.failed(r, ctx, err) })
		return
	}
	uithread.Do(func() {
		if !p.closed && p.runs[r.conv] == r {
			r.req = stream.ID
			p.reqConv[stream.ID] = r.conv
		}
	})
	p.consume(r, stream)
}

// failed ends a reply whose prompt could not be made or submitted: as
// stopped if it was stopped meanwhile, else with the error (UI goroutine).
func (p *Pane) failed(r *run, ctx context.Context, err error) {
	r.cancel()
	if p.closed || p.runs[r.conv] != r {
		return
	}
	delete(p.runs, r.conv)
	stopped := ctx.Err() != nil
	p.edit(r.conv, func(c *store.Conversation) {
		if r.msg < len(c.Messages) {
			if stopped {
				c.Messages[r.msg].Finish = string(engine.FinishCancelled)
			} else {
				c.Messages[r.msg].Finish, c.Messages[r.msg].Error = "error", err.Error()
			}
		}
	})
	if !stopped && r.conv == p.data.Selected {
		p.showError(err.Error())
	}
	p.afterChange(r.conv)
}

// consume reads a reply's stream on its own goroutine and hands the text to
// the UI at most every 50 ms, and at the end.
func (p *Pane) consume(r *run, stream *engine.Stream) {
	var text strings.Builder
	var ids []int // the generated token ids
	var first, last time.Time
	flush := func(final *engine.Chunk) {
		t, got, f := text.String(), slices.Clone(ids), first
		uithread.Do(func() { p.apply(r, t, got, f, final) })
	}
	for ch := range stream.C {
		if ch.Done {
			text.WriteString(ch.Text)
			flush(&ch)
			continue
		}
		if ch.Token >= 0 { // not the held-back text that ends a reply
			if len(ids) == 0 {
				first = time.Now()
			}
			ids = append(ids, ch.Token)
		}
		text.WriteString(ch.Text)
		if time.Since(last) >= 50*time.Millisecond {
			last = time.Now()
			flush(nil)
		}
	}
	uithread.Do(func() { p.finish(r) })
}

// apply puts streamed text and token ids into the reply's message (UI
// goroutine).
func (p *Pane) apply(r *run, text string, ids []int, first time.Time, final *engine.Chunk) {
	if p.closed || p.runs[r.conv] != r {
		return // the pane closed, or the reply already ended
	}
	p.edit(r.conv, func(c *store.Conversation) {
		if r.msg >= len(c.Messages) {
			return
		}
		m := &c.Messages[r.msg]
		n := len(ids)
		m.Text, m.Tokens, m.IDs, m.Vocab = text, n, ids, r.vocab
		if n > 1 {
			m.TPS = float64(n-1) / time.Since(first).Seconds()
		}
		if final != nil {
			m.Finish = string(final.Reason)
			if final.Err != nil {
				m.Error = final.Err.Error()
			}
			m.Prompt, m.Cached = final.PromptTokens, final.CachedTokens
			if final.Generated > 0 {
				m.Tokens = final.Generated
			}
		}
	})
	if final != nil {
		// The reply is over (one sample a request): the conversation is
		// free at once, before the stream closes.
		delete(p.live, r.conv)
		delete(p.runs, r.conv)
		r.cancel()
	}
	p.afterChange(r.conv)
}

// finish forgets a run whose stream has closed.
func (p *Pane) finish(r *run) {
	r.cancel()
	if p.closed || p.runs[r.conv] != r {
		return // ended by its final chunk, as usual
	}
	delete(p.runs, r.conv)
	p.edit(r.conv, func(c *store.Conversation) {
		if r.msg < len(c.Messages) && c.Messages[r.msg].Finish == "" {
			c.Messages[r.msg].Finish = string(engine.FinishCancelled)
		}
	})
	p.afterChange(r.conv)
}
