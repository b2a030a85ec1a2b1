// This file holds the pane's replies: each runs as a turn.Turn (package
// app/chat/turn, no UI), whose reports come to the UI goroutine here and go
// into the conversation's message.

package chat

import (
	"kvscope/app/chat/turn"
	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
)

// run is one reply being generated.
type run struct {
	turn  *turn.Turn
	conv  int64
	msg   int    // index of the assistant message it fills
	req   uint64 // the engine's request, once submitted (0 until then)
	vocab string // the vocabulary of its token ids
}

// start generates the reply into the last message of conversation id. The
// prompt (a chat template's rendering, which may take a while) is made and
// submitted by the turn, off the UI goroutine; until then the reply shows
// it is under way and Stop ends it.
func (p *Pane) start(id int64) {
	c := p.conv(id)
	msg := len(c.Messages) - 1
	sp := turn.Sampling(c.Sampling)
	r := &run{conv: id, msg: msg, vocab: p.prompter.Vocab()}
	conv, pr := cloneConv(*c), p.prompter
	// The prompt is token ids: the template's control tokens come from its
	// text alone, and what the user typed is text, so "</s>" or
	// "<|im_end|>" typed in a message is those characters, not the token.
	req := engine.Request{Sampling: &sp, MaxTokens: c.Sampling.MaxTokens, Label: Name(*c)}
	prompt := func() ([]int, error) { return pr.IDs(conv, msg) }
	if c.JSON {
		var err error
		if req.Constraint, err = replyConstraint(c.JSONSchema); err != nil {
			prompt = func() ([]int, error) { return nil, err } // refused, and said so above the composer
		}
	}
	p.runs[id] = r
	r.turn = turn.Start(p.eng, prompt, req, turn.Hooks{
		Submitted: func(req uint64) { uithread.Do(func() { p.submitted(r, req) }) },
		Progress:  func(g turn.Progress) { uithread.Do(func() { p.apply(r, g) }) },
	})
	p.afterChange(id)
}

// submitted notes the engine's request of a reply (UI goroutine).
func (p *Pane) submitted(r *run, req uint64) {
	if !p.closed && p.runs[r.conv] == r {
		r.req = req
		p.reqConv[req] = r.conv
	}
}

// apply puts a reply's progress into its message, and when it is done
// frees the conversation (UI goroutine). A prompt that could not be made
// or submitted shows its error above the composer too.
func (p *Pane) apply(r *run, g turn.Progress) {
	if p.closed || p.runs[r.conv] != r {
		return // the pane closed, or the reply already ended
	}
	p.edit(r.conv, func(c *store.Conversation) {
		if r.msg < len(c.Messages) {
			g.Apply(&c.Messages[r.msg], r.vocab)
		}
	})
	if g.Done {
		delete(p.live, r.conv)
		delete(p.runs, r.conv)
		if g.Refused && g.Err != "" && r.conv == p.data.Selected {
			p.showError(g.Err)
		}
	}
	p.afterChange(r.conv)
}
