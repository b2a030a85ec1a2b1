package server

import (
	"testing"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/internal/chattest"
)

// TestChatContinuesTheConversation: clients send the whole conversation
// back as text each turn; on Llama 2's [INST] template (which strips each
// reply and puts a space before it) the server holds each reply it
// generated as its ids, so turns 2 and 3 find the whole history in the
// cache, within one block. A reply the client changed is tokenized as
// text.
func TestChatContinuesTheConversation(t *testing.T) {
	form, err := chat.NewTemplate("Llama 2", chattest.Llama2, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	const block = 8
	ts, _ := newTestServer(t, func(ec *engine.Config, c *Config) {
		c.Format = form
		ec.Cache.BlockSize = block
	})
	var msgs []map[string]any
	history := 0   // the last prompt's tokens and its reply's
	var format any // a response_format, for the JSON turns
	turn := func(user string) (cached, prompt int, content string) {
		t.Helper()
		msgs = append(msgs, map[string]any{"role": "user", "content": user})
		body := map[string]any{"messages": msgs, "max_tokens": 16, "temperature": 0}
		if format != nil {
			body["response_format"], body["max_tokens"] = format, 40
		}
		status, r := post(t, ts.URL+"/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("status %d: %v", status, r)
		}
		u := r["usage"].(map[string]any)
		prompt = int(u["prompt_tokens"].(float64))
		cached = int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
		content = r["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": content})
		history = prompt + int(u["completion_tokens"].(float64))
		return cached, prompt, content
	}
	turn("Once upon a time")
	for k, u := range []string{"The dog ran", "A cat sat"} {
		before := history
		cached, prompt, _ := turn(u)
		t.Logf("turn %d: cached %d of %d; history %d", k+2, cached, prompt, before)
		if cached < before-block {
			t.Errorf("turn %d: cached %d of %d prompt tokens; the history before it is %d: want it within a block of %d", k+2, cached, prompt, before, block)
		}
	}
	// JSON replies end on their grammar's end, not on an end token: they
	// are remembered too.
	format = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": map[string]any{
		"type": "object", "properties": map[string]any{"happy": map[string]any{"type": "boolean"}}, "required": []any{"happy"}, "additionalProperties": false}}}
	turn("Are you happy?")
	for k, u := range []string{"And now?", "And then?"} {
		before := history
		cached, prompt, content := turn(u)
		t.Logf("JSON turn %d: cached %d of %d; history %d; reply %q", k+2, cached, prompt, before, content)
		if cached < before-block {
			t.Errorf("JSON turn %d: cached %d of %d prompt tokens; the history before it is %d: want it within a block of %d", k+2, cached, prompt, before, block)
		}
	}
	format = nil
	// The client edits the last reply: its ids no longer stand for it, so
	// the cache stops before it.
	before := history
	msgs[len(msgs)-1]["content"] = "Something else entirely."
	cached, prompt, _ := turn("The end")
	if cached >= before-block {
		t.Errorf("after an edited reply: cached %d of %d, want less than the %d-token history", cached, prompt, before)
	}
}
