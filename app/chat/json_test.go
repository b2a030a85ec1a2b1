package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

func TestReplyAsJSON(t *testing.T) {
	p, _ := newPane(t, t.TempDir(), storiesEngine(t))
	uithread.Locked(func() {
		p.edit(p.Selected(), func(c *store.Conversation) { c.Sampling.MaxTokens = 120; c.Sampling.Temperature = 0 })
		p.settings.show(p.conv(p.Selected()))
		test.Tap(p.settings.asJSON)
		p.settings.schema.SetText(`{"type":"object","properties":{"name":{"type":"string","maxLength":8},"sad":{"type":"boolean"}},"required":["name","sad"]}`)
		test.Type(p.composer, "Once upon a time")
		test.Tap(p.sendBtn)
	})
	uithread.WaitFor(t, "the reply to finish", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		c := p.conv(p.Selected())
		if !c.JSON || !strings.Contains(c.JSONSchema, `"sad"`) {
			t.Fatalf("the settings did not reach the conversation: json %v, schema %q", c.JSON, c.JSONSchema)
		}
		m := lastMessage(p)
		var v struct {
			Name *string `json:"name"`
			Sad  *bool   `json:"sad"`
		}
		if err := json.Unmarshal([]byte(m.Text), &v); err != nil || v.Name == nil || v.Sad == nil || m.Finish != "stop" {
			t.Errorf("reply %q (%s) does not follow the schema: %v", m.Text, m.Finish, err)
		}
	})

	// A schema that cannot constrain a reply says why, is kept as typed,
	// and the reply is refused with the reason.
	bad := `{"type":"integer","minimum":1}`
	uithread.Locked(func() {
		p.settings.schema.SetText(bad)
		if !p.settings.badJSON.Visible() || !strings.Contains(p.settings.badJSON.Text, "minimum") {
			t.Errorf("schema problem label %q (shown %v), want it to name minimum", p.settings.badJSON.Text, p.settings.badJSON.Visible())
		}
		// A number field's problem, and its mending, leave the schema's shown.
		p.settings.topK.SetText("x")
		p.settings.topK.SetText("40")
		if !p.settings.badJSON.Visible() || p.settings.problem.Visible() {
			t.Errorf("after a number field was mended: schema problem shown %v, number problem shown %v; want true, false", p.settings.badJSON.Visible(), p.settings.problem.Visible())
		}
		test.Type(p.composer, "And then")
		test.Tap(p.sendBtn)
	})
	uithread.WaitFor(t, "the refused reply to end", func() bool { return lastMessage(p).Finish != "" })
	uithread.Locked(func() {
		if c := p.conv(p.Selected()); c.JSONSchema != bad {
			t.Errorf("schema text %q, want it kept as typed", c.JSONSchema)
		}
		if m := lastMessage(p); !strings.Contains(m.Error+m.Text, "minimum") {
			t.Errorf("refused reply %+v does not name the cause", m)
		}
	})
}
