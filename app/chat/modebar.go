// This file holds the mode bar: how a conversation's prompt is made, and
// its plain-completion and thinking choices.

package chat

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

// modeBar says how the shown conversation's prompt is made (its chat
// template, or plain completion) and holds its per-conversation choices:
// plain completion instead of the model's template, and thinking for
// templates that read enable_thinking.
type modeBar struct {
	p       *Pane
	root    *fyne.Container
	label   *widget.Label
	checks  *fyne.Container // plain and think, under the label
	plain   *widget.Check
	think   *widget.Check
	loading bool // show is filling the widgets: do not write back
}

func newModeBar(p *Pane) *modeBar {
	b := &modeBar{p: p, label: widget.NewLabel("")}
	b.label.Importance = widget.LowImportance
	// The label has a line of its own and wraps: a narrow pane shows the
	// template's whole name, on more lines, not cut off.
	b.label.Wrapping = fyne.TextWrapWord
	b.plain = widget.NewCheck("Plain completion", func(on bool) {
		b.write(func(c *store.Conversation) { c.Plain = on })
	})
	b.think = widget.NewCheck("Thinking", func(on bool) {
		b.write(func(c *store.Conversation) { c.Thinking = &on })
	})
	b.checks = container.NewHBox(b.plain, b.think)
	b.root = container.NewVBox(b.label, b.checks)
	b.root.Hide()
	return b
}

// write changes the shown conversation, unless show is filling the
// widgets, and shows what its prompt is now.
func (b *modeBar) write(change func(c *store.Conversation)) {
	if b.loading {
		return
	}
	id := b.p.data.Selected
	b.p.edit(id, change)
	if c := b.p.conv(id); c != nil {
		b.show(c)
	}
	b.p.showContext()
}

// show fills the bar from c and the pane's model: hidden without a model;
// the plain-completion choice only where the model has a template, and
// the thinking switch only where the template reads enable_thinking.
func (b *modeBar) show(c *store.Conversation) {
	b.loading = true
	defer func() { b.loading = false }()
	pr := b.p.prompter
	if pr == nil {
		b.root.Hide()
		return
	}
	b.label.SetText(pr.Describe(*c))
	b.plain.SetChecked(c.Plain)
	setShown(b.plain, pr.HasTemplate())
	b.think.SetChecked(c.Thinking == nil || *c.Thinking)
	setShown(b.think, pr.Thinks() && !c.Plain)
	setShown(b.checks, b.plain.Visible() || b.think.Visible())
	b.root.Refresh() // lays out the checks just shown, and the label's lines
	b.root.Show()
}

// count is a conversation's prompt length, counted in the background for
// the context bar: rendering a template may take a while.
type count struct {
	key     string // what it was counted from (see countKey)
	n       int    // tokens, or -1 if the prompt could not be made
	running bool   // a count is under way
}

// countKey is what a conversation's prompt length depends on.
func countKey(c *store.Conversation) string {
	thinking := "default"
	if c.Thinking != nil {
		thinking = fmt.Sprint(*c.Thinking)
	}
	k := fmt.Sprintf("%t %s %d %q", c.Plain, thinking, len(c.Messages), c.System)
	if n := len(c.Messages); n > 0 {
		m := c.Messages[n-1]
		k += fmt.Sprintf(" %d %d %s", len(m.Text), len(m.IDs), m.Finish)
	}
	return k
}

// promptTokens returns how many tokens c's context holds: the prompt of
// its next reply, counted on a goroutine (see count) while c is not
// generating (the engine's snapshots tell then). Until a count of c as it
// is now is done, it gives the last finished reply's prompt and tokens,
// else the last count, else false.
func (p *Pane) promptTokens(c *store.Conversation) (int, bool) {
	key := countKey(c)
	ct := p.counts[c.ID]
	if ct == nil {
		ct = &count{n: -1}
		p.counts[c.ID] = ct
	}
	if !ct.running && ct.key == key && ct.n >= 0 {
		return ct.n, true
	}
	if !ct.running && ct.key != key && p.runs[c.ID] == nil {
		ct.running = true
		pr, conv, id := p.prompter, cloneConv(*c), c.ID
		go func() {
			ids, err := pr.IDs(conv, len(conv.Messages))
			n := len(ids)
			if err != nil {
				n = -1
			}
			uithread.Do(func() {
				if p.counts[id] != ct || p.prompter != pr {
					return // the model changed meanwhile
				}
				ct.key, ct.n, ct.running = key, n, false
				if id == p.data.Selected {
					p.showContext() // counts again if c changed meanwhile
				}
			})
		}()
	}
	if n := len(c.Messages); n > 0 {
		if m := c.Messages[n-1]; m.Role == "assistant" && m.Finish != "" && m.Prompt > 0 && m.Vocab == p.prompter.Vocab() {
			return m.Prompt + m.Tokens, true
		}
	}
	if ct.n >= 0 {
		return ct.n, true
	}
	return 0, false
}
