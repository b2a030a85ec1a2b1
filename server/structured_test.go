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
		status, reply := post(t, url, map[string]any{"messages": msgs, "tools": []any{weatherTool}, "tool_choice": choice, "max_tokens": 150, "temperature": 0})
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

	// Streamed: the call comes as one delta, then finish_reason tool_calls.
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"Weather?"}],"stream":true,"max_tokens":150,"temperature":0,"tool_choice":"required","tools":[`+mustJSON(weatherTool)+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if h := resp.Header.Get("X-Kvscope-Tool-Format"); h != "generic" {
		t.Errorf("X-Kvscope-Tool-Format %q, want generic", h)
	}
	var gotCall, gotFinish bool
	for _, ev := range sseEvents(t, resp.Body) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    int `json:"index"`
						Function struct {
							Name, Arguments string
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
			if len(ch.Delta.ToolCalls) > 0 {
				gotCall = true
				validates(t, args, ch.Delta.ToolCalls[0].Function.Arguments)
			}
			if ch.FinishReason != nil {
				gotFinish = *ch.FinishReason == "tool_calls"
			}
		}
	}
	if !gotCall || !gotFinish {
		t.Errorf("streamed: tool call %v, finish tool_calls %v", gotCall, gotFinish)
	}
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
		"tools": []any{weatherTool}, "tool_choice": "required", "max_tokens": 150, "temperature": 0})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, reply)
	}
	if reply["tool_format"] != "template" {
		t.Errorf("tool_format %v, want template", reply["tool_format"])
	}
	ch := reply["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || reply["usage"].(map[string]any)["prompt_tokens"].(float64) < 100 {
		t.Errorf("reply %v", reply)
	}
}
