package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"kvscope/engine/constrain"
)

// toolDef is one function of a request's tools.
type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// toolUse is how a request's tools are answered: the output is constrained
// to llama.cpp's generic tool-call JSON ({"tool_call": {"name": ...,
// "arguments": {...}}} or {"response": ...}) and parsed back into
// tool_calls.
type toolUse struct {
	defs     []toolDef
	list     []any // the tools as decoded JSON, for the template
	choice   string
	native   bool // the template reads its tools variable
	response json.RawMessage
}

// format names the tool format for the reply's header and field.
func (t *toolUse) format() string {
	if t.native {
		return "template"
	}
	return "generic"
}

// unsupportedFields are request fields the server cannot honour: each is
// refused with a 400 naming it rather than ignored. The check says whether
// the value asks for anything (false, 0, null and empty values do not).
var unsupportedFields = []struct {
	name, why string
}{
	{"logprobs", "log probabilities are not returned by this server"},
	{"top_logprobs", "log probabilities are not returned by this server"},
	{"logit_bias", "logit_bias is not supported"},
	{"echo", "echo is not supported"},
	{"best_of", "best_of is not supported (use n)"},
	{"suffix", "suffix (fill-in-the-middle) is not supported"},
	{"functions", "functions is not supported: use tools"},
	{"function_call", "function_call is not supported: use tool_choice"},
	{"guided_grammar", "guided_grammar is not supported: use guided_json, guided_regex or guided_choice"},
	{"guided_whitespace_pattern", "guided_whitespace_pattern is not supported"},
	{"audio", "audio output is not supported"},
	{"prediction", "predicted outputs are not supported"},
	{"web_search_options", "web search is not supported"},
}

// asks reports whether a raw field value asks for something: not null,
// false, 0, 1 (best_of), "" or an empty object or array.
func asks(name string, raw json.RawMessage) bool {
	switch v := string(bytes.TrimSpace(raw)); v {
	case "", "null", "false", "0", `""`, "{}", "[]":
		return false
	case "1":
		return name != "best_of"
	}
	return true
}

// checkUnsupported refuses the fields the server cannot honour.
func checkUnsupported(f fields) *apiError {
	for _, u := range unsupportedFields {
		if raw, ok := f[u.name]; ok && asks(u.name, raw) {
			return badRequest(u.name, "unsupported_parameter", "%s: %s", u.name, u.why)
		}
	}
	if raw, ok := f["modalities"]; ok && asks("modalities", raw) {
		var m []string
		if json.Unmarshal(raw, &m) != nil || len(m) != 1 || m[0] != "text" {
			return badRequest("modalities", "unsupported_parameter", "modalities: only [\"text\"] is supported")
		}
	}
	return nil
}

// parseFormat reads response_format and vLLM's guided_json, guided_regex
// and guided_choice into the grammar of the reply (at most one of them).
// It returns the response schema, if any, for tools to nest.
func parseFormat(f fields, g *genRequest) (json.RawMessage, *apiError) {
	var given []string
	for _, k := range []string{"response_format", "guided_json", "guided_regex", "guided_choice"} {
		if f.has(k) {
			given = append(given, k)
		}
	}
	if len(given) > 1 {
		return nil, badRequest(given[1], "", "%s and %s cannot be given together", given[0], given[1])
	}
	if len(given) == 0 {
		return nil, nil
	}
	var err error
	var schema json.RawMessage
	switch name := given[0]; name {
	case "response_format":
		var rf struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict *bool           `json:"strict"`
			} `json:"json_schema"`
		}
		if _, e := f.decode(name, `an object with a type ("text", "json_object" or "json_schema")`, &rf); e != nil {
			return nil, e
		}
		switch rf.Type {
		case "text":
			return nil, nil
		case "json_object":
			g.constraint = constrain.JSON(true)
			g.format = "json_object"
			return nil, nil
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || isNull(rf.JSONSchema.Schema) {
				return nil, badRequest("response_format.json_schema.schema", "", "response_format of type json_schema needs json_schema.schema")
			}
			schema = rf.JSONSchema.Schema
			if g.constraint, err = constrain.Schema(schema); err != nil {
				return nil, badRequest("response_format.json_schema.schema", "invalid_schema", "response_format: %v", err)
			}
			g.format = "json_schema"
			return schema, nil
		default:
			return nil, badRequest("response_format.type", "", `response_format.type is %q; it must be "text", "json_object" or "json_schema"`, rf.Type)
		}
	case "guided_json":
		raw := f[name]
		var text string
		if json.Unmarshal(raw, &text) == nil {
			raw = json.RawMessage(text) // a schema sent as a string
		}
		schema = raw
		if g.constraint, err = constrain.Schema(raw); err != nil {
			return nil, badRequest(name, "invalid_schema", "guided_json: %v", err)
		}
	case "guided_regex":
		re, e := f.str(name)
		if e != nil {
			return nil, e
		}
		if g.constraint, err = constrain.Regex(re); err != nil {
			return nil, badRequest(name, "", "guided_regex: %v", err)
		}
	case "guided_choice":
		var choices []string
		if _, e := f.decode(name, "an array of strings", &choices); e != nil {
			return nil, e
		}
		if g.constraint, err = constrain.Choice(choices); err != nil {
			return nil, badRequest(name, "", "guided_choice: %v", err)
		}
	}
	g.format = given[0]
	return schema, nil
}

// parseTools reads tools and tool_choice (chat only). It returns nil when
// there are no tools or tool_choice is "none".
func parseTools(f fields, native bool) (*toolUse, *apiError) {
	if !f.has("tools") {
		if f.has("tool_choice") {
			var c string
			if json.Unmarshal(f["tool_choice"], &c) == nil && (c == "none" || c == "auto") {
				return nil, nil
			}
			return nil, badRequest("tool_choice", "", "tool_choice needs tools")
		}
		return nil, nil
	}
	var list []json.RawMessage
	if _, e := f.decode("tools", "an array of tools", &list); e != nil {
		return nil, e
	}
	t := &toolUse{choice: "auto", native: native}
	for i, raw := range list {
		var tool struct {
			Type     string   `json:"type"`
			Function *toolDef `json:"function"`
		}
		param := fmt.Sprintf("tools[%d]", i)
		if err := json.Unmarshal(raw, &tool); err != nil || tool.Function == nil || tool.Function.Name == "" {
			return nil, badRequest(param, "invalid_type", "%s must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}", param)
		}
		if tool.Type != "function" {
			return nil, badRequest(param+".type", "", "%s.type is %q; only \"function\" is supported", param, tool.Type)
		}
		for _, d := range t.defs {
			if d.Name == tool.Function.Name {
				return nil, badRequest(param, "", "two tools are named %q", d.Name)
			}
		}
		if len(tool.Function.Parameters) == 0 || isNull(tool.Function.Parameters) {
			tool.Function.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		if _, err := constrain.Schema(tool.Function.Parameters); err != nil {
			return nil, badRequest(param+".function.parameters", "invalid_schema", "%s.function.parameters: %v", param, err)
		}
		t.defs = append(t.defs, *tool.Function)
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, badRequest(param, "invalid_type", "%s: %v", param, err)
		}
		t.list = append(t.list, v)
	}
	if len(t.defs) == 0 {
		return nil, badRequest("tools", "", "tools is empty")
	}
	if f.has("tool_choice") {
		var c string
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(f["tool_choice"], &c) == nil:
			if c != "auto" && c != "none" && c != "required" {
				return nil, badRequest("tool_choice", "", `tool_choice is %q; it must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`, c)
			}
			t.choice = c
		case json.Unmarshal(f["tool_choice"], &named) == nil && named.Function.Name != "":
			found := false
			for _, d := range t.defs {
				found = found || d.Name == named.Function.Name
			}
			if !found {
				return nil, badRequest("tool_choice", "", "tool_choice names %q, which is not in tools", named.Function.Name)
			}
			t.choice = named.Function.Name
		default:
			return nil, badRequest("tool_choice", "invalid_type", `tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`)
		}
	}
	if t.choice == "none" {
		return nil, nil
	}
	return t, nil
}

// schema is the JSON Schema of the generic tool-call format for t's
// choice, as llama.cpp's common_chat_params_init_generic writes it.
func (t *toolUse) schema() []byte {
	var calls []string
	for _, d := range t.defs {
		if t.choice != "auto" && t.choice != "required" && t.choice != d.Name {
			continue
		}
		name, _ := json.Marshal(d.Name)
		calls = append(calls, fmt.Sprintf(`{"type":"object","properties":{"name":{"type":"string","const":%s},"arguments":%s},"required":["name","arguments"]}`, name, d.Parameters))
	}
	call := calls[0]
	if len(calls) > 1 {
		call = `{"anyOf":[` + strings.Join(calls, ",") + `]}`
	}
	toolCall := `{"type":"object","properties":{"tool_call":` + call + `},"required":["tool_call"]}`
	if t.choice != "auto" {
		return []byte(toolCall)
	}
	resp := json.RawMessage(`{"type":"string"}`)
	if t.response != nil {
		resp = t.response
	}
	return []byte(`{"anyOf":[` + toolCall + `,{"type":"object","properties":{"response":` + string(resp) + `},"required":["response"]}]}`)
}

// instruction is the system text that asks for the generic format (with
// the tools listed where the template does not show them).
func (t *toolUse) instruction() string {
	s := "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the user's request"
	if t.choice != "auto" {
		s = "Respond in JSON format with `tool_call`, a request to call a tool"
	}
	if !t.native {
		b, _ := json.Marshal(t.defs)
		s += ". The tools you can call: " + string(b)
	}
	return s
}

// toolReply is a reply parsed from the generic format: tool calls, or
// content.
type toolReply struct {
	calls   []map[string]any
	content string
	ok      bool // the text parsed as the format
}

// parseToolReply reads text in the generic format.
func parseToolReply(text string) toolReply {
	var v struct {
		ToolCall *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"tool_call"`
		Response json.RawMessage `json:"response"`
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return toolReply{content: text}
	}
	if v.ToolCall != nil {
		var args bytes.Buffer
		if err := json.Compact(&args, v.ToolCall.Arguments); err != nil {
			return toolReply{content: text}
		}
		call := map[string]any{"id": "call_" + newID(false)[len("cmpl-"):], "type": "function",
			"function": map[string]any{"name": v.ToolCall.Name, "arguments": args.String()}}
		return toolReply{calls: []map[string]any{call}, ok: true}
	}
	if v.Response != nil {
		var s string
		if json.Unmarshal(v.Response, &s) == nil {
			return toolReply{content: s, ok: true}
		}
		return toolReply{content: string(v.Response), ok: true}
	}
	return toolReply{content: text}
}
