package chat

import (
	"strings"

	"fyne.io/fyne/v2/widget"

	"kvscope/engine"
	echat "kvscope/engine/chat"
)

// What the tests read off the pane's widgets, as a user sees them.

// setEngine makes p generate on e with the chat template echat.FromGGUF
// chooses for e's model (plain completion where it fails), as the app does.
func setEngine(p *Pane, e *engine.Engine, note string) {
	f, problem := echat.Plain(), ""
	if e != nil {
		var err error
		if f, err = echat.FromGGUF(e.Model().File, e.Tokenizer()); err != nil {
			f, problem = echat.Plain(), "the model's chat template cannot be used: "+err.Error()
		}
	}
	p.SetModel(e, f, problem, note)
}

// shownError is the error line above the composer ("" when hidden).
func shownError(p *Pane) string {
	if !p.status.Visible() {
		return ""
	}
	return p.status.Text
}

// templateText is what the mode bar says about the shown conversation's
// prompt ("" when hidden).
func templateText(p *Pane) string {
	if !p.mode.root.Visible() {
		return ""
	}
	return p.mode.label.Text
}

// shownText is the text of a message view's labels, one segment a label
// joined by "|" (compare with Segments of the message's text).
func shownText(v *messageView) string {
	var parts []string
	for _, o := range v.text.Objects {
		parts = append(parts, o.(*widget.Label).Text)
	}
	return strings.Join(parts, "|")
}
