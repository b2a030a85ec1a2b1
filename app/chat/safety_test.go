package chat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

// oneConversation returns conversations holding one, with msgs.
func oneConversation(msgs ...store.Message) store.Conversations {
	return store.Conversations{Version: store.Version, Selected: 1, NextID: 2, List: []store.Conversation{{
		ID: 1, Title: "t", Sampling: store.DefaultSampling(), Messages: msgs}}}
}

// openPane makes a pane over data saving in a new directory, closed at the
// end of the test, and returns it with its store.
func openPane(t *testing.T, data store.Conversations) (*Pane, *store.Store) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var p *Pane
	uithread.Locked(func() { p = New(st, data) })
	t.Cleanup(func() { uithread.Locked(p.Close) })
	return p, st
}

// onDisk returns the messages of conversation 1 as saved.
func onDisk(t *testing.T, st *store.Store) []store.Message {
	t.Helper()
	got, err := st.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.List) == 0 {
		return nil
	}
	return got.List[0].Messages
}

// The background saver copies the conversations, then writes them; a save
// on the UI goroutine (SendText's) can land in between. Copy a is taken
// before one more message, copy b after; whatever order they are saved in,
// the disk must never go back to a, and the pane must count an edit as
// saved only once a copy holding it is on disk.
func TestOlderCopyNeverReplacesNewerSave(t *testing.T) {
	tests := []struct {
		name      string
		commits   string // the copies saved, in order
		wantMsgs  int    // messages on disk at the end
		wantDirty bool
	}{
		{"older copy lands after the newer save", "ba", 1, false},
		{"older copy lands first", "ab", 1, false},
		{"edit made while the copy was being saved", "a", 0, true},
		{"newer copy only", "b", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, st := openPane(t, oneConversation())
			copies := map[rune]snapshot{}
			uithread.Locked(func() {
				p.edit(1, func(c *store.Conversation) { c.Draft = "old" })
				copies['a'] = p.snapshot()
				p.edit(1, func(c *store.Conversation) {
					c.Messages = append(c.Messages, store.Message{Role: "user", Text: "sent message"})
					c.Draft = ""
				})
				copies['b'] = p.snapshot()
			})
			for _, r := range tc.commits {
				if err := p.commit(copies[r]); err != nil {
					t.Fatal(err)
				}
			}
			if got := onDisk(t, st); len(got) != tc.wantMsgs {
				t.Errorf("on disk %d messages %+v, want %d", len(got), got, tc.wantMsgs)
			}
			if d := p.dirty(); d != tc.wantDirty {
				t.Errorf("dirty = %v, want %v", d, tc.wantDirty)
			}
			if err := p.write(); err != nil {
				t.Fatal(err)
			}
			if got := onDisk(t, st); len(got) != 1 || p.dirty() {
				t.Errorf("after a save of the current state: %d messages on disk, dirty %v", len(got), p.dirty())
			}
		})
	}
}

// The same race, for real: a goroutine saving in a loop, as the saver does,
// while the UI goroutine adds messages and saves each at once. Once a save
// on the UI goroutine has returned, the disk never holds less.
func TestSaverNeverOverwritesANewerSave(t *testing.T) {
	p, st := openPane(t, oneConversation())
	stop, done := make(chan struct{}), make(chan struct{})
	stopWriting := sync.OnceFunc(func() { close(stop); <-done })
	defer stopWriting() // before the pane closes and the directory goes
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				if err := p.write(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for k := 1; k <= 40; k++ {
		uithread.Locked(func() {
			p.edit(1, func(c *store.Conversation) {
				c.Messages = append(c.Messages, store.Message{Role: "user", Text: fmt.Sprint(k)})
			})
			p.saveNow()
		})
		if got := onDisk(t, st); len(got) < k {
			t.Fatalf("after saving message %d the disk holds %d: an older copy replaced it", k, len(got))
		}
	}
	stopWriting()
	if got := onDisk(t, st); len(got) != 40 || p.dirty() {
		t.Errorf("at the end: %d messages on disk, dirty %v; want 40, false", len(got), p.dirty())
	}
}

// Editing an earlier message must not cost the unsent draft: it comes back
// when the edit is cancelled, sent, or left for another conversation, and
// typing the edit does not change it.
func TestEditingAMessageKeepsTheDraft(t *testing.T) {
	const draft = "my long unsent draft"
	tests := []struct {
		name      string
		needModel bool
		end       func(t *testing.T, p *Pane)
		wantMsgs  int // messages in the conversation after the edit ends
	}{
		{"cancel", false, func(t *testing.T, p *Pane) { p.cancelEdit() }, 2},
		{"switch conversation and back", false, func(t *testing.T, p *Pane) {
			p.NewConversation()
			p.Select(1)
		}, 2},
		{"send the edit", true, func(t *testing.T, p *Pane) {
			p.edit(1, func(c *store.Conversation) { c.Sampling.MaxTokens = 3 })
			p.Send()
			if s := shownError(p); s != "" {
				t.Fatalf("send failed: %s", s)
			}
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, st := openPane(t, oneConversation(
				store.Message{Role: "user", Text: "first"}, store.Message{Role: "assistant", Text: "reply", Finish: "stop"}))
			if tc.needModel {
				e := storiesEngine(t)
				uithread.Locked(func() { setEngine(p, e, "") })
			}
			uithread.Locked(func() {
				test.NewTempWindow(t, p)
				test.Type(p.composer, draft)
				p.EditMessage(0)
				if p.composer.Text != "first" {
					t.Fatalf("edit mode shows %q, want the message", p.composer.Text)
				}
				test.Type(p.composer, " and more")
				if d := p.conv(1).Draft; d != draft {
					t.Fatalf("while editing the draft became %q", d)
				}
				tc.end(t, p)
			})
			if tc.needModel {
				uithread.WaitFor(t, "the reply to the edit", func() bool { return !p.Running(1) })
			}
			uithread.Locked(func() {
				c := p.conv(1)
				if c.Draft != draft || p.composer.Text != draft || !p.editBar.Hidden {
					t.Errorf("after the edit: draft %q, composer %q, edit bar hidden %v; want the draft back",
						c.Draft, p.composer.Text, p.editBar.Hidden)
				}
				if len(c.Messages) != tc.wantMsgs || c.Messages[0].Text != map[bool]string{true: "first and more", false: "first"}[tc.needModel] {
					t.Errorf("messages after the edit: %+v", c.Messages)
				}
				p.saveNow()
			})
			got, _ := st.LoadConversations()
			if len(got.List) == 0 || got.List[0].Draft != draft {
				t.Errorf("the draft on disk is lost: %+v", got.List)
			}
		})
	}
}

// A conversations file that exists but cannot be read must survive the
// pane's saves: it is set aside and reported, and the pane saves anew.
func TestUnreadableConversationsAreSetAsideNotOverwritten(t *testing.T) {
	const precious = `{"version":1,"selected":1,"next_id":2,"conversations":[{"id":1,"title":"precious","messages":[{"role":"user","text":"my precious words","time":"2026-01-01T00:00:00Z"}],"sampling":{"temperature":0,"top_k":0,"top_p":0,"min_p":0,"repeat_penalty":0,"max_tokens":0,"seed":0},"created":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z"}]}`
	ways := []struct {
		name     string
		make     func(path string) error
		read     func(aside string) ([]byte, error)
		needUser bool
	}{
		{"no read permission", func(path string) error {
			if err := os.WriteFile(path, []byte(precious), 0o600); err != nil {
				return err
			}
			return os.Chmod(path, 0)
		}, func(aside string) ([]byte, error) {
			if err := os.Chmod(aside, 0o600); err != nil {
				return nil, err
			}
			return os.ReadFile(aside)
		}, true},
		{"a directory in its place", func(path string) error {
			if err := os.Mkdir(path, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(path, "inside"), []byte(precious), 0o600)
		}, func(aside string) ([]byte, error) { return os.ReadFile(filepath.Join(aside, "inside")) }, false},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			if w.needUser && os.Getuid() == 0 {
				t.Skip("root reads files without read permission")
			}
			dir := t.TempDir()
			path := filepath.Join(dir, store.ConversationsFile)
			if err := w.make(path); err != nil {
				t.Fatal(err)
			}
			st, _ := store.Open(dir)
			data, err := st.LoadConversations() // app.New reports the error and goes on
			var ce *store.CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("load error %v, want a *store.CorruptError saying where the file went", err)
			}
			var p *Pane
			uithread.Locked(func() { p = New(st, data) })
			time.Sleep(SaveEvery + 300*time.Millisecond)
			uithread.Locked(p.Close)
			if b, err := w.read(ce.Aside); !strings.Contains(string(b), "my precious words") {
				t.Errorf("the set-aside file %s holds %.80q (%v), want the original", ce.Aside, b, err)
			}
			if got, err := st.LoadConversations(); err != nil || len(got.List) != 1 {
				t.Errorf("the pane's new file: %+v, %v", got, err)
			}
		})
	}
}

// A conversations file that could be neither read nor set aside (here: in
// a read-only directory) is never saved over, even once the directory is
// writable again; the pane says why it cannot save.
func TestPaneNeverSavesOverAFileItCouldNotRead(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("needs a non-root user: root reads and renames anything")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, store.ConversationsFile)
	const precious = `{"version":1,"conversations":[{"id":1,"title":"precious"}]}`
	if err := os.WriteFile(path, []byte(precious), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0)
	os.Chmod(dir, 0o500)
	st, _ := store.Open(dir)
	data, err := st.LoadConversations()
	if err == nil || !strings.Contains(err.Error(), "nor set aside") {
		t.Fatalf("load error %v, want one saying the file could not be set aside", err)
	}
	os.Chmod(dir, 0o700)
	var p *Pane
	uithread.Locked(func() {
		p = New(st, data)
		p.saveNow()
		if s := shownError(p); !strings.Contains(s, "not saving") {
			t.Errorf("status %q, want the refusal to save", s)
		}
		p.Close()
	})
	os.Chmod(path, 0o600)
	if b, _ := os.ReadFile(path); string(b) != precious {
		t.Errorf("the file that could not be read was replaced: %.80q", b)
	}
}

// A save that fails is shown above the composer and tried again later.
func TestFailedSaveIsReportedAndRetried(t *testing.T) {
	p, st := openPane(t, oneConversation())
	var reported []error
	uithread.Locked(func() {
		p.OnError = func(err error) { reported = append(reported, err) }
		if err := os.RemoveAll(st.Dir()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(st.Dir(), nil, 0o600); err != nil { // a file where the directory was
			t.Fatal(err)
		}
		p.edit(1, func(c *store.Conversation) { c.Draft = "kept" })
		p.saveNow()
		if !strings.Contains(shownError(p), "could not be saved") || len(reported) != 1 || !p.dirty() {
			t.Errorf("failed save: status %q, %d reported, dirty %v", shownError(p), len(reported), p.dirty())
		}
		os.Remove(st.Dir())
		os.Mkdir(st.Dir(), 0o755)
	})
	uithread.WaitFor(t, "the saver to try again", func() bool { return !p.dirty() })
	got, err := st.LoadConversations()
	if err != nil || len(got.List) != 1 || got.List[0].Draft != "kept" {
		t.Errorf("after the retry: %+v, %v", got.List, err)
	}
}

// findButton returns the button labelled text inside o, or nil.
func findButton(o fyne.CanvasObject, text string) *widget.Button {
	switch v := o.(type) {
	case *widget.Button:
		if v.Text == text {
			return v
		}
		return nil
	case *fyne.Container:
		for _, c := range v.Objects {
			if b := findButton(c, text); b != nil {
				return b
			}
		}
	case fyne.Widget:
		for _, c := range test.WidgetRenderer(v).Objects() {
			if b := findButton(c, text); b != nil {
				return b
			}
		}
	}
	return nil
}

// The trash button asks before deleting a conversation; Cancel keeps it.
func TestDeleteButtonAsksFirst(t *testing.T) {
	tests := []struct {
		answer string
		want   int // conversations left
	}{
		{"Cancel", 2},
		{"Delete", 1},
	}
	for _, tc := range tests {
		t.Run(tc.answer, func(t *testing.T) {
			p, _ := openPane(t, oneConversation(store.Message{Role: "user", Text: "worth keeping"}))
			uithread.Locked(func() {
				w := test.NewTempWindow(t, p)
				w.Resize(fyne.NewSize(900, 700))
				p.NewConversation()
				p.Select(1)
				test.Tap(p.delBtn)
				if n := len(p.Conversations().List); n != 2 {
					t.Fatalf("one tap on the trash button left %d conversations, want 2 until confirmed", n)
				}
				top := w.Canvas().Overlays().Top()
				if top == nil {
					t.Fatal("no confirmation dialog")
				}
				b := findButton(top, tc.answer)
				if b == nil {
					t.Fatalf("the dialog has no %q button", tc.answer)
				}
				test.Tap(b)
				if n := len(p.Conversations().List); n != tc.want {
					t.Errorf("after %s: %d conversations, want %d", tc.answer, n, tc.want)
				}
				if tc.want == 1 && p.conv(1) != nil {
					t.Error("Delete removed the wrong conversation")
				}
			})
		})
	}
}

// Text the user types as a special token ("</s>") is sent as text, not as
// the token: the prompt has as many tokens as the text encodes to without
// special tokens.
func TestTypedSpecialTokenStaysText(t *testing.T) {
	e := storiesEngine(t)
	p, _ := newPane(t, t.TempDir(), e)
	const typed = "The end.</s>Once upon a time"
	var prompt string
	uithread.Locked(func() {
		id := p.Selected()
		p.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 2; c.Sampling.Temperature = 0 })
		if err := p.SendText(id, typed); err != nil {
			t.Fatal(err)
		}
		prompt = Prompt(*p.conv(id), 1)
	})
	asText := len(e.Tokenizer().Encode(prompt, true, false))
	asToken := len(e.Tokenizer().Encode(prompt, true, true))
	if asText == asToken {
		t.Fatalf("the prompt %q encodes to %d tokens either way: the test cannot tell", prompt, asText)
	}
	uithread.WaitFor(t, "the reply", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		if m := lastMessage(p); m.Prompt != asText {
			t.Errorf("the prompt went in as %d tokens, want %d (the typed </s> as text; as the token it would be %d)", m.Prompt, asText, asToken)
		}
	})
}
