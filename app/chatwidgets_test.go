package app

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// The chat pane's widgets, found in its tree as a user finds them on the
// screen: the composer by its placeholder, Send by its label, the mode bar
// and the error line by what they say. Call them holding uithread's lock.

// visit calls f on every visible object of o's tree, widgets' parts
// included, until f returns true.
func visit(o fyne.CanvasObject, f func(fyne.CanvasObject) bool) bool {
	if o == nil || !o.Visible() {
		return false
	}
	if f(o) {
		return true
	}
	var kids []fyne.CanvasObject
	switch x := o.(type) {
	case *fyne.Container:
		kids = x.Objects
	case fyne.Widget:
		kids = test.WidgetRenderer(x).Objects()
	}
	for _, k := range kids {
		if visit(k, f) {
			return true
		}
	}
	return false
}

// chatComposer returns the chat pane's message entry.
func chatComposer(t *testing.T, a *App) *widget.Entry {
	t.Helper()
	var e *widget.Entry
	visit(a.chat, func(o fyne.CanvasObject) bool {
		x, ok := o.(*widget.Entry)
		if ok && strings.HasPrefix(x.PlaceHolder, "Type a message") {
			e = x
		}
		return e != nil
	})
	if e == nil {
		t.Fatal("the chat pane shows no composer")
	}
	return e
}

// chatSend returns the chat pane's Send button.
func chatSend(t *testing.T, a *App) *widget.Button {
	t.Helper()
	var b *widget.Button
	visit(a.chat, func(o fyne.CanvasObject) bool {
		x, ok := o.(*widget.Button)
		if ok && x.Text == "Send" {
			b = x
		}
		return b != nil
	})
	if b == nil {
		t.Fatal("the chat pane shows no Send button")
	}
	return b
}

// chatLabel returns the text of the first visible label in the chat pane
// that keep accepts, or "".
func chatLabel(a *App, keep func(l *widget.Label) bool) string {
	text := ""
	visit(a.chat, func(o fyne.CanvasObject) bool {
		if l, ok := o.(*widget.Label); ok && keep(l) {
			text = l.Text
			return true
		}
		return false
	})
	return text
}

// chatTemplate returns what the chat pane's mode bar says about the shown
// conversation's prompt ("Template: …" or "Plain completion…"), or "".
func chatTemplate(a *App) string {
	return chatLabel(a, func(l *widget.Label) bool {
		return strings.HasPrefix(l.Text, "Template: ") || strings.HasPrefix(l.Text, "Plain completion")
	})
}

// chatError returns the error line shown above the composer, or "".
func chatError(a *App) string {
	return chatLabel(a, func(l *widget.Label) bool { return l.Importance == widget.DangerImportance && l.Text != "" })
}

// chatContext returns the chat pane's context-usage line ("context: …").
func chatContext(a *App) string {
	return chatLabel(a, func(l *widget.Label) bool { return strings.HasPrefix(l.Text, "context: ") })
}
