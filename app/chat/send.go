// This file holds sending in the chat pane: a message sent (or an edit
// resent), a reply stopped or regenerated, and the edit mode.

package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"kvscope/app/store"
)

// Send sends the composer's text in the shown conversation (replacing the
// message being edited and everything after it, in edit mode) and starts
// the reply.
func (p *Pane) Send() {
	text := p.composer.Text
	if strings.TrimSpace(text) == "" {
		return
	}
	id := p.data.Selected
	if err := p.SendText(id, text); err != nil {
		p.showError(err.Error())
		return
	}
	draft := "" // sending an edit brings back the draft typed before it
	if c := p.conv(id); c != nil {
		draft = c.Draft
	}
	p.composer.SetText(draft)
}

// SendText sends text as a user message in conversation id and starts the
// reply. It clears the conversation's draft, unless it sends an edit. It
// refuses while the conversation is generating or no model is open.
func (p *Pane) SendText(id int64, text string) error {
	if p.eng == nil {
		return errors.New("no model is open: open a GGUF file or start the demo model first")
	}
	if p.runs[id] != nil {
		return errors.New("this conversation is still generating: stop it or wait for the reply")
	}
	c := p.conv(id)
	if c == nil {
		return fmt.Errorf("no conversation %d", id)
	}
	editing := -1
	if id == p.data.Selected {
		editing = p.editing
	}
	now := time.Now()
	p.edit(id, func(c *store.Conversation) {
		if editing >= 0 && editing < len(c.Messages) {
			c.Messages = c.Messages[:editing]
		}
		if len(c.Messages) == 0 && (c.Title == "" || c.Title == "New chat") {
			c.Title = Title(text)
		}
		c.Messages = append(c.Messages, store.Message{Role: "user", Text: text, Time: now},
			store.Message{Role: "assistant", Time: now})
		if editing < 0 { // an edit was not the draft: the draft stays
			c.Draft = ""
		}
	})
	if id == p.data.Selected {
		p.editing = -1
		p.editBar.Hide()
		p.title.SetText(p.conv(id).Title)
	}
	p.saveNow() // what the user typed is on disk before anything runs
	p.start(id)
	return nil
}

// Running reports whether conversation id is generating.
func (p *Pane) Running(id int64) bool { return p.runs[id] != nil }

// Stop ends conversation id's reply; the text so far stays.
func (p *Pane) Stop(id int64) {
	if r := p.runs[id]; r != nil {
		r.turn.Stop()
	}
}

// Regenerate replaces the last reply of conversation id with a new one,
// from the same prompt (whose full blocks the prefix cache still holds).
func (p *Pane) Regenerate(id int64) error {
	if p.eng == nil {
		return errors.New("no model is open")
	}
	if p.runs[id] != nil {
		return errors.New("this conversation is still generating: stop it first")
	}
	c := p.conv(id)
	if c == nil || len(c.Messages) == 0 || c.Messages[len(c.Messages)-1].Role != "assistant" {
		return errors.New("there is no reply to regenerate")
	}
	p.edit(id, func(c *store.Conversation) {
		c.Messages[len(c.Messages)-1] = store.Message{Role: "assistant", Time: time.Now()}
	})
	p.saveNow()
	p.start(id)
	return nil
}

// EditMessage puts user message i of the shown conversation back in the
// composer; Send then replaces it and everything after it. The unsent
// draft is kept, and comes back when the edit is sent or cancelled.
func (p *Pane) EditMessage(i int) {
	c := p.conv(p.data.Selected)
	if c == nil || i < 0 || i >= len(c.Messages) || c.Messages[i].Role != "user" {
		return
	}
	if p.runs[c.ID] != nil {
		p.showError("stop the reply before editing")
		return
	}
	p.editing = i
	p.composer.SetText(c.Messages[i].Text)
	p.editLabel.SetText(fmt.Sprintf("Editing message %d: Send replaces it and the %d messages after it.", i+1, len(c.Messages)-i-1))
	p.editBar.Show()
}

// cancelEdit leaves edit mode and puts the draft back in the composer.
func (p *Pane) cancelEdit() {
	p.editing = -1
	p.editBar.Hide()
	draft := ""
	if c := p.conv(p.data.Selected); c != nil {
		draft = c.Draft
	}
	p.composer.SetText(draft)
}
