package server

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/internal/testshared"
)

// schemaValidator compiles schema (a Go value) with the jsonschema library.
func schemaValidator(t *testing.T, schema any) *jsonschema.Schema {
	t.Helper()
	b, _ := json.Marshal(schema)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func validates(t *testing.T, sch *jsonschema.Schema, text string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%q is not JSON: %v", text, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%q does not validate: %v", text, err)
	}
}

var personSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"name": map[string]any{"type": "string", "maxLength": 12},
		"mood": map[string]any{"enum": []any{"happy", "sad"}},
		"age":  map[string]any{"type": "integer"},
	},
	"required": []any{"name", "mood", "age"},
}

var weatherTool = map[string]any{"type": "function", "function": map[string]any{
	"name": "get_weather", "description": "The weather in a city",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"enum": []any{"Paris", "Rome", "Oslo"}},
		"days": map[string]any{"type": "integer"},
	}, "required": []any{"city", "days"}},
}}

func TestStructuredOutput(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	chatURL, textURL := ts.URL+"/v1/chat/completions", ts.URL+"/v1/completions"
	msgs := []any{map[string]any{"role": "user", "content": "Tell me about a girl."}}
	person := schemaValidator(t, personSchema)
	cases := []struct {
		name  string
		url   string
		body  map[string]any
		check func(t *testing.T, text string)
	}{
		{"json_schema", chatURL, map[string]any{"messages": msgs, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "person", "strict": true, "schema": personSchema}}},
			func(t *testing.T, text string) { validates(t, person, text) }},
		{"guided_json", textURL, map[string]any{"prompt": "Once upon a time", "guided_json": personSchema},
			func(t *testing.T, text string) { validates(t, person, text) }},
		{"guided_json as a string", chatURL, map[string]any{"messages": msgs, "guided_json": `{"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":2}`},
			func(t *testing.T, text string) {
				var v []bool
				if json.Unmarshal([]byte(text), &v) != nil || len(v) != 2 {
					t.Errorf("%q is not two booleans", text)
				}
			}},
		{"guided_choice", chatURL, map[string]any{"messages": msgs, "guided_choice": []any{"red", "green", "a blue bird"}},
			func(t *testing.T, text string) {
				if text != "red" && text != "green" && text != "a blue bird" {
					t.Errorf("%q is none of the choices", text)
				}
			}},
		{"guided_regex", textURL, map[string]any{"prompt": "Once", "guided_regex": `[A-Z][a-z]{1,7}( [a-z]{1,7}){1,3}\.`},
			func(t *testing.T, text string) {
				words := strings.Fields(strings.TrimSuffix(text, "."))
				if !strings.HasSuffix(text, ".") || len(words) < 2 || len(words) > 4 {
					t.Errorf("%q does not match the pattern", text)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.body["max_tokens"], c.body["temperature"] = 120, 0
			status, reply := post(t, c.url, c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, reply)
			}
			ch := reply["choices"].([]any)[0].(map[string]any)
			if ch["finish_reason"] != "stop" {
				t.Fatalf("finish_reason %v: %v", ch["finish_reason"], ch)
			}
			text, _ := ch["text"].(string)
			if m, ok := ch["message"].(map[string]any); ok {
				text, _ = m["content"].(string)
			}
			c.check(t, text)
		})
	}
}

func TestToolCalls(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	url := ts.URL + "/v1/chat/completions"
	msgs := []any{map[string]any{"role": "user", "content": "What is the weather?"}}
	args := schemaValidator(t, weatherTool["function"].(map[string]any)["parameters"])
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		status, reply := post(t, url, map[string]any{"messages": msgs, "tools": []any{weatherTool}, "tool_choice": choice, "parallel_tool_calls": false, "max_tokens": 150, "temperature": 0})
		if status != http.StatusOK {
			t.Fatalf("status %d: %v", status, reply)
		}
		if reply["tool_format"] != "generic" {
			t.Errorf("tool_format %v, want generic (stories260K has no chat template)", reply["tool_format"])
		}
		ch := reply["choices"].([]any)[0].(map[string]any)
		if ch["finish_reason"] != "tool_calls" {
			t.Fatalf("finish_reason %v: %v", ch["finish_reason"], ch)
		}
		calls := ch["message"].(map[string]any)["tool_calls"].([]any)
		fn := calls[0].(map[string]any)["function"].(map[string]any)
		if fn["name"] != "get_weather" {
			t.Errorf("called %v", fn["name"])
		}
		validates(t, args, fn["arguments"].(string))
	}

	// Streamed: the call's id and name first, then its arguments in
	// pieces, then finish_reason tool_calls.
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Weather?"}}, "max_tokens": 150, "temperature": 0,
		"tool_choice": "required", "parallel_tool_calls": false, "tools": []any{weatherTool}}
	calls, finish, format := streamToolCalls(t, url, body)
	if format != "generic" {
		t.Errorf("X-Kvscope-Tool-Format %q, want generic", format)
	}
	if len(calls) != 1 || finish != "tool_calls" {
		t.Fatalf("streamed: calls %v, finish %q; want one call and tool_calls", calls, finish)
	}
	validates(t, args, calls[0].Arguments)
}

// streamedCall is a tool call assembled from a stream's deltas as the
// openai client does: id, type and name from the first, arguments joined.
type streamedCall struct {
	ID, Type, Name, Arguments string
	deltas                    int
}

// streamToolCalls posts body with stream on and assembles the tool calls of
// choice 0 by their index; it returns them, the finish reason and the
// X-Kvscope-Tool-Format header, and fails on a delta out of order.
func streamToolCalls(t *testing.T, url string, body map[string]any) ([]streamedCall, string, string) {
	t.Helper()
	body["stream"] = true
	resp, err := http.Post(url, "application/json", strings.NewReader(mustJSON(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls []streamedCall
	finish := ""
	for _, ev := range sseEvents(t, resp.Body) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    *int   `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string  `json:"name"`
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			for _, d := range ch.Delta.ToolCalls {
				switch {
				case d.Index == nil || d.Function.Arguments == nil:
					t.Fatalf("a tool call delta without index or arguments: %s", ev)
				case *d.Index == len(calls):
					if d.ID == "" || d.Type != "function" || d.Function.Name == "" || *d.Function.Arguments != "" {
						t.Fatalf("call %d's first delta: want id, type, name and empty arguments: %s", *d.Index, ev)
					}
					calls = append(calls, streamedCall{ID: d.ID, Type: d.Type, Name: d.Function.Name})
				case *d.Index < len(calls):
					if d.ID != "" || d.Function.Name != "" {
						t.Fatalf("call %d's later delta repeats its id or name: %s", *d.Index, ev)
					}
					calls[*d.Index].Arguments += *d.Function.Arguments
					calls[*d.Index].deltas++
				default:
					t.Fatalf("delta for call %d before call %d: %s", *d.Index, len(calls), ev)
				}
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return calls, finish, resp.Header.Get("X-Kvscope-Tool-Format")
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestStructuredRefused(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	chatURL, textURL := ts.URL+"/v1/chat/completions", ts.URL+"/v1/completions"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, url, body, want string
	}{
		{"logprobs", chatURL, `{` + msgs + `,"logprobs":true}`, "logprobs"},
		{"top_logprobs", chatURL, `{` + msgs + `,"top_logprobs":2}`, "logprobs"},
		{"completions logprobs", textURL, `{"prompt":"a","logprobs":3}`, "logprobs"},
		{"logit_bias", chatURL, `{` + msgs + `,"logit_bias":{"5":10}}`, "logit_bias"},
		{"echo", textURL, `{"prompt":"a","echo":true}`, "echo"},
		{"best_of", textURL, `{"prompt":"a","best_of":3}`, "best_of"},
		{"suffix", textURL, `{"prompt":"a","suffix":"z"}`, "suffix"},
		{"functions", chatURL, `{` + msgs + `,"functions":[{"name":"f"}]}`, "functions"},
		{"guided_grammar", chatURL, `{` + msgs + `,"guided_grammar":"root ::= \"a\""}`, "guided_grammar"},
		{"audio modality", chatURL, `{` + msgs + `,"modalities":["text","audio"]}`, "modalities"},
		{"bad format type", chatURL, `{` + msgs + `,"response_format":{"type":"xml"}}`, "response_format.type"},
		{"json_schema without schema", chatURL, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, "json_schema.schema"},
		{"unsupported keyword", chatURL, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","minimum":1}}}}`, "minimum"},
		{"invalid schema", chatURL, `{` + msgs + `,"guided_json":{"type":"nonsense"}}`, "guided_json"},
		{"two formats", chatURL, `{` + msgs + `,"guided_choice":["a"],"guided_regex":"a"}`, "cannot be given together"},
		{"bad regex", textURL, `{"prompt":"a","guided_regex":"a("}`, "guided_regex"},
		{"empty choice", textURL, `{"prompt":"a","guided_choice":[]}`, "guided_choice"},
		{"tools on completions", textURL, `{"prompt":"a","tools":[]}`, "chat/completions"},
		{"tool without name", chatURL, `{` + msgs + `,"tools":[{"type":"function","function":{}}]}`, "tools[0]"},
		{"unknown tool choice", chatURL, `{` + msgs + `,"tools":[` + mustJSON(weatherTool) + `],"tool_choice":{"type":"function","function":{"name":"nope"}}}`, "nope"},
		{"tool choice without tools", chatURL, `{` + msgs + `,"tool_choice":"required"}`, "needs tools"},
		{"tools with regex", chatURL, `{` + msgs + `,"tools":[` + mustJSON(weatherTool) + `],"guided_regex":"a"}`, "cannot be combined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, reply := post(t, c.url, c.body)
			checkError(t, status, reply, c.want)
		})
	}
	// Values that ask for nothing pass.
	for _, body := range []string{`{` + msgs + `,"logprobs":false,"max_tokens":2}`, `{` + msgs + `,"logit_bias":{},"max_tokens":2}`, `{` + msgs + `,"response_format":{"type":"text"},"max_tokens":2}`, `{` + msgs + `,"tools":[` + mustJSON(weatherTool) + `],"tool_choice":"none","max_tokens":2}`} {
		if status, reply := post(t, chatURL, body); status != http.StatusOK {
			t.Errorf("%s: status %d: %v", body, status, reply)
		}
	}
}

// TestToolsThroughTheTemplate: a template that reads tools (Qwen 2.5's)
// gets them in its tools variable, and the reply says so.
func TestToolsThroughTheTemplate(t *testing.T) {
	src, err := os.ReadFile(testshared.Path(t, "testdata/chat-templates/jinja/Qwen-Qwen2.5-7B-Instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	form, err := chat.NewTemplate("qwen2.5", string(src), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	if !form.SupportsTools() {
		t.Fatal("Qwen 2.5's template does not read tools")
	}
	p, err := form.Render([]chat.Message{{Role: "user", Content: "hi"}}, chat.Options{AddGenerationPrompt: true, Tools: []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}})
	if err != nil || !strings.Contains(p.Text(), `"get_weather"`) || !strings.Contains(p.Text(), "<tools>") {
		t.Fatalf("rendered %v: %v; want the tool in the template's <tools> block", p, err)
	}
	ts, _ := newTestServer(t, func(e *engine.Config, c *Config) { e.Context, c.Format = 2048, form })
	status, reply := post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Weather?"}},
		"tools": []any{weatherTool}, "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 150, "temperature": 0})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, reply)
	}
	if reply["tool_format"] != "hermes" {
		t.Errorf("tool_format %v, want hermes (Qwen 2.5's <tool_call> format)", reply["tool_format"])
	}
	ch := reply["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || reply["usage"].(map[string]any)["prompt_tokens"].(float64) < 100 {
		t.Errorf("reply %v", reply)
	}
}

// sharedTemplate compiles one of the shared real chat templates.
func sharedTemplate(t *testing.T, file, bos, eos string) *chat.Formatter {
	t.Helper()
	src, err := os.ReadFile(testshared.Path(t, "testdata/chat-templates/jinja/"+file))
	if err != nil {
		t.Fatal(err)
	}
	form, err := chat.NewTemplate(file, string(src), bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	return form
}

// TestToolStyle: the real templates' tool-call formats, found as
// llama.cpp's chat parser finds them.
func TestToolStyle(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", styleHermes},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", styleLlama3},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", styleMistral},
		{"google-gemma-2-2b-it.jinja", styleGeneric},
		{"microsoft-Phi-3.5-mini-instruct.jinja", styleGeneric},
	} {
		if got := toolStyle(sharedTemplate(t, c.file, "", "").Source()); got != c.want {
			t.Errorf("%s: format %q, want %q", c.file, got, c.want)
		}
	}
}

// TestScanCalls reads replies in each format, whole and cut short, as a
// stream finds them.
func TestScanCalls(t *testing.T) {
	type want struct {
		name string // "" for a call whose name is not closed yet
		args string // the arguments' text so far
		open bool   // the arguments are not finished
	}
	cases := []struct {
		style, text string
		want        []want
	}{
		{styleHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, \"}\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
			[]want{{"a", `{"x": [1, "}"]}`, false}, {"b", `{}`, false}}},
		{styleHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"y", []want{{"a", `{"x": "y`, true}}},
		{styleHermes, "<tool_call>\n{\"name\": \"ab", []want{{"", "", true}}},
		{styleHermes, "I would rather not.", nil},
		{styleLlama3, ` {"name": "w", "parameters": {"q": "\"a\""}}`, []want{{"w", `{"q": "\"a\""}`, false}}},
		{styleLlama3, `Hello {"name": "w"}`, nil},
		{styleMistral, `[TOOL_CALLS][{"name": "a", "arguments": {"n": 1}, "id": "abcdefghi"}, {"name": "b", "arguments": {"n": 22`,
			[]want{{"a", `{"n": 1}`, false}, {"b", `{"n": 22`, true}}},
		{styleGeneric, `{"tool_calls": [{"name": "a", "arguments": {"n": 1}}, {"name": "b", "arguments": 5}]}`,
			[]want{{"a", `{"n": 1}`, false}, {"b", `5`, false}}},
		{styleGeneric, `{"tool_call": {"name": "a", "arguments": {}}}`, []want{{"a", `{}`, false}}},
		{styleGeneric, `{"response": {"name": "a", "arguments": {}}}`, nil},
	}
	for _, c := range cases {
		tu := &toolUse{style: c.style}
		got := scanCalls(tu, c.text)
		if len(got) != len(c.want) {
			t.Errorf("%s %q: %d calls %+v, want %d", c.style, c.text, len(got), got, len(c.want))
			continue
		}
		for i, w := range c.want {
			g := got[i]
			args := ""
			if g.argStart >= 0 {
				end := g.argEnd
				if end < 0 {
					end = len(c.text)
				}
				args = c.text[g.argStart:end]
			}
			if g.name != w.name || g.named != (w.name != "") || args != w.args || (g.argEnd < 0) != w.open {
				t.Errorf("%s %q: call %d = %+v (args %q), want %+v", c.style, c.text, i, g, args, w)
			}
		}
	}
}

var timeTool = map[string]any{"type": "function", "function": map[string]any{
	"name": "get_time", "description": "The time in a time zone",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{
		"zone": map[string]any{"enum": []any{"UTC", "CET"}},
	}, "required": []any{"zone"}},
}}

// TestNativeToolCalls: with each family's template, tools are answered in
// its own format (the reply says which), every call's arguments validate
// against its tool's parameters, calls have distinct ids, and the same
// request streamed assembles to the same calls.
func TestNativeToolCalls(t *testing.T) {
	validators := map[string]*jsonschema.Schema{}
	for _, tool := range []map[string]any{weatherTool, timeTool} {
		fn := tool["function"].(map[string]any)
		validators[fn["name"].(string)] = schemaValidator(t, fn["parameters"])
	}
	for _, c := range []struct {
		file, bos, eos, style string
		parallel              bool // parallel_tool_calls (the random model makes all the calls it may)
		maxTokens             int  // room for the calls, within the context with the prompt
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", styleHermes, true, 1000},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", styleLlama3, false, 600},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", styleMistral, false, 300}, // one call, to keep the test short
	} {
		t.Run(c.style, func(t *testing.T) {
			form := sharedTemplate(t, c.file, c.bos, c.eos)
			ts, _ := newTestServer(t, func(e *engine.Config, cfg *Config) { e.Context, cfg.Format = 2048, form })
			url := ts.URL + "/v1/chat/completions"
			body := func() map[string]any {
				return map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Weather and time?"}},
					"tools": []any{weatherTool, timeTool}, "tool_choice": "required", "parallel_tool_calls": c.parallel, "max_tokens": c.maxTokens, "temperature": 0, "seed": 7}
			}
			status, reply := post(t, url, body())
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, reply)
			}
			if reply["tool_format"] != c.style {
				t.Errorf("tool_format %v, want %s", reply["tool_format"], c.style)
			}
			ch := reply["choices"].([]any)[0].(map[string]any)
			if ch["finish_reason"] != "tool_calls" {
				t.Fatalf("finish_reason %v: %v", ch["finish_reason"], ch)
			}
			calls := ch["message"].(map[string]any)["tool_calls"].([]any)
			if !c.parallel && len(calls) != 1 || c.parallel && len(calls) < 2 {
				t.Errorf("%d calls, parallel_tool_calls %v", len(calls), c.parallel)
			}
			ids := map[string]bool{}
			for _, raw := range calls {
				call := raw.(map[string]any)
				fn := call["function"].(map[string]any)
				v, ok := validators[fn["name"].(string)]
				if !ok {
					t.Fatalf("called %v", fn["name"])
				}
				validates(t, v, fn["arguments"].(string))
				if id := call["id"].(string); id == "" || ids[id] {
					t.Errorf("call id %q empty or repeated", id)
				} else {
					ids[id] = true
				}
			}
			streamed, finish, format := streamToolCalls(t, url, body())
			if finish != "tool_calls" || format != c.style || len(streamed) != len(calls) {
				t.Fatalf("streamed: %d calls, finish %q, format %q; want %d, tool_calls, %s", len(streamed), finish, format, len(calls), c.style)
			}
			for i, s := range streamed {
				fn := calls[i].(map[string]any)["function"].(map[string]any)
				var a, b any
				json.Unmarshal([]byte(s.Arguments), &a)
				json.Unmarshal([]byte(fn["arguments"].(string)), &b)
				if s.Name != fn["name"] || mustJSON(a) != mustJSON(b) || a == nil {
					t.Errorf("streamed call %d: %s(%s), not streamed: %s(%s)", i, s.Name, s.Arguments, fn["name"], fn["arguments"])
				}
			}
			t.Logf("%s: %d calls", c.style, len(calls))
		})
	}
}

// TestToolGrammar checks each format's constraint on written replies:
// calls in the format, as many as parallel_tool_calls allows, and for
// tool_choice "auto" a reply that does not start as a call.
func TestToolGrammar(t *testing.T) {
	defs := []toolDef{{Name: "w", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}}
	hermes1 := "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"n\": 1}}\n</tool_call>"
	cases := []struct {
		style, choice string
		parallel      bool
		text          string
		want          bool
	}{
		{styleHermes, "required", true, hermes1, true},
		{styleHermes, "required", true, hermes1 + "\n" + hermes1, true},
		{styleHermes, "required", false, hermes1 + "\n" + hermes1, false},
		{styleHermes, "required", true, strings.Repeat(hermes1+"\n", maxCalls) + hermes1, false},
		{styleHermes, "required", true, "Sure.", false},
		{styleHermes, "auto", true, "Sure, <b>here</b>.", true},
		{styleHermes, "auto", true, "<b>no</b>", false},
		{styleHermes, "required", true, "<tool_call>\n{\"name\": \"x\", \"arguments\": {\"n\": 1}}\n</tool_call>", false},
		{styleLlama3, "required", false, `{"name": "w", "parameters": {"n": 2}}`, true},
		{styleLlama3, "required", false, `{"name": "w", "arguments": {"n": 2}}`, false},
		{styleLlama3, "auto", false, `It is sunny.`, true},
		{styleMistral, "required", true, `[TOOL_CALLS][{"name": "w", "arguments": {"n": 3}, "id": "a1b2c3d4e"}, {"name": "w", "arguments": {"n": 4}, "id": "zzzzzzzzz"}]`, true},
		{styleMistral, "required", true, `[TOOL_CALLS][{"name": "w", "arguments": {"n": 3}, "id": "short"}]`, false},
		{styleMistral, "required", false, `[TOOL_CALLS][{"name": "w", "arguments": {"n": 3}, "id": "a1b2c3d4e"}, {"name": "w", "arguments": {"n": 4}, "id": "zzzzzzzzz"}]`, false},
		{styleGeneric, "required", true, `{"tool_calls": [{"name": "w", "arguments": {"n": 5}}, {"name": "w", "arguments": {"n": 6}}]}`, true},
		{styleGeneric, "required", false, `{"tool_call": {"name": "w", "arguments": {"n": 5}}}`, true},
		{styleGeneric, "auto", true, `{"response": "hi"}`, true},
	}
	for _, c := range cases {
		tu := &toolUse{defs: defs, choice: c.choice, style: c.style, parallel: c.parallel}
		g, err := tu.grammar()
		if err != nil {
			t.Fatalf("%s %s: %v", c.style, c.choice, err)
		}
		if got := g.Match(c.text); got != c.want {
			t.Errorf("%s %s parallel %v: %q matches %v, want %v", c.style, c.choice, c.parallel, c.text, got, c.want)
		}
	}
}

// TestCallsText: an earlier reply's calls are written back into the
// history in the format, and read back the same.
func TestCallsText(t *testing.T) {
	raw := json.RawMessage(`[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"n\":1}"}},{"id":"call_2","type":"function","function":{"name":"v","arguments":"{}"}}]`)
	for _, style := range []string{styleHermes, styleMistral, styleGeneric} {
		tu := &toolUse{style: style, parallel: true}
		text := tu.callsText(raw)
		calls := tu.parseToolReply(text, nil).calls
		if len(calls) != 2 || calls[0]["function"].(map[string]any)["arguments"] != `{"n":1}` || calls[1]["function"].(map[string]any)["name"] != "v" {
			t.Errorf("%s: %q reads back as %v", style, text, calls)
		}
	}
}

// TestGrammarCache: the same schema twice gets the same Grammar, another
// schema another one.
func TestGrammarCache(t *testing.T) {
	build := func(s string) *genRequest {
		g := &genRequest{}
		if _, e := parseFormat(fields{"guided_json": json.RawMessage(s)}, g); e != nil {
			t.Fatal(e)
		}
		return g
	}
	a, b, c := build(`{"type":"integer"}`), build(`{"type":"integer"}`), build(`{"type":"boolean"}`)
	if a.constraint != b.constraint || a.constraint == c.constraint {
		t.Errorf("same schema: shared %v; other schema: shared %v", a.constraint == b.constraint, a.constraint == c.constraint)
	}
}

// Tools whose parameters refer to their own $defs (as Pydantic and the
// OpenAI Agents SDK write them), and a response schema that does, are
// served: nested in the grammar's wrapper, their references are moved to
// where the parameters stand, and the arguments validate.
func TestToolParametersWithDefs(t *testing.T) {
	params := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"where": map[string]any{"$ref": "#/$defs/place"},
			"when":  map[string]any{"$ref": "#/$defs/day"},
		},
		"required": []any{"where", "when"},
		"$defs": map[string]any{
			"place": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}}, "required": []any{"city"}},
			"day":   map[string]any{"enum": []any{"mon", "tue"}},
		},
	}
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "book/trip", "parameters": params}}
	ts, _ := newTestServer(t, func(e *engine.Config, c *Config) { e.Context = 2048 })
	url := ts.URL + "/v1/chat/completions"
	args := schemaValidator(t, params)
	for _, parallel := range []bool{false, true} {
		status, reply := post(t, url, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Book it."}},
			"tools": []any{tool, weatherTool}, "tool_choice": "required", "parallel_tool_calls": parallel, "max_tokens": 1000, "temperature": 0})
		if status != http.StatusOK {
			t.Fatalf("parallel %v: status %d: %v", parallel, status, reply)
		}
		ch := reply["choices"].([]any)[0].(map[string]any)
		if ch["finish_reason"] != "tool_calls" {
			t.Fatalf("parallel %v: finish_reason %v: %v", parallel, ch["finish_reason"], ch)
		}
		for _, c := range ch["message"].(map[string]any)["tool_calls"].([]any) {
			fn := c.(map[string]any)["function"].(map[string]any)
			if fn["name"] == "book/trip" {
				validates(t, args, fn["arguments"].(string))
			}
		}
	}
	resp := map[string]any{"type": "object", "properties": map[string]any{"mood": map[string]any{"$ref": "#/$defs/mood"}}, "required": []any{"mood"},
		"$defs": map[string]any{"mood": map[string]any{"enum": []any{"happy", "sad"}}}}
	status, reply := post(t, url, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "tools": []any{tool}, "tool_choice": "auto",
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": resp}}, "max_tokens": 200, "temperature": 0})
	if status != http.StatusOK {
		t.Fatalf("a response schema with $defs beside tools: status %d: %v", status, reply)
	}
}

// TestRelocate: only $ref values that start with # move; keys keep their
// order and other strings stay as written.
func TestRelocate(t *testing.T) {
	in := `{"b":{"$ref":"#/$defs/x"},"a":[1,{"$ref":"#"},"#/not/a/ref"],"$ref":"http://x/#y","d":{"description":"<#>"},"$defs":{"x":{"const":null,"e":true}}}`
	want := `{"b":{"$ref":"#/$defs/tool~1x/$defs/x"},"a":[1,{"$ref":"#/$defs/tool~1x"},"#/not/a/ref"],"$ref":"http://x/#y","d":{"description":"<#>"},"$defs":{"x":{"const":null,"e":true}}}`
	got, err := relocate(json.RawMessage(in), "#/$defs/tool~1x")
	if err != nil || string(got) != want {
		t.Errorf("relocate:\n got %s (%v)\nwant %s", got, err, want)
	}
	if _, err := relocate(json.RawMessage(`{"a":`), "#"); err == nil {
		t.Error("a cut schema was relocated")
	}
}
