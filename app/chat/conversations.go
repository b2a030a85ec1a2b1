// This file holds the chat pane's conversations: the list beside it, a new
// one, selecting and deleting one, and what the shown one draws (messages,
// buttons, context use, errors).

package chat

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/engine"

	"github.com/dustin/go-humanize"
)

// NewConversation starts an empty conversation, shows it and returns its id.
func (p *Pane) NewConversation() int64 {
	p.mu.Lock()
	id := p.data.NextID
	p.data.NextID++
	now := time.Now()
	p.data.List = append(p.data.List, store.Conversation{ID: id, Title: "New chat", Sampling: store.DefaultSampling(), Created: now, Updated: now})
	p.edits++
	p.mu.Unlock()
	p.refreshList()
	p.Select(id)
	return id
}

// confirmDelete asks whether to delete conversation id, over the pane's
// window, and deletes it if the user agrees. With no window to ask in it
// deletes nothing.
func (p *Pane) confirmDelete(id int64) {
	c := p.conv(id)
	if c == nil {
		return
	}
	win := p.window()
	if win == nil {
		return
	}
	msg := fmt.Sprintf("Delete %q and its %d messages? This cannot be undone.", c.Title, len(c.Messages))
	if p.runs[id] != nil {
		msg = fmt.Sprintf("Delete %q and its %d messages? Its reply stops. This cannot be undone.", c.Title, len(c.Messages))
	}
	d := dialog.NewConfirm("Delete conversation", msg, func(yes bool) {
		if yes {
			p.Delete(id)
		}
	}, win)
	d.SetConfirmText("Delete")
	d.SetDismissText("Cancel")
	d.SetConfirmImportance(widget.DangerImportance)
	d.Show()
}

// window returns the window that shows the pane, else the app's first
// window, or nil when there is none.
func (p *Pane) window() fyne.Window {
	a := fyne.CurrentApp()
	if a == nil {
		return nil
	}
	wins := a.Driver().AllWindows()
	if cv := a.Driver().CanvasForObject(p); cv != nil {
		for _, w := range wins {
			if w.Canvas() == cv {
				return w
			}
		}
	}
	if len(wins) > 0 {
		return wins[0]
	}
	return nil
}

// Delete removes conversation id (stopping its reply), and shows another,
// without asking: the delete button asks first.
func (p *Pane) Delete(id int64) {
	if r := p.runs[id]; r != nil {
		r.turn.Stop()
		delete(p.runs, id)
	}
	p.mu.Lock()
	if i := p.find(id); i >= 0 {
		p.data.List = slices.Delete(p.data.List, i, i+1)
		p.edits++
	}
	empty := len(p.data.List) == 0
	p.mu.Unlock()
	p.refreshList()
	if empty {
		p.NewConversation()
		return
	}
	p.Select(p.data.List[len(p.data.List)-1].ID)
}

// refreshList rebuilds the sidebar order: newest first.
func (p *Pane) refreshList() {
	p.ids = p.ids[:0]
	for i := len(p.data.List) - 1; i >= 0; i-- {
		p.ids = append(p.ids, p.data.List[i].ID)
	}
	p.list.Refresh()
}

// sidebarStatus says what a conversation is doing, for the sidebar.
func (p *Pane) sidebarStatus(c *store.Conversation) string {
	if r := p.runs[c.ID]; r != nil && r.msg < len(c.Messages) {
		m := c.Messages[r.msg]
		if p.paused {
			return "paused: the scheduler is in step mode"
		}
		if m.TPS > 0 {
			return fmt.Sprintf("generating · %.1f tok/s", m.TPS)
		}
		return "generating…"
	}
	if c.Draft != "" {
		return "draft: " + strings.ReplaceAll(c.Draft, "\n", " ")
	}
	return fmt.Sprintf("%d messages", len(c.Messages))
}

// Select shows conversation id.
func (p *Pane) Select(id int64) {
	c := p.conv(id)
	if c == nil {
		return
	}
	p.mu.Lock()
	p.data.Selected = id
	p.edits++
	p.mu.Unlock()
	p.editing = -1
	p.editBar.Hide()
	p.status.Hide()
	p.title.SetText(c.Title)
	p.composer.SetText(c.Draft)
	p.settings.show(c)
	p.mode.show(c)
	p.showMessages()
	if i := slices.Index(p.ids, id); i >= 0 {
		p.list.Select(i)
	}
	if p.OnSelect != nil {
		p.OnSelect(id)
	}
}

// showMessages rebuilds the message views of the shown conversation.
func (p *Pane) showMessages() {
	c := p.conv(p.data.Selected)
	p.views = p.views[:0]
	p.msgs.Objects = nil
	if c != nil {
		for i := range c.Messages {
			v := newMessageView(p, i)
			v.set(c.Messages[i], p.isLast(c, i), p.runs[c.ID] != nil)
			p.views = append(p.views, v)
			p.msgs.Objects = append(p.msgs.Objects, v.root)
		}
		if len(c.Messages) == 0 {
			hint := widget.NewLabel("No messages yet. Type below and press Send; each conversation generates on its own, at the same time as the others.")
			hint.Wrapping = fyne.TextWrapWord
			hint.Importance = widget.LowImportance
			p.msgs.Objects = append(p.msgs.Objects, hint)
		}
	}
	p.msgs.Refresh()
	p.scroll.ScrollToBottom()
	p.showContext()
	p.showButtons()
}

func (p *Pane) isLast(c *store.Conversation, i int) bool { return i == len(c.Messages)-1 }

// showButtons enables Send and Stop for the shown conversation.
func (p *Pane) showButtons() {
	running := p.runs[p.data.Selected] != nil
	if running {
		p.sendBtn.Disable()
		p.stopBtn.Enable()
	} else {
		p.sendBtn.Enable()
		p.stopBtn.Disable()
	}
}

// showContext shows how much of the context the shown conversation uses.
func (p *Pane) showContext() {
	c := p.conv(p.data.Selected)
	if c == nil || p.eng == nil || p.context <= 0 {
		p.ctxLabel.SetText("context: no model")
		p.ctxBar.SetValue(0)
		return
	}
	n, ok := p.live[c.ID]
	if !ok {
		if n, ok = p.promptTokens(c); !ok {
			p.ctxLabel.SetText(fmt.Sprintf("context: counting… / %d tokens", p.context))
			return
		}
	}
	n = min(n, p.context) // a sequence holds at most its context, whatever was sampled last
	p.ctxLabel.SetText(fmt.Sprintf("context: %s / %s", humanize.Comma(int64(n)), engine.Count(p.context, "token")))
	p.ctxBar.SetValue(min(1, float64(n)/float64(p.context)))
}

// showError shows a problem above the composer ("" hides it).
func (p *Pane) showError(msg string) {
	p.status.SetText(msg)
	p.status.Hidden = msg == ""
	p.status.Refresh()
}

// afterChange redraws what shows conversation id.
func (p *Pane) afterChange(id int64) {
	p.list.Refresh()
	if id != p.data.Selected {
		return
	}
	c := p.conv(id)
	if c == nil {
		return
	}
	if len(p.views) != len(c.Messages) {
		p.showMessages()
		return
	}
	running := p.runs[id] != nil
	for i, v := range p.views {
		v.set(c.Messages[i], p.isLast(c, i), running)
	}
	p.scroll.ScrollToBottom()
	p.showContext()
	p.showButtons()
}
