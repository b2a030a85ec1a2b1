// This file holds one message's view: who, its text, the reply's footer
// (tokens and speed) and its buttons.

package chat

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/engine"
)

// messageView shows one message: who, the text, a footer with the reply's
// tokens and speed, and its buttons.
type messageView struct {
	root   *fyne.Container
	bg     *canvas.Rectangle
	role   *widget.Label
	text   *fyne.Container // one wrapping label per segment (see Segments)
	shown  string
	footer *widget.Label
	regen  *widget.Button
	edit   *widget.Button
	stop   *widget.Button
}

func newMessageView(p *Pane, i int) *messageView {
	v := &messageView{
		bg:     canvas.NewRectangle(theme.Color(theme.ColorNameInputBackground)),
		role:   widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		text:   container.New(layout.NewCustomPaddedVBoxLayout(0)),
		footer: widget.NewLabel(""),
	}
	v.bg.CornerRadius = theme.InputRadiusSize()
	v.footer.Importance = widget.LowImportance
	v.footer.Wrapping = fyne.TextWrapWord // the whole footer, never cut ("prompt 5 t…")
	v.regen = widget.NewButtonWithIcon("Regenerate", theme.ViewRefreshIcon(), func() {
		if err := p.Regenerate(p.data.Selected); err != nil {
			p.showError(err.Error())
		}
	})
	v.edit = widget.NewButtonWithIcon("Edit", theme.DocumentCreateIcon(), func() { p.EditMessage(i) })
	v.stop = widget.NewButtonWithIcon("Stop", theme.MediaStopIcon(), func() { p.Stop(p.data.Selected) })
	for _, b := range []*widget.Button{v.regen, v.edit, v.stop} {
		b.Importance = widget.LowImportance
	}
	head := container.NewHBox(v.role, v.edit, v.regen, v.stop)
	body := container.NewVBox(head, v.text, v.footer)
	v.root = container.NewStack(v.bg, container.NewPadded(body))
	return v
}

// set shows message m; last says it is the conversation's last message and
// running that the conversation is generating.
func (v *messageView) set(m store.Message, last, running bool) {
	user := m.Role == "user"
	if user {
		v.role.SetText("You")
		v.bg.FillColor = theme.Color(theme.ColorNameInputBackground)
	} else {
		v.role.SetText("Model")
		v.bg.FillColor = theme.Color(theme.ColorNameMenuBackground)
	}
	v.bg.Refresh()
	text := m.Text
	if !user && text == "" && m.Finish == "" {
		text = "…"
	}
	v.setText(text)
	footer := ""
	if !user {
		footer = Footer(m)
	}
	if v.footer.Text != footer {
		v.footer.SetText(footer)
	}
	v.footer.Hidden = user
	setShown(v.edit, user && !running)
	setShown(v.regen, !user && last && !running)
	setShown(v.stop, !user && last && running && m.Finish == "")
}

func setShown(o fyne.CanvasObject, shown bool) {
	if shown {
		o.Show()
	} else {
		o.Hide()
	}
}

// Footer says how a reply went: its tokens, speed, end and prompt use, such
// as "42 tokens · 35.1 tok/s · finished · cached 48 of 60 prompt tokens".
func Footer(m store.Message) string {
	var parts []string
	parts = append(parts, engine.Count(m.Tokens, "token"))
	if m.TPS > 0 {
		parts = append(parts, fmt.Sprintf("%.1f tok/s", m.TPS))
	}
	switch m.Finish {
	case "":
		parts = append(parts, "generating")
	case "stop":
		parts = append(parts, "finished")
	case "length":
		if m.Error != "" {
			parts = append(parts, m.Error) // the context, not max tokens, ended it
		} else {
			parts = append(parts, "length limit reached")
		}
	case "cancelled":
		parts = append(parts, "stopped")
	case "interrupted":
		parts = append(parts, "interrupted when kvscope closed")
	case "error":
		parts = append(parts, "error: "+m.Error)
	default:
		parts = append(parts, m.Finish)
	}
	if m.Prompt > 0 {
		parts = append(parts, fmt.Sprintf("cached %d of %d prompt tokens", m.Cached, m.Prompt))
	}
	return strings.Join(parts, " · ")
}

// SegmentChars is the longest stretch of text one label wraps. Fyne
// re-measures a wrapping label's whole text on every change, so a reply of
// thousands of tokens in one label makes each streamed update slower than
// the last; split, only the last segment changes as tokens arrive.
const SegmentChars = 600

// Segments splits text into paragraphs at newlines, and paragraphs longer
// than max bytes at the last space before max (or at max when there is
// none), never inside a UTF-8 character. Joined back with the separators it
// dropped, the segments are the text.
func Segments(text string, max int) []string {
	var out []string
	for _, para := range strings.Split(text, "\n") {
		for len(para) > max {
			cut := strings.LastIndexByte(para[:max], ' ')
			if cut <= 0 {
				cut = max
				for cut > 0 && !utf8.RuneStart(para[cut]) {
					cut--
				}
				if cut == 0 {
					cut = max
				}
			}
			out = append(out, para[:cut])
			para = para[cut:]
		}
		out = append(out, para)
	}
	return out
}

// setText shows text, changing only the segments that differ.
func (v *messageView) setText(text string) {
	if text == v.shown {
		return
	}
	v.shown = text
	segs := Segments(text, SegmentChars)
	for i, s := range segs {
		if i < len(v.text.Objects) {
			if l := v.text.Objects[i].(*widget.Label); l.Text != s {
				l.SetText(s)
			}
			continue
		}
		l := widget.NewLabel(s)
		l.Wrapping = fyne.TextWrapWord
		l.Selectable = true
		v.text.Add(l)
	}
	if len(v.text.Objects) > len(segs) {
		v.text.Objects = v.text.Objects[:len(segs)]
		v.text.Refresh()
	}
}
