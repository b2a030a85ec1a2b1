package chat

import (
	"slices"
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

// Three turns through a ChatML template: the conversation names its
// template, the prompt has the template's control tokens while a typed
// "<|im_end|>" stays text, turns 2 and 3 start with exactly the ids of the
// turn before (its prompt and its reply's generated ids) and find them in
// the prefix cache, to within one block. Then regenerate and
// edit-and-resend reuse the cache too, and switching the conversation to
// plain completion changes its prompt.
func TestChatMLConversationReusesEachTurn(t *testing.T) {
	cm := newChatMLModel(t, chatMLTemplate)
	e := cm.engine(t)
	block := e.Config().Cache.BlockSize
	p, _ := newPane(t, t.TempDir(), e)
	const typed = "Hello <|im_end|> there"
	var id int64
	uithread.Locked(func() {
		id = p.Selected()
		p.Update(id, func(c *store.Conversation) {
			c.Sampling.MaxTokens, c.Sampling.Temperature, c.Sampling.Seed = 24, 0, 1
		})
		if got, want := templateText(p), "Template: from the file (ChatML)"; got != want {
			t.Errorf("the conversation says %q, want %q", got, want)
		}
	})
	// send sends text and waits for its reply; it returns the conversation
	// and the ids of the prompt the reply was generated from.
	send := func(text string) (store.Conversation, []int) {
		t.Helper()
		uithread.Locked(func() {
			if err := p.SendText(id, text); err != nil {
				t.Fatal(err)
			}
		})
		uithread.WaitFor(t, "the reply to "+text, func() bool { return !p.Running(id) })
		var c store.Conversation
		uithread.Locked(func() { c = cloneConv(*p.conv(id)) })
		m := c.Messages[len(c.Messages)-1]
		if m.Finish != "length" && m.Finish != "stop" {
			t.Fatalf("reply %+v did not end normally", m)
		}
		if len(m.IDs) != m.Tokens || m.Vocab != p.prompter.Vocab() {
			t.Errorf("reply kept %d ids (vocabulary %q) of %d tokens", len(m.IDs), m.Vocab, m.Tokens)
		}
		ids, err := p.prompter.IDs(c, len(c.Messages)-1)
		if err != nil {
			t.Fatal(err)
		}
		if m.Prompt != len(ids) {
			t.Errorf("the reply's prompt was %d tokens, the conversation's %d", m.Prompt, len(ids))
		}
		return c, ids
	}

	c1, ids1 := send(typed)
	want1 := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + typed + "<|im_end|>\n<|im_start|>assistant\n"
	if got := pieces(cm.tok, ids1); got != want1 {
		t.Errorf("turn 1's prompt %q, want %q", got, want1)
	}
	if n := occurrences(ids1, cm.imEnd); n != 2 {
		t.Errorf("turn 1's prompt has %d <|im_end|> tokens, want the template's 2 (the typed one is text)", n)
	}
	if n := occurrences(ids1, cm.imStart); n != 3 {
		t.Errorf("turn 1's prompt has %d <|im_start|> tokens, want 3", n)
	}

	// reused checks that turn n's prompt starts with turn n-1's prompt and
	// reply ids, and that the cache served them, to within one block.
	reused := func(n int, prev store.Conversation, prevIDs []int, c store.Conversation, ids []int) {
		t.Helper()
		reply := prev.Messages[len(prev.Messages)-1]
		head := append(slices.Clone(prevIDs), reply.IDs...)
		if len(ids) <= len(head) || !slices.Equal(ids[:len(head)], head) {
			t.Errorf("turn %d's prompt does not start with turn %d's prompt and reply ids:\n%v\n%v", n, n-1, ids, head)
		}
		m := c.Messages[len(c.Messages)-1]
		t.Logf("turn %d: cached %d of %d prompt tokens; turn %d's prompt and reply: %d", n, m.Cached, m.Prompt, n-1, len(head))
		if m.Cached < len(head)-block || m.Cached > m.Prompt {
			t.Errorf("turn %d: %d of %d prompt tokens from the cache, want at least %d (turn %d's %d prompt and reply tokens, less one block of %d)",
				n, m.Cached, m.Prompt, len(head)-block, n-1, len(head), block)
		}
		if !strings.Contains(Footer(m), "cached ") {
			t.Errorf("footer %q does not say what was cached", Footer(m))
		}
	}
	c2, ids2 := send("Tell me more.")
	reused(2, c1, ids1, c2, ids2)
	c3, ids3 := send("And then?")
	reused(3, c2, ids2, c3, ids3)
	if got := pieces(cm.tok, ids3); !strings.HasPrefix(got, want1) || !strings.HasSuffix(got, "<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n") ||
		occurrences(ids3, cm.imStart) != 7 {
		t.Errorf("turn 3's prompt %q", got)
	}

	// Regenerate: the same prompt, served from the cache but its last token.
	uithread.Locked(func() {
		if err := p.Regenerate(id); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the regenerated reply", func() bool { return !p.Running(id) })
	uithread.Locked(func() {
		m := lastMessage(p)
		if m.Prompt != len(ids3) || m.Cached < len(ids3)-block {
			t.Errorf("regenerated: %d of %d prompt tokens cached, want the same %d-token prompt, at least %d cached", m.Cached, m.Prompt, len(ids3), len(ids3)-block)
		}
		// Edit-and-resend turn 2: turn 1 is reused.
		p.EditMessage(2)
		p.composer.SetText("Something else.")
		p.Send()
	})
	uithread.WaitFor(t, "the edited reply", func() bool { return !p.Running(id) })
	var edited store.Conversation
	uithread.Locked(func() { edited = cloneConv(*p.conv(id)) })
	if len(edited.Messages) != 4 || edited.Messages[2].Text != "Something else." {
		t.Fatalf("after edit-and-resend: %+v", edited.Messages)
	}
	editedIDs, err := p.prompter.IDs(edited, 3)
	if err != nil {
		t.Fatal(err)
	}
	reused(2, c1, ids1, edited, editedIDs)

	// Plain completion for this conversation: the prompt is its text, with
	// no template tokens, and the conversation says so.
	uithread.Locked(func() {
		p.mode.plain.SetChecked(true)
		if c := p.conv(id); !c.Plain {
			t.Error("checking Plain completion did not change the conversation")
		}
		if got := templateText(p); !strings.HasPrefix(got, "Plain completion") {
			t.Errorf("plain conversation says %q", got)
		}
		if err := p.Regenerate(id); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the plain reply", func() bool { return !p.Running(id) })
	uithread.Locked(func() {
		c := cloneConv(*p.conv(id))
		ids, err := p.prompter.IDs(c, 3)
		if err != nil {
			t.Fatal(err)
		}
		if occurrences(ids, cm.imStart) != 0 || pieces(cm.tok, ids) != Prompt(c, 3) {
			t.Errorf("plain completion prompt %q, want Prompt's text %q", pieces(cm.tok, ids), Prompt(c, 3))
		}
		if m := c.Messages[3]; m.Prompt != len(ids) || m.Prompt == len(editedIDs) {
			t.Errorf("the plain reply's prompt was %d tokens, want %d (the template's was %d)", m.Prompt, len(ids), len(editedIDs))
		}
	})
}

// The conversation's choices: the thinking switch shows for a template
// that reads enable_thinking, turning it off reaches the prompt, and both
// choices are saved; a model without a template offers neither.
func TestModeBarChoices(t *testing.T) {
	cm := newChatMLModel(t, thinkingTemplate)
	dir := t.TempDir()
	p, _ := newPane(t, dir, cm.engine(t))
	var id int64
	uithread.Locked(func() {
		id = p.Selected()
		p.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 2 })
		if p.mode.think.Hidden || p.mode.plain.Hidden || !p.mode.think.Checked || p.mode.plain.Checked {
			t.Fatalf("thinking shown %v checked %v, plain shown %v checked %v: want both shown, thinking on",
				!p.mode.think.Hidden, p.mode.think.Checked, !p.mode.plain.Hidden, p.mode.plain.Checked)
		}
		test.Tap(p.mode.think)
		if c := p.conv(id); c.Thinking == nil || *c.Thinking {
			t.Fatalf("switching thinking off left Thinking %v", c.Thinking)
		}
		if err := p.SendText(id, "Hi"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the reply", func() bool { return !p.Running(id) })
	uithread.Locked(func() {
		c := cloneConv(*p.conv(id))
		ids, err := p.prompter.IDs(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := pieces(cm.tok, ids); !strings.HasSuffix(got, "<think>\n\n</think>\n\n") || c.Messages[1].Prompt != len(ids) {
			t.Errorf("prompt %q (%d tokens; the reply's was %d): want thinking off", got, len(ids), c.Messages[1].Prompt)
		}
		test.Tap(p.mode.plain)
		if p.mode.think.Visible() {
			t.Error("the thinking switch shows in plain completion")
		}
		p.saveNow()
	})
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := st.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range data.List {
		if c.ID == id && (!c.Plain || c.Thinking == nil || *c.Thinking) {
			t.Errorf("saved: plain %v, thinking %v; want plain, thinking off", c.Plain, c.Thinking)
		}
	}

	sp, _ := newPane(t, t.TempDir(), storiesEngine(t))
	uithread.Locked(func() {
		if sp.mode.plain.Visible() || sp.mode.think.Visible() || templateText(sp) != "Plain completion: the model has no chat template" {
			t.Errorf("stories260K: plain shown %v, thinking shown %v, says %q", sp.mode.plain.Visible(), sp.mode.think.Visible(), templateText(sp))
		}
	})
}
