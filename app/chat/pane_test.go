package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// storiesEngine starts an engine on the shared stories260K model.
func storiesEngine(t *testing.T) *engine.Engine {
	t.Helper()
	m, err := model.Load(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); m.Close() })
	return e
}

// newPane makes a pane on a test window, saving in dir.
func newPane(t *testing.T, dir string, e *engine.Engine) (*Pane, fyne.Window) {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := st.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	var p *Pane
	var w fyne.Window
	uithread.Locked(func() {
		p = New(st, data)
		setEngine(p, e, "stories260K: plain completion")
		w = test.NewTempWindow(t, p)
		w.Resize(fyne.NewSize(900, 700))
	})
	t.Cleanup(func() { uithread.Locked(p.Close) })
	return p, w
}

// lastMessage returns the shown conversation's last message.
func lastMessage(p *Pane) store.Message {
	c := p.conv(p.Selected())
	if c == nil || len(c.Messages) == 0 {
		return store.Message{}
	}
	return c.Messages[len(c.Messages)-1]
}

func TestTypingAndSendingStreamsAReply(t *testing.T) {
	p, _ := newPane(t, t.TempDir(), storiesEngine(t))
	uithread.Locked(func() {
		p.edit(p.Selected(), func(c *store.Conversation) { c.Sampling.MaxTokens = 40 })
		test.Type(p.composer, "Once upon a time")
		test.Tap(p.sendBtn)
	})
	var streamed bool
	uithread.WaitFor(t, "the reply to finish", func() bool {
		m := lastMessage(p)
		if m.Finish == "" && m.Text != "" {
			streamed = true // seen mid-stream
		}
		return m.Finish != ""
	})
	uithread.Locked(func() {
		c := p.conv(p.Selected())
		if len(c.Messages) != 2 || c.Messages[0].Text != "Once upon a time" || c.Messages[0].Role != "user" {
			t.Fatalf("messages %+v, want the user's then the reply", c.Messages)
		}
		m := c.Messages[1]
		if m.Finish != "length" && m.Finish != "stop" || m.Tokens == 0 || strings.TrimSpace(m.Text) == "" {
			t.Errorf("reply %+v: want text, tokens and a normal end", m)
		}
		if m.Finish == "length" && m.Tokens != 40 {
			t.Errorf("reply hit the length limit at %d tokens, want 40", m.Tokens)
		}
		if c.Title != "Once upon a time" {
			t.Errorf("title %q, want the first message", c.Title)
		}
		if p.composer.Text != "" {
			t.Errorf("composer still holds %q", p.composer.Text)
		}
		v := p.views[1]
		if shownText(v) != strings.Join(Segments(m.Text, SegmentChars), "|") || !strings.Contains(v.footer.Text, "tok/s") || !strings.Contains(v.footer.Text, "40 tokens") {
			t.Errorf("reply view shows %q / %q", shownText(v), v.footer.Text)
		}
		if !strings.HasPrefix(p.ctxLabel.Text, "context: ") || strings.HasPrefix(p.ctxLabel.Text, "context: 0 ") {
			t.Errorf("context indicator %q", p.ctxLabel.Text)
		}
	})
	if !streamed {
		t.Log("the reply arrived in one update (fast machine); streaming not observed mid-way")
	}
}

func TestStopAndRegenerate(t *testing.T) {
	p, _ := newPane(t, t.TempDir(), storiesEngine(t))
	// A prompt of more than two 16-token blocks, so that regenerating finds
	// full blocks in the prefix cache.
	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and her dog."
	var id int64
	uithread.Locked(func() {
		id = p.Selected()
		p.edit(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 0 }) // until the context is full: long enough to stop
		if err := p.SendText(id, prompt); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the first tokens", func() bool { return lastMessage(p).Tokens >= 3 })
	uithread.Locked(func() {
		if err := p.SendText(id, "again"); err == nil {
			t.Error("sending while generating was accepted")
		}
		p.Stop(id)
	})
	uithread.WaitFor(t, "the stop", func() bool { return !p.Running(id) && lastMessage(p).Finish != "" })
	var stopped store.Message
	uithread.Locked(func() {
		stopped = lastMessage(p)
		if stopped.Finish != "cancelled" || stopped.Text == "" {
			t.Errorf("stopped reply %+v: want its partial text and Finish cancelled", stopped)
		}
		if !strings.Contains(p.views[1].footer.Text, "stopped") {
			t.Errorf("footer %q does not say it stopped", p.views[1].footer.Text)
		}
		p.edit(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 12 })
		if err := p.Regenerate(id); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the regenerated reply", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		c := p.conv(id)
		if len(c.Messages) != 2 {
			t.Fatalf("%d messages after regenerate, want 2", len(c.Messages))
		}
		m := c.Messages[1]
		if m.Finish != "length" && m.Finish != "stop" || m.Text == "" {
			t.Errorf("regenerated reply %+v", m)
		}
		if m.Cached < 16 {
			t.Errorf("regenerate reused %d prompt tokens from the cache, want at least one 16-token block", m.Cached)
		}
		if err := p.Regenerate(id); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the second regeneration", func() bool { return lastMessage(p).Finish != "" })
}

func TestEditAndResend(t *testing.T) {
	p, _ := newPane(t, t.TempDir(), storiesEngine(t))
	var id int64
	uithread.Locked(func() {
		id = p.Selected()
		p.edit(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 5 })
		if err := p.SendText(id, "The cat sat"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "reply 1", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		if err := p.SendText(id, "The dog ran"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "reply 2", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		if n := len(p.conv(id).Messages); n != 4 {
			t.Fatalf("%d messages, want 4", n)
		}
		p.EditMessage(0)
		if p.composer.Text != "The cat sat" || p.editBar.Hidden {
			t.Fatalf("edit mode: composer %q, bar hidden %v", p.composer.Text, p.editBar.Hidden)
		}
		p.composer.SetText("The bird sang")
		p.Send()
	})
	uithread.WaitFor(t, "the edited reply", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		c := p.conv(id)
		if len(c.Messages) != 2 || c.Messages[0].Text != "The bird sang" {
			t.Errorf("after edit-and-resend: %+v, want the edited message and its reply only", c.Messages)
		}
	})
}

func TestSeveralConversationsGenerateAtOnce(t *testing.T) {
	p, _ := newPane(t, t.TempDir(), storiesEngine(t))
	var a, b int64
	uithread.Locked(func() {
		a = p.Selected()
		p.edit(a, func(c *store.Conversation) { c.Sampling.MaxTokens = 0 })
		if err := p.SendText(a, "Once upon a time"); err != nil {
			t.Fatal(err)
		}
		b = p.NewConversation()
		p.edit(b, func(c *store.Conversation) { c.Sampling.MaxTokens = 0 })
		if err := p.SendText(b, "Tom had a red ball"); err != nil {
			t.Fatal(err)
		}
	})
	both := false
	uithread.WaitFor(t, "both to stream", func() bool {
		ca, cb := p.conv(a), p.conv(b)
		both = p.Running(a) && p.Running(b) && ca.Messages[1].Tokens > 0 && cb.Messages[1].Tokens > 0
		return both || !p.Running(a) || !p.Running(b)
	})
	if !both {
		t.Error("one conversation ended before the other streamed: they did not run at once")
	}
	uithread.Locked(func() {
		p.Stop(a)
		p.Stop(b)
	})
	uithread.WaitFor(t, "both to stop", func() bool { return !p.Running(a) && !p.Running(b) })
}

func TestPersistenceRoundTripAndDraft(t *testing.T) {
	dir := t.TempDir()
	e := storiesEngine(t)
	p, _ := newPane(t, dir, e)
	var id int64
	uithread.Locked(func() {
		id = p.Selected()
		p.edit(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 0 })
		p.edit(id, func(c *store.Conversation) { c.System = "Stories for children." })
		if err := p.SendText(id, "Once upon a time"); err != nil {
			t.Fatal(err)
		}
	})
	// Mid-generation, read what is on disk, as a restarted app would after
	// a kill: the user's message is there, with the reply so far.
	uithread.WaitFor(t, "some tokens", func() bool { return lastMessage(p).Tokens > 2 })
	st, _ := store.Open(dir)
	var onDisk store.Conversations
	uithread.WaitFor(t, "the saver to write the reply so far", func() bool {
		var err error
		onDisk, err = st.LoadConversations()
		if err != nil {
			t.Fatal(err)
		}
		return len(onDisk.List) == 1 && len(onDisk.List[0].Messages) == 2 && onDisk.List[0].Messages[1].Text != ""
	})
	if len(onDisk.List) != 1 || len(onDisk.List[0].Messages) != 2 || onDisk.List[0].Messages[0].Text != "Once upon a time" {
		t.Fatalf("on disk mid-generation: %+v", onDisk.List)
	}
	if m := onDisk.List[0].Messages[1]; m.Finish != "interrupted" || m.Text == "" {
		t.Errorf("reply on disk mid-generation: %+v, want its text so far, marked interrupted", m)
	}
	uithread.Locked(func() {
		p.Stop(id)
		p.composer.SetText("a draft not sent")
	})
	uithread.WaitFor(t, "the stop", func() bool { return !p.Running(id) })
	uithread.Locked(p.Close)

	// A new pane from the same directory shows everything, draft included.
	p2, _ := newPane(t, dir, e)
	uithread.Locked(func() {
		c := p2.conv(p2.Selected())
		if c == nil || c.ID != id || c.System != "Stories for children." || len(c.Messages) != 2 || c.Draft != "a draft not sent" {
			t.Fatalf("restored %+v", c)
		}
		if p2.composer.Text != "a draft not sent" || len(p2.views) != 2 {
			t.Errorf("restored pane shows composer %q and %d messages", p2.composer.Text, len(p2.views))
		}
	})
}

func TestCorruptConversationsAreSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, store.ConversationsFile)
	os.WriteFile(path, []byte(`{"version": 1, "conversations": [{"id": 1, "title": "lost?`), 0o644)
	st, _ := store.Open(dir)
	data, err := st.LoadConversations()
	var ce *store.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a *store.CorruptError", err)
	}
	p, _ := newPane(t, dir, nil)
	uithread.Locked(func() {
		if len(data.List) != 0 || len(p.Conversations().List) != 1 {
			t.Errorf("a corrupt file gave %d conversations; the pane has %d, want one new", len(data.List), len(p.Conversations().List))
		}
		if err := p.SendText(p.Selected(), "hello"); err == nil || !strings.Contains(err.Error(), "no model") {
			t.Errorf("sending without a model: %v", err)
		}
		p.saveNow()
	})
	if b, _ := os.ReadFile(ce.Aside); !strings.Contains(string(b), "lost?") {
		t.Errorf("the set-aside file lost its contents: %q", b)
	}
}

func TestPrompt(t *testing.T) {
	c := store.Conversation{System: " Be kind. ", Messages: []store.Message{
		{Role: "user", Text: "Once upon a time"}, {Role: "assistant", Text: " there was a cat."},
		{Role: "user", Text: "The end?"}, {Role: "assistant", Text: ""},
	}}
	tests := []struct {
		upTo int
		want string
	}{
		{0, "Be kind.\n\n"},
		{1, "Be kind.\n\nOnce upon a time"},
		{3, "Be kind.\n\nOnce upon a time there was a cat.\nThe end?"},
		{99, "Be kind.\n\nOnce upon a time there was a cat.\nThe end?"},
	}
	for _, tc := range tests {
		if got := Prompt(c, tc.upTo); got != tc.want {
			t.Errorf("Prompt(upTo %d) = %q, want %q", tc.upTo, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"":                 "New chat",
		"  Hello   world ": "Hello world",
		"one two three four five six seven eight nine ten eleven": "one two three four five six seven eight…",
	} {
		if got := Title(in); got != want {
			t.Errorf("Title(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFooter(t *testing.T) {
	tests := []struct {
		m    store.Message
		want string
	}{
		{store.Message{Tokens: 42, TPS: 35.14, Finish: "stop", Prompt: 60, Cached: 48}, "42 tokens · 35.1 tok/s · finished · cached 48 of 60 prompt tokens"},
		{store.Message{Tokens: 3}, "3 tokens · generating"},
		{store.Message{Finish: "error", Error: "boom"}, "0 tokens · error: boom"},
		{store.Message{Tokens: 9, Finish: "interrupted"}, "9 tokens · interrupted when kvscope closed"},
	}
	for _, tc := range tests {
		if got := Footer(tc.m); got != tc.want {
			t.Errorf("Footer(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestSegments(t *testing.T) {
	tests := []struct {
		text string
		max  int
		want []string
	}{
		{"", 10, []string{""}},
		{"short", 10, []string{"short"}},
		{"one two three four", 10, []string{"one two", " three", " four"}},
		{"para one\npara two", 100, []string{"para one", "para two"}},
		{"abcdefghijklmnop", 5, []string{"abcde", "fghij", "klmno", "p"}},
		{"ééééé", 5, []string{"éé", "éé", "é"}}, // never splits a character
	}
	for _, tc := range tests {
		got := Segments(tc.text, tc.max)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("Segments(%q, %d) = %q, want %q", tc.text, tc.max, got, tc.want)
		}
	}
}
