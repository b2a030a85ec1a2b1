package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"

	"kvscope/engine/chat"
	"kvscope/engine/constrain"
	"kvscope/engine/kvcache"
	"kvscope/engine/sample"
)

// genRequest is a parsed completion request.
type genRequest struct {
	chat         bool
	prompts      [][]int     // token ids, one prompt per entry (chat: one)
	turns        []chat.Turn // chat: the messages, to remember the replies by
	label        string      // "API: <first words>"
	n            int         // choices per prompt
	maxTokens    int         // asked for; 0: as many as fit
	stop         []string
	sampling     sample.Params
	stream       bool
	includeUsage bool
	// constraint limits the output (response_format, guided_*, tools).
	constraint *constrain.Grammar
	format     string   // the field that set constraint, for the log
	tools      *toolUse // tool calls to parse from the output
}

// Bounds of fields with no flag.
const (
	maxChoices    = 64  // prompts times n, where MaxN is lower
	maxStops      = 16  // stop strings
	maxStopBytes  = 256 // bytes of one stop string
	labelWords    = 5   // words of a request's label
	labelMaxRunes = 40
)

// parse checks a completion request's fields and tokenizes its prompt.
func (s *Server) parse(f fields, isChat bool) (*genRequest, *apiError) {
	g := &genRequest{chat: isChat, n: 1}
	if _, e := f.str("model"); e != nil {
		return nil, e
	}
	if e := checkUnsupported(f); e != nil {
		return nil, e
	}
	if e := s.parseStructured(f, g); e != nil {
		return nil, e
	}
	var text string
	var e *apiError
	if isChat {
		text, e = s.chatPrompt(f, g)
	} else {
		text, e = s.textPrompts(f, g)
	}
	if e != nil {
		return nil, e
	}
	g.label = label(text)

	if n, ok, e := f.integer("n"); e != nil {
		return nil, e
	} else if ok {
		if n < 1 || n > int64(s.limits.MaxN) {
			return nil, badRequest("n", "", "n is %d; it must be from 1 to %d", n, s.limits.MaxN)
		}
		g.n = int(n)
	}
	if c := len(g.prompts) * g.n; c > max(maxChoices, s.limits.MaxN) {
		return nil, badRequest("n", "", "%d prompts with n = %d make %d choices; at most %d", len(g.prompts), g.n, c, max(maxChoices, s.limits.MaxN))
	}
	if e := s.parseMaxTokens(f, g); e != nil {
		return nil, e
	}
	if e := parseStop(f, g); e != nil {
		return nil, e
	}
	if e := s.parseSampling(f, g); e != nil {
		return nil, e
	}
	var err *apiError
	if g.stream, err = f.boolean("stream"); err != nil {
		return nil, err
	}
	if f.has("stream_options") {
		var so fields
		if _, e := f.decode("stream_options", "an object", &so); e != nil {
			return nil, e
		}
		if !g.stream {
			return nil, badRequest("stream_options", "", "stream_options can only be given with stream: true")
		}
		var e *apiError
		if g.includeUsage, e = so.boolean("include_usage"); e != nil {
			e.Message = "stream_options." + e.Message
			e.Param = strp("stream_options.include_usage")
			return nil, e
		}
	}
	return g, s.checkFits(g)
}

// parseStructured reads the fields that constrain the output:
// response_format, guided_json/guided_regex/guided_choice and (chat)
// tools with tool_choice.
func (s *Server) parseStructured(f fields, g *genRequest) *apiError {
	schema, e := parseFormat(f, g)
	if e != nil {
		return e
	}
	if !g.chat {
		for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls"} {
			if f.has(k) {
				return badRequest(k, "", "%s is for /v1/chat/completions", k)
			}
		}
		return nil
	}
	t, e := parseTools(f, s.form.SupportsTools(), s.form.Source())
	if e != nil || t == nil {
		return e
	}
	switch g.format {
	case "", "json_schema", "guided_json":
		t.response = schema
	case "json_object":
		t.response = json.RawMessage(`{"type":"object"}`)
	default:
		return badRequest(g.format, "", "%s cannot be combined with tools", g.format)
	}
	c, err := t.grammar()
	if err != nil {
		return badRequest("tools", "invalid_schema", "tools: %v", err)
	}
	g.constraint, g.tools = c, t
	g.format = "tools"
	return nil
}

// parseMaxTokens reads max_completion_tokens (chat) or max_tokens.
func (s *Server) parseMaxTokens(f fields, g *genRequest) *apiError {
	name := "max_tokens"
	if g.chat && f.has("max_completion_tokens") {
		name = "max_completion_tokens"
	}
	n, ok, e := f.integer(name)
	if e != nil || !ok {
		return e
	}
	limit := s.maxTokensLimit()
	switch {
	case n < 1:
		return badRequest(name, "", "%s is %d; it must be at least 1", name, n)
	case n > int64(limit):
		return badRequest(name, "", "%s is %d; this server allows at most %d", name, n, limit)
	}
	g.maxTokens = int(n)
	return nil
}

func parseStop(f fields, g *genRequest) *apiError {
	if !f.has("stop") {
		return nil
	}
	var one string
	if err := json.Unmarshal(f["stop"], &one); err == nil {
		g.stop = []string{one}
	} else if _, e := f.decode("stop", "a string or an array of strings", &g.stop); e != nil {
		return e
	}
	if len(g.stop) > maxStops {
		return badRequest("stop", "", "stop has %d strings; at most %d", len(g.stop), maxStops)
	}
	for _, st := range g.stop {
		if st == "" || len(st) > maxStopBytes {
			return badRequest("stop", "", "a stop string must have 1 to %d bytes", maxStopBytes)
		}
	}
	return nil
}

// parseSampling reads the sampling fields over llama.cpp's defaults
// (sample.DefaultParams), as llama.cpp's server does; a missing seed is
// drawn at random.
func (s *Server) parseSampling(f fields, g *genRequest) *apiError {
	sp := sample.DefaultParams()
	sp.Seed = rand.Uint64()
	type real struct {
		name   string
		lo, hi float64
		loOpen bool
		dst    *float32
	}
	for _, r := range []real{
		{"temperature", 0, 2, false, &sp.Temperature},
		{"top_p", 0, 1, true, &sp.TopP},
		{"min_p", 0, 1, false, &sp.MinP},
		{"presence_penalty", -2, 2, false, &sp.PresencePenalty},
		{"frequency_penalty", -2, 2, false, &sp.FrequencyPenalty},
		{"repetition_penalty", 0, 100, true, &sp.RepeatPenalty},
	} {
		x, ok, e := f.number(r.name)
		if e != nil {
			return e
		}
		if !ok {
			continue
		}
		if !(x >= r.lo && x <= r.hi) || (r.loOpen && x == r.lo) {
			rng := fmt.Sprintf("from %g to %g", r.lo, r.hi)
			if r.loOpen {
				rng = fmt.Sprintf("above %g and at most %g", r.lo, r.hi)
			}
			return badRequest(r.name, "", "%s is %g; it must be %s", r.name, x, rng)
		}
		*r.dst = float32(x)
	}
	if k, ok, e := f.integer("top_k"); e != nil {
		return e
	} else if ok {
		if k < -1 {
			return badRequest("top_k", "", "top_k is %d; it must be -1 or 0 (off) or a positive number of tokens", k)
		}
		sp.TopK = int(min(max(k, 0), int64(s.e.Model().Vocab)))
	}
	if seed, ok, e := f.integer("seed"); e != nil {
		return e
	} else if ok {
		sp.Seed = uint64(seed)
	}
	if err := sp.Validate(); err != nil {
		return badRequest("", "", "sampling: %v", err)
	}
	g.sampling = sp
	return nil
}

// chatPrompt renders messages through the model's chat template and
// returns the last user message's text (for the label).
func (s *Server) chatPrompt(f fields, g *genRequest) (string, *apiError) {
	if !f.has("messages") {
		return "", badRequest("messages", "", "messages is required")
	}
	var raws []json.RawMessage
	if _, e := f.decode("messages", "an array of messages", &raws); e != nil {
		return "", e
	}
	if len(raws) == 0 {
		return "", badRequest("messages", "", "messages is empty")
	}
	turns := make([]chat.Turn, len(raws))
	last := ""
	for i, raw := range raws {
		var mf fields
		if err := json.Unmarshal(raw, &mf); err != nil || mf == nil {
			return "", badRequest(fmt.Sprintf("messages[%d]", i), "invalid_type", "messages[%d] must be an object", i)
		}
		role, e := mf.str("role")
		if e != nil || role == "" {
			return "", badRequest(fmt.Sprintf("messages[%d].role", i), "invalid_type", "messages[%d].role must be a non-empty string", i)
		}
		if role == "developer" {
			role = "system"
		}
		content, ae := messageContent(mf, i)
		if ae != nil {
			return "", ae
		}
		if content == "" && role == "assistant" && mf.has("tool_calls") {
			content = g.tools.callsText(mf["tool_calls"])
		}
		turns[i] = chat.Turn{Role: role, Content: content}
		if role == "user" {
			last = content
		}
	}
	opt := chat.Options{AddGenerationPrompt: true}
	if t := g.tools; t != nil {
		if t.native {
			opt.Tools = t.list
		}
		// As llama.cpp's generic format does: the instruction joins the
		// system message, or comes first as one.
		switch in := t.instruction(); {
		case in == "":
		case turns[0].Role == "system":
			turns[0].Content += "\n\n" + in
		default:
			turns = append([]chat.Turn{{Role: "system", Content: in}}, turns...)
		}
	}
	s.replies.fill(turns)
	ids, err := s.form.PromptIDs(turns, opt, s.e.Tokenizer(), true)
	if err != nil {
		return "", badRequest("messages", "", "the chat template could not render the messages: %v", err)
	}
	g.prompts, g.turns = [][]int{ids}, turns
	return last, nil
}

// messageContent reads a message's content: a string, an array of text
// parts, or null.
func messageContent(mf fields, i int) (string, *apiError) {
	param := fmt.Sprintf("messages[%d].content", i)
	if !mf.has("content") {
		return "", nil
	}
	var str string
	if err := json.Unmarshal(mf["content"], &str); err == nil {
		return str, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(mf["content"], &parts); err != nil {
		return "", badRequest(param, "invalid_type", "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badRequest(param, "", "%s[%d]: only parts of type text (with a text string) are supported", param, j)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// textPrompts reads /v1/completions' prompt: a string, an array of
// strings, an array of token ids or an array of arrays of token ids.
func (s *Server) textPrompts(f fields, g *genRequest) (string, *apiError) {
	if !f.has("prompt") {
		return "", badRequest("prompt", "", "prompt is required")
	}
	raw := f["prompt"]
	tok := s.e.Tokenizer()
	var one string
	var many []string
	var ids []int
	var idss [][]int
	first := ""
	switch {
	case json.Unmarshal(raw, &one) == nil:
		g.prompts, first = [][]int{tok.Encode(one, true, false)}, one
	case json.Unmarshal(raw, &many) == nil && len(many) > 0:
		for _, p := range many {
			g.prompts = append(g.prompts, tok.Encode(p, true, false))
		}
		first = many[0]
	case json.Unmarshal(raw, &ids) == nil && len(ids) > 0:
		g.prompts = [][]int{ids}
	case json.Unmarshal(raw, &idss) == nil && len(idss) > 0:
		g.prompts = idss
	default:
		return "", badRequest("prompt", "invalid_type", "prompt must be a string, an array of strings, an array of token ids or an array of arrays of token ids, not empty")
	}
	if len(g.prompts) > s.limits.MaxN {
		return "", badRequest("prompt", "", "prompt holds %d prompts; at most %d", len(g.prompts), s.limits.MaxN)
	}
	vocab := s.e.Model().Vocab
	for i, p := range g.prompts {
		if len(p) == 0 {
			return "", badRequest("prompt", "", "prompt %d has no tokens", i)
		}
		for _, id := range p {
			if id < 0 || id >= vocab {
				return "", badRequest("prompt", "", "token id %d is outside the vocabulary (0 to %d)", id, vocab-1)
			}
		}
	}
	if first == "" && len(g.prompts) > 0 {
		first = tok.Decode(g.prompts[0])
	}
	return first, nil
}

// checkFits refuses prompts the context or the limits cannot take, with
// vLLM's wording for the context, and sets the tokens each may generate.
func (s *Server) checkFits(g *genRequest) *apiError {
	ctx := s.context()
	promptLimit := s.promptLimit()
	param := "prompt"
	if g.chat {
		param = "messages"
	}
	stop := s.e.Config().Cache.Overflow == kvcache.Stop
	for _, p := range g.prompts {
		n := len(p)
		switch {
		case n >= ctx && stop:
			return badRequest(param, "context_length_exceeded", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input %s.", ctx, n, param)
		case n > promptLimit:
			return badRequest(param, "context_length_exceeded", "The prompt has %d tokens; this server allows at most %d prompt tokens.", n, promptLimit)
		case stop && g.maxTokens > 0 && n+g.maxTokens > ctx:
			return badRequest(param, "context_length_exceeded", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.", ctx, n+g.maxTokens, n, param, g.maxTokens, param)
		}
	}
	return nil
}

// tokensFor is how many tokens a prompt of n tokens may generate: the
// request's max_tokens, else what the context leaves (at most the limit).
func (s *Server) tokensFor(g *genRequest, n int) int {
	if g.maxTokens > 0 {
		return g.maxTokens
	}
	limit := s.maxTokensLimit()
	if s.e.Config().Cache.Overflow == kvcache.Stop {
		limit = min(limit, s.context()-n)
	}
	return max(limit, 1)
}

func (s *Server) maxTokensLimit() int {
	if s.limits.MaxTokens > 0 {
		return s.limits.MaxTokens
	}
	return s.context()
}

func (s *Server) promptLimit() int {
	if s.limits.MaxPromptTokens > 0 {
		return s.limits.MaxPromptTokens
	}
	return s.context()
}

// label names a request in snapshots and events: "API: " and the first
// words of its text.
func label(text string) string {
	words := strings.Fields(text)
	cut := len(words) > labelWords
	words = words[:min(len(words), labelWords)]
	l := strings.Join(words, " ")
	if utf8.RuneCountInString(l) > labelMaxRunes {
		l = string([]rune(l)[:labelMaxRunes])
		cut = true
	}
	if l == "" {
		return "API: request"
	}
	if cut {
		l += "…"
	}
	return "API: " + l
}
