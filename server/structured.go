package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"kvscope/engine/constrain"
)

// toolDef is one function of a request's tools.
type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// toolUse is how a request's tools are answered: the output is
// constrained to a tool-call format and parsed back into tool_calls. The
// format is the model family's own where its chat template shows one, as
// llama.cpp's chat parser finds it (toolStyle), else llama.cpp's generic
// JSON ({"tool_calls": [{"name": ..., "arguments": {...}}]} or
// {"response": ...}).
type toolUse struct {
	defs     []toolDef
	list     []any // the tools as decoded JSON, for the template
	choice   string
	native   bool   // the template reads its tools variable
	style    string // the format: styleGeneric, styleHermes, styleLlama3 or styleMistral
	parallel bool   // more than one call may come (parallel_tool_calls)
	response json.RawMessage
}

// The tool-call formats.
const (
	styleGeneric = "generic" // llama.cpp's generic JSON
	styleHermes  = "hermes"  // Hermes 2 Pro and Qwen 2.5: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
	styleLlama3  = "llama3"  // Llama 3.1 to 3.3: {"name": ..., "parameters": ...}, one call
	styleMistral = "mistral" // Mistral Nemo: [TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}]
)

// maxCalls bounds the calls of one reply when parallel_tool_calls is on,
// so that a model cannot go on calling until its token limit.
const maxCalls = 8

// toolStyle is the tool-call format of a chat template, found from its
// source in the order llama.cpp's common_chat_templates_apply_jinja looks:
// a <tool_call> tag, then Llama 3's ipython header, then Mistral's
// [TOOL_CALLS]; the generic format otherwise.
func toolStyle(src string) string {
	switch {
	case strings.Contains(src, "<tool_call>"):
		return styleHermes
	case strings.Contains(src, "<|start_header_id|>ipython<|end_header_id|>"):
		return styleLlama3
	case strings.Contains(src, "[TOOL_CALLS]"):
		return styleMistral
	}
	return styleGeneric
}

// format names the tool format for the reply's header and field.
func (t *toolUse) format() string { return t.style }

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
			g.constraint, _ = cachedGrammar("json_object", func() (*constrain.Grammar, error) { return constrain.JSON(true), nil })
			g.format = "json_object"
			return nil, nil
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || isNull(rf.JSONSchema.Schema) {
				return nil, badRequest("response_format.json_schema.schema", "", "response_format of type json_schema needs json_schema.schema")
			}
			schema = rf.JSONSchema.Schema
			if g.constraint, err = cachedGrammar("schema\x00"+string(schema), func() (*constrain.Grammar, error) { return constrain.Schema(schema) }); err != nil {
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
		if g.constraint, err = cachedGrammar("schema\x00"+string(raw), func() (*constrain.Grammar, error) { return constrain.Schema(raw) }); err != nil {
			return nil, badRequest(name, "invalid_schema", "guided_json: %v", err)
		}
	case "guided_regex":
		re, e := f.str(name)
		if e != nil {
			return nil, e
		}
		if g.constraint, err = cachedGrammar("regex\x00"+re, func() (*constrain.Grammar, error) { return constrain.Regex(re) }); err != nil {
			return nil, badRequest(name, "", "guided_regex: %v", err)
		}
	case "guided_choice":
		var choices []string
		if _, e := f.decode(name, "an array of strings", &choices); e != nil {
			return nil, e
		}
		if g.constraint, err = cachedGrammar("choice\x00"+strings.Join(choices, "\x00"), func() (*constrain.Grammar, error) { return constrain.Choice(choices) }); err != nil {
			return nil, badRequest(name, "", "guided_choice: %v", err)
		}
	}
	g.format = given[0]
	return schema, nil
}

// parseTools reads tools, tool_choice and parallel_tool_calls (chat
// only) for a template of source src that reads its tools variable
// (native) or not. It returns nil when there are no tools or tool_choice
// is "none".
func parseTools(f fields, native bool, src string) (*toolUse, *apiError) {
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
	t := &toolUse{choice: "auto", native: native, style: styleGeneric, parallel: true}
	if native {
		t.style = toolStyle(src)
	}
	if f.has("parallel_tool_calls") {
		var p bool
		if _, e := f.decode("parallel_tool_calls", "a boolean", &p); e != nil {
			return nil, e
		}
		t.parallel = p
	}
	if t.style == styleLlama3 {
		t.parallel = false // the template shows one call a message
	}
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

// call is the JSON Schema of one call to any of the chosen tools, with
// the arguments under key (and, for Mistral, a 9-character id after them).
func (t *toolUse) call(key string) []byte {
	var calls []string
	for _, d := range t.defs {
		if t.choice != "auto" && t.choice != "required" && t.choice != d.Name {
			continue
		}
		name, _ := json.Marshal(d.Name)
		props, req := fmt.Sprintf(`"name":{"type":"string","const":%s},%q:{"$ref":%q}`, name, key, defsRef(toolEntry(d.Name))), `"name",`+jsonString(key)
		if t.style == styleMistral {
			props += `,"id":{"type":"string","pattern":"^[a-zA-Z0-9]{9}$"}`
			req += `,"id"`
		}
		calls = append(calls, fmt.Sprintf(`{"type":"object","properties":{%s},"required":[%s]}`, props, req))
	}
	if len(calls) == 1 {
		return []byte(calls[0])
	}
	return []byte(`{"anyOf":[` + strings.Join(calls, ",") + `]}`)
}

// toolEntry and responseDef name the root $defs entries under which a
// grammar's schema holds each tool's parameters and the response schema
// (nested in a wrapper, their own references to #/$defs/... would name the
// wrapper's).
func toolEntry(name string) string { return "tool " + name }

const responseDef = "response"

// defsRef is the reference to the root $defs entry name.
func defsRef(name string) string { return "#/$defs/" + pointerToken(name) }

// rooted returns schema (a JSON object's text) with the root $defs that
// toolEntry and responseDef name: every tool's parameters and the response
// schema, each with its own references moved to where it now stands.
func (t *toolUse) rooted(schema string) ([]byte, error) {
	var defs []string
	add := func(name string, s json.RawMessage) error {
		moved, err := relocate(s, defsRef(name))
		if err != nil {
			return err
		}
		defs = append(defs, jsonString(name)+":"+string(moved))
		return nil
	}
	for _, d := range t.defs {
		if err := add(toolEntry(d.Name), d.Parameters); err != nil {
			return nil, fmt.Errorf("the parameters of %s: %w", d.Name, err)
		}
	}
	if t.response != nil {
		if err := add(responseDef, t.response); err != nil {
			return nil, fmt.Errorf("the response schema: %w", err)
		}
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(schema), "{")
	if !ok {
		return nil, fmt.Errorf("a grammar's schema %.40q is not an object", schema)
	}
	if strings.TrimSpace(rest) != "}" {
		rest = "," + rest
	}
	return []byte(`{"$defs":{` + strings.Join(defs, ",") + `}` + rest), nil
}

// pointerToken escapes s as one JSON Pointer token (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// relocate returns schema with each of its local references ($ref values
// starting with #) rewritten for the schema standing at the JSON Pointer
// fragment at of another document, the rest written as it was (keys in
// their order).
func relocate(schema json.RawMessage, at string) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	var out bytes.Buffer
	type frame struct {
		object bool
		n      int  // keys or items written
		key    bool // an object's next token is a key
	}
	var stack []*frame
	ref := false // the value coming is a $ref's
	for {
		tok, err := d.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if dl, ok := tok.(json.Delim); ok && (dl == '}' || dl == ']') {
			out.WriteByte(byte(dl))
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
			continue
		}
		if top != nil && (top.key || !top.object) {
			if top.n > 0 {
				out.WriteByte(',')
			}
			top.n++
		}
		if top != nil && top.key {
			k, _ := tok.(string)
			out.WriteString(jsonString(k))
			out.WriteByte(':')
			top.key, ref = false, k == "$ref"
			continue
		}
		switch v := tok.(type) {
		case json.Delim: // { or [
			out.WriteByte(byte(v))
			stack = append(stack, &frame{object: v == '{', key: v == '{'})
			ref = false
			continue
		case string:
			if ref && strings.HasPrefix(v, "#") {
				v = at + strings.TrimPrefix(v, "#")
			}
			out.WriteString(jsonString(v))
		case json.Number:
			out.WriteString(v.String())
		case bool:
			out.WriteString(strconv.FormatBool(v))
		case nil:
			out.WriteString("null")
		}
		ref = false
		if top != nil && top.object {
			top.key = true
		}
	}
}

// jsonString is s as a JSON string, with <, > and & as themselves.
func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// argsKey is the key of a call's arguments in t's format.
func (t *toolUse) argsKey() string {
	if t.style == styleLlama3 {
		return "parameters"
	}
	return "arguments"
}

// callPrefix is how a reply with calls starts in t's format ("" for the
// generic format, whose replies are all JSON).
func (t *toolUse) callPrefix() string {
	switch t.style {
	case styleHermes:
		return "<tool_call>"
	case styleLlama3:
		return "{"
	case styleMistral:
		return "[TOOL_CALLS]"
	}
	return ""
}

// cachedGrammar returns the Grammar compiled for key, building it the
// first time: requests that send the same schema or tools again (an agent
// sends its tools every turn) share one Grammar, whose automaton and
// masks are then already built, so that their steps cost a table look-up
// rather than a first walk. The cache holds maxGrammars, and lets go of a
// Grammar whose automaton has grown past maxGrammarStates.
func cachedGrammar(key string, build func() (*constrain.Grammar, error)) (*constrain.Grammar, error) {
	grammars.mu.Lock()
	g, ok := grammars.m[key]
	grammars.mu.Unlock()
	if ok && g.States() <= maxGrammarStates {
		return g, nil
	}
	g, err := build()
	if err != nil {
		return nil, err
	}
	grammars.mu.Lock()
	defer grammars.mu.Unlock()
	if len(grammars.m) >= maxGrammars {
		clear(grammars.m)
	}
	grammars.m[key] = g
	return g, nil
}

const (
	maxGrammars      = 32
	maxGrammarStates = 1 << 14 // 16 MiB of transition tables
)

var grammars = struct {
	mu sync.Mutex
	m  map[string]*constrain.Grammar
}{m: map[string]*constrain.Grammar{}}

// grammar is the constraint of t's replies: one call (or, with
// parallel_tool_calls, up to maxCalls) in t's format, or, for
// tool_choice "auto", a reply instead: free text that does not start as
// a call does, or JSON of the response schema where one is given (the
// generic format's {"response": ...}).
func (t *toolUse) grammar() (*constrain.Grammar, error) {
	most := 1
	if t.parallel {
		most = maxCalls
	}
	key := fmt.Sprintf("tools\x00%s\x00%d\x00%s\x00%s", t.style, most, t.choice, t.response)
	for _, d := range t.defs {
		key += "\x00" + d.Name + "\x00" + string(d.Parameters)
	}
	return cachedGrammar(key, func() (*constrain.Grammar, error) {
		one := t.call(t.argsKey())
		var schema string // the calls' JSON schema, given the root $defs
		switch {
		case t.style == styleHermes || t.style == styleLlama3:
			schema = string(one)
		case t.style == styleMistral:
			schema = fmt.Sprintf(`{"type":"array","items":%s,"minItems":1,"maxItems":%d}`, one, most)
		case t.parallel:
			schema = fmt.Sprintf(`{"type":"object","properties":{"tool_calls":{"type":"array","items":%s,"minItems":1,"maxItems":%d}},"required":["tool_calls"]}`, one, most)
		default:
			schema = `{"type":"object","properties":{"tool_call":` + string(one) + `},"required":["tool_call"]}`
		}
		rooted, err := t.rooted(schema)
		if err != nil {
			return nil, err
		}
		var calls constrain.Part
		switch t.style {
		case styleHermes:
			calls = constrain.Repeat(constrain.Seq(constrain.Literal("<tool_call>\n"), constrain.JSONOf(rooted), constrain.Literal("\n</tool_call>")),
				constrain.Literal("\n"), 1, most)
		case styleMistral:
			calls = constrain.Seq(constrain.Literal("[TOOL_CALLS]"), constrain.JSONOf(rooted))
		default:
			calls = constrain.JSONOf(rooted)
		}
		return t.compose(calls)
	})
}

// compose is grammar's Grammar of calls (and, for "auto", a reply).
func (t *toolUse) compose(calls constrain.Part) (*constrain.Grammar, error) {
	if t.choice != "auto" {
		return constrain.Compose("tools", calls)
	}
	var reply constrain.Part
	switch {
	case t.style == styleGeneric:
		resp := `{"type":"string"}`
		if t.response != nil {
			resp = fmt.Sprintf(`{"$ref":%q}`, defsRef(responseDef))
		}
		rooted, err := t.rooted(`{"type":"object","properties":{"response":` + resp + `},"required":["response"]}`)
		if err != nil {
			return nil, err
		}
		reply = constrain.JSONOf(rooted)
	case t.response != nil:
		reply = constrain.JSONOf(t.response)
	default:
		reply = constrain.Text(t.callPrefix()[:1])
	}
	return constrain.Compose("tools", constrain.OneOf(calls, reply))
}

// instruction is the system text that asks for the generic format (with
// the tools listed where the template does not show them); "" for a
// model's own format, which its template asks for.
func (t *toolUse) instruction() string {
	if t.style != styleGeneric {
		return ""
	}
	field := "`tool_call` (a request to call a tool)"
	if t.parallel {
		field = "`tool_calls` (a request to call tools)"
	}
	s := "Respond in JSON format, either with " + field + " or with `response` reply to the user's request"
	if t.choice != "auto" {
		s = "Respond in JSON format with " + field
	}
	if !t.native {
		b, _ := json.Marshal(t.defs)
		s += ". The tools you can call: " + string(b)
	}
	return s
}

// toolReply is a reply parsed from a tool-call format: tool calls, or
// content.
type toolReply struct {
	calls   []map[string]any
	content string
}

// newCallID is a fresh tool call id.
func newCallID() string { return "call_" + newID(false)[len("cmpl-"):] }

// parseToolReply reads text in t's format: its complete calls, each with
// a fresh id (ids[i] where given), or, without calls, its content.
func (t *toolUse) parseToolReply(text string, ids []string) toolReply {
	var calls []map[string]any
	for i, c := range scanCalls(t, text) {
		if !c.named || c.argEnd < 0 {
			break
		}
		var args bytes.Buffer
		if err := json.Compact(&args, []byte(text[c.argStart:c.argEnd])); err != nil {
			break
		}
		id := newCallID()
		if i < len(ids) {
			id = ids[i]
		}
		calls = append(calls, map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": args.String()}})
	}
	if len(calls) > 0 {
		return toolReply{calls: calls}
	}
	if t.style == styleGeneric {
		var v struct {
			Response json.RawMessage `json:"response"`
		}
		if json.Unmarshal([]byte(text), &v) == nil && v.Response != nil {
			var s string
			if json.Unmarshal(v.Response, &s) == nil {
				return toolReply{content: s}
			}
			return toolReply{content: string(v.Response)}
		}
	}
	return toolReply{content: text}
}

// callsText is an earlier reply's tool calls written back in t's format
// (the generic one for t nil), so that the history shows them as the
// model writes them.
func (t *toolUse) callsText(raw json.RawMessage) string {
	var calls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &calls) != nil || len(calls) == 0 {
		return ""
	}
	style, key := styleGeneric, "arguments"
	if t != nil {
		style, key = t.style, t.argsKey()
	}
	var objs []string
	for i, c := range calls {
		args := json.RawMessage(c.Function.Arguments)
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Function.Arguments)
		}
		name, _ := json.Marshal(c.Function.Name)
		o := fmt.Sprintf(`{"name":%s,%q:%s`, name, key, args)
		if style == styleMistral {
			o += fmt.Sprintf(`,"id":"call%05d"`, i)
		}
		objs = append(objs, o+"}")
	}
	switch style {
	case styleHermes:
		return "<tool_call>\n" + strings.Join(objs, "\n</tool_call>\n<tool_call>\n") + "\n</tool_call>"
	case styleLlama3:
		return objs[0]
	case styleMistral:
		return "[TOOL_CALLS][" + strings.Join(objs, ", ") + "]"
	}
	if len(objs) == 1 && (t == nil || !t.parallel) {
		return `{"tool_call":` + objs[0] + `}`
	}
	return `{"tool_calls":[` + strings.Join(objs, ",") + `]}`
}

// toolStream is what a streamed choice has sent of its tool calls: their
// ids, how many bytes of each call's arguments, and, for a reply in free
// text instead, how much of it.
type toolStream struct {
	ids     []string
	sent    []int
	mode    int // 0 undecided, streamCalls or streamText
	textOut int
}

const (
	streamCalls = 1 + iota
	streamText
)

// stream returns what to send of text (the reply so far) that has not
// been sent: tool_calls delta entries as OpenAI streams them (a call's
// first entry has its index, id, type and name with empty arguments, the
// next ones fragments of the arguments as they are written), or content
// where the reply is free text rather than calls.
func (t *toolUse) stream(ts *toolStream, text string) ([]map[string]any, string) {
	if ts.mode == 0 {
		s := strings.TrimLeft(text, " \t\n\r")
		switch p := t.callPrefix(); {
		case s == "":
			return nil, ""
		case p == "" || s[0] == p[0] || t.response != nil:
			ts.mode = streamCalls // the generic format's response is sent whole at the end
		default:
			ts.mode = streamText
		}
	}
	if ts.mode == streamText {
		out := text[ts.textOut:]
		ts.textOut = len(text)
		return nil, out
	}
	var deltas []map[string]any
	for i, c := range scanCalls(t, text) {
		if i == len(ts.sent) {
			if !c.named {
				break
			}
			ts.ids = append(ts.ids, newCallID())
			ts.sent = append(ts.sent, 0)
			deltas = append(deltas, map[string]any{"index": i, "id": ts.ids[i], "type": "function",
				"function": map[string]any{"name": c.name, "arguments": ""}})
		}
		if c.argStart < 0 {
			continue
		}
		end := c.argEnd
		if end < 0 {
			end = len(text)
		}
		if from := c.argStart + ts.sent[i]; end > from {
			deltas = append(deltas, map[string]any{"index": i, "function": map[string]any{"arguments": text[from:end]}})
			ts.sent[i] = end - c.argStart
		}
	}
	return deltas, ""
}
