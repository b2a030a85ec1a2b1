package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"kvscope/engine"
)

func TestChatCompletion(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	status, r := post(t, ts.URL+"/v1/chat/completions", map[string]any{
		"model": "whatever", "messages": []map[string]any{{"role": "user", "content": "Once upon a time"}},
		"max_tokens": 12, "temperature": 0, "unknown_field": []int{1, 2},
	})
	if status != 200 {
		t.Fatalf("status %d: %v", status, r)
	}
	if r["object"] != "chat.completion" || !strings.HasPrefix(r["id"].(string), "chatcmpl-") {
		t.Errorf("reply %v", r)
	}
	choices := r["choices"].([]any)
	if len(choices) != 1 {
		t.Fatalf("%d choices", len(choices))
	}
	c := choices[0].(map[string]any)
	msg := c["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"].(string) == "" {
		t.Errorf("message %v", msg)
	}
	if c["finish_reason"] != "length" && c["finish_reason"] != "stop" {
		t.Errorf("finish_reason %v", c["finish_reason"])
	}
	u := r["usage"].(map[string]any)
	if u["completion_tokens"].(float64) < 1 || u["completion_tokens"].(float64) > 12 || u["prompt_tokens"].(float64) < 2 {
		t.Errorf("usage %v", u)
	}
	if u["total_tokens"].(float64) != u["prompt_tokens"].(float64)+u["completion_tokens"].(float64) {
		t.Errorf("usage %v", u)
	}
	if _, ok := u["prompt_tokens_details"].(map[string]any)["cached_tokens"]; !ok {
		t.Errorf("usage %v has no cached_tokens", u)
	}
}

// TestCompletionGreedyIsDeterministic: two greedy requests give the same
// text, the second with its prompt's blocks served from the prefix cache.
func TestCompletionCachedTokens(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	req := map[string]any{"prompt": strings.Repeat("Once upon a time there was a little girl. ", 4), "max_tokens": 8, "temperature": 0}
	_, a := post(t, ts.URL+"/v1/completions", req)
	_, b := post(t, ts.URL+"/v1/completions", req)
	ta := a["choices"].([]any)[0].(map[string]any)["text"]
	tb := b["choices"].([]any)[0].(map[string]any)["text"]
	if ta != tb || ta == "" {
		t.Errorf("greedy texts differ or are empty: %q, %q", ta, tb)
	}
	cached := func(r map[string]any) float64 {
		return r["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	if cached(a) != 0 || cached(b) < 16 {
		t.Errorf("cached tokens %v then %v, want 0 then at least a block", cached(a), cached(b))
	}
}

func TestCompletionN(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Once upon a time", "n": 3, "max_tokens": 10, "seed": 7, "stop": "\n\n", "top_k": 20, "top_p": 0.9, "min_p": 0.01, "presence_penalty": 0.5, "frequency_penalty": 0.2})
	if status != 200 {
		t.Fatalf("status %d: %v", status, r)
	}
	choices := r["choices"].([]any)
	if len(choices) != 3 {
		t.Fatalf("%d choices, want 3", len(choices))
	}
	for i, c := range choices {
		c := c.(map[string]any)
		if int(c["index"].(float64)) != i || c["text"] == nil {
			t.Errorf("choice %d: %v", i, c)
		}
	}
	if r["object"] != "text_completion" {
		t.Errorf("object %v", r["object"])
	}
}

func TestStreamIncludeUsage(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	for _, chat := range []bool{true, false} {
		body := map[string]any{"max_tokens": 10, "stream": true, "stream_options": map[string]any{"include_usage": true}, "n": 2}
		url := ts.URL + "/v1/completions"
		if chat {
			url = ts.URL + "/v1/chat/completions"
			body["messages"] = []map[string]any{{"role": "system", "content": "Be kind."}, {"role": "user", "content": []map[string]any{{"type": "text", "text": "Hello"}}}}
		} else {
			body["prompt"] = "Once upon a time"
		}
		b, _ := json.Marshal(body)
		resp, err := http.Post(url, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
		}
		evs := sseEvents(t, resp.Body)
		resp.Body.Close()
		if chat && !strings.Contains(evs[0], `"delta":{"content":"","role":"assistant"}`) {
			t.Errorf("the first chat chunk %s does not give the role", evs[0])
		}
		if len(evs) < 3 || evs[len(evs)-1] != "[DONE]" {
			t.Fatalf("chat %v: events %q", chat, evs)
		}
		var last map[string]any
		json.Unmarshal([]byte(evs[len(evs)-2]), &last)
		if ch, ok := last["choices"].([]any); !ok || len(ch) != 0 || last["usage"] == nil {
			t.Errorf("chat %v: the last chunk is %v, want choices [] and usage", chat, last)
		}
		finished := map[int]string{}
		text := 0
		for _, ev := range evs[:len(evs)-2] {
			var c map[string]any
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("chunk %q: %v", ev, err)
			}
			ch := c["choices"].([]any)[0].(map[string]any)
			if fr, ok := ch["finish_reason"].(string); ok {
				finished[int(ch["index"].(float64))] = fr
			}
			if chat {
				if s, _ := ch["delta"].(map[string]any)["content"].(string); s != "" {
					text++
				}
			} else if s, _ := ch["text"].(string); s != "" {
				text++
			}
		}
		if len(finished) != 2 || text == 0 {
			t.Errorf("chat %v: finish reasons %v, %d text chunks", chat, finished, text)
		}
	}
}

// TestBadRequests: every malformed or excessive request gets a 4xx with
// OpenAI's error shape, naming the field where one is at fault.
func TestBadRequests(t *testing.T) {
	ts, _ := newTestServer(t, func(_ *engine.Config, c *Config) { c.Limits.MaxBodyBytes = 4096 })
	long := strings.Repeat("Once upon a time there was a girl. ", 80)
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	for _, c := range []struct {
		path string
		body any
		want string
	}{
		{"/v1/completions", `{"prompt": "Hi",`, "not valid JSON"},
		{"/v1/completions", `[1, 2]`, "must be a JSON object"},
		{"/v1/completions", ``, "empty"},
		{"/v1/completions", `null`, "JSON object"},
		{"/v1/completions", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, "larger than the limit of 4096 bytes"},
		{"/v1/completions", map[string]any{}, "prompt is required"},
		{"/v1/completions", map[string]any{"prompt": 5}, "prompt must be"},
		{"/v1/completions", map[string]any{"prompt": []int{1, 99999}}, "outside the vocabulary"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": "ten"}, "max_tokens must be an integer"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 1.5}, "max_tokens must be an integer"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 1e12}, "max_tokens is 1000000000000; this server allows at most 512"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 0}, "at least 1"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "n": 100000}, "n is 100000; it must be from 1 to 16"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "n": "3"}, "n must be an integer"},
		{"/v1/completions", map[string]any{"prompt": []string{"a", "b", "c", "d", "e"}, "n": 16}, "make 80 choices; at most 64"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "temperature": 5}, "temperature is 5"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "temperature": "hot"}, "temperature must be a number"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "top_p": 0}, "top_p is 0"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "top_k": -5}, "top_k is -5"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "seed": "x"}, "seed must be an integer"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "stop": 3}, "stop must be a string or an array of strings"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "stop": ""}, "stop string"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "stream": "yes"}, "stream must be a boolean"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "stream_options": map[string]any{"include_usage": true}}, "only be given with stream"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "stream": true, "stream_options": map[string]any{"include_usage": 1}}, "include_usage must be a boolean"},
		{"/v1/completions", map[string]any{"prompt": long}, "maximum context length is 512 tokens. However, your request has"},
		{"/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 510}, "maximum context length is 512 tokens. However, you requested"},
		{"/v1/chat/completions", map[string]any{"messages": "Hi"}, "messages must be an array"},
		{"/v1/chat/completions", map[string]any{}, "messages is required"},
		{"/v1/chat/completions", map[string]any{"messages": []any{}}, "messages is empty"},
		{"/v1/chat/completions", map[string]any{"messages": []any{5}}, "messages[0] must be an object"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"content": "x"}}}, "messages[0].role"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": 7}}}, "messages[0].content"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "max_completion_tokens": -1}, "max_completion_tokens is -1"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "model": 3}, "model must be a string"},
	} {
		status, r := post(t, ts.URL+c.path, c.body)
		t.Run(fmt.Sprintf("%.40v", c.body), func(t *testing.T) { checkError(t, status, r, c.want) })
	}
	// The field at fault is named in param.
	_, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": "x"})
	if p := r["error"].(map[string]any)["param"]; p != "max_tokens" {
		t.Errorf("param %v, want max_tokens", p)
	}
	// Unknown endpoints and methods.
	resp, err := http.Get(ts.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /v1/nothing: %d", resp.StatusCode)
	}
	// The server still answers.
	if status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2}); status != 200 {
		t.Errorf("after the bad requests: %d %v", status, r)
	}
}

func TestModelsAndHealth(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	for _, p := range []string{"/health", "/v1/models", "/v1/models/stories260K"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Errorf("GET %s: %d %v", p, resp.StatusCode, err)
		}
		if p == "/v1/models" && r["data"].([]any)[0].(map[string]any)["id"] != "stories260K" {
			t.Errorf("models %v", r)
		}
	}
	resp, _ := http.Get(ts.URL + "/v1/models/other")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown model: %d", resp.StatusCode)
	}
}

// TestCompletionFields: several prompts give n choices each, in order; a
// seed repeats its text; a stop string ends the text before it.
func TestCompletionFields(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": []string{"Once upon a time", "Lily had a dog"}, "n": 2, "max_tokens": 6, "seed": 3})
	if status != 200 || len(r["choices"].([]any)) != 4 {
		t.Fatalf("%d %v", status, r)
	}
	for i, c := range r["choices"].([]any) {
		if int(c.(map[string]any)["index"].(float64)) != i {
			t.Errorf("choice %d has index %v", i, c.(map[string]any)["index"])
		}
	}
	text := func(r map[string]any) string { return r["choices"].([]any)[0].(map[string]any)["text"].(string) }
	req := map[string]any{"prompt": "Once upon a time", "max_tokens": 20, "seed": 42, "temperature": 1}
	_, a := post(t, ts.URL+"/v1/completions", req)
	_, b := post(t, ts.URL+"/v1/completions", req)
	if text(a) != text(b) {
		t.Errorf("seed 42 gave %q, then %q", text(a), text(b))
	}
	// Stop at the first space of the greedy text.
	_, g := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0})
	full := text(g)
	i := strings.Index(strings.TrimLeft(full, " "), " ")
	if i < 0 {
		t.Fatalf("greedy text %q has no space", full)
	}
	word := strings.TrimLeft(full, " ")[i+1:]
	word = strings.Fields(word)[0]
	_, st := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": []string{word}})
	c := st["choices"].([]any)[0].(map[string]any)
	if got := c["text"].(string); strings.Contains(got, word) || !strings.HasPrefix(full, got) || c["finish_reason"] != "stop" {
		t.Errorf("stop %q: text %q (%v), full %q", word, got, c["finish_reason"], full)
	}
}
