package app

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"

	"kvscope/app/uithread"
	"kvscope/engine/backend/native"
)

// Choosing a compute backend in Controls reloads the model on it, keeps
// every conversation, says in the status line which backend runs, and is
// saved for the next start.
func TestBackendChoiceReloadsKeepingConversations(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		test.Type(chatComposer(t, a), "Once upon a time")
		test.Tap(chatSend(t, a))
	})
	uithread.WaitFor(t, "the reply to finish", func() bool { return !a.chat.Running(a.chat.Selected()) })
	var convs int
	old := a.Engine()
	uithread.Locked(func() {
		convs = messages(a)
		a.controls.backend.SetSelected("go")
	})
	uithread.WaitFor(t, "the model to reload on the Go backend", func() bool { return a.Engine() != old })
	uithread.Locked(func() {
		if got := a.status.Text; !strings.Contains(got, "backend go") {
			t.Errorf("the status line does not say the Go backend runs: %q", got)
		}
		if n := messages(a); n != convs || n < 2 {
			t.Errorf("%d messages after the reload, %d before", n, convs)
		}
		if a.settings.Backend != "go" {
			t.Errorf("the saved backend is %q", a.settings.Backend)
		}
	})
	if _, err := native.Load(""); err != nil {
		t.Logf("the native library is not built, so the cpu choice falls back: %v", err)
	}
	old = a.Engine()
	uithread.Locked(func() { a.controls.backend.SetSelected("cpu") })
	uithread.WaitFor(t, "the model to reload again", func() bool { return a.Engine() != old })
	uithread.Locked(func() {
		got := a.status.Text
		_, err := native.Load("")
		if err == nil && !strings.Contains(got, "backend cpu") || err != nil && !strings.Contains(got, "does not load") {
			t.Errorf("status after choosing cpu: %q", got)
		}
	})
}

// messages counts the messages of every conversation.
func messages(a *App) int {
	n := 0
	for _, c := range a.chat.Conversations().List {
		n += len(c.Messages)
	}
	return n
}
