package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"

	"kvscope/engine/gguf"
)

// Mode says how a Formatter turns a conversation into a prompt.
type Mode int

const (
	// ModeChat renders a chat template.
	ModeChat Mode = iota
	// ModeCompletion joins the messages' text, for models that are not
	// chat models.
	ModeCompletion
)

// String returns "chat" or "plain completion".
func (m Mode) String() string {
	if m == ModeCompletion {
		return NamePlain
	}
	return "chat"
}

// Names a Formatter reports besides the built-in templates' names.
const (
	// NameFromFile is the name of a template read from the model file.
	NameFromFile = "from the file"
	// NamePlain is the name of plain completion.
	NamePlain = "plain completion"
)

// Metadata keys that New reads.
const (
	KeyChatTemplate = "tokenizer.chat_template"
	KeyArchitecture = "general.architecture"
)

// maxMessages bounds a conversation: each message's content gets a marker
// holding its index in one of 65,534 private-use code points.
const maxMessages = markerIndexes

// renderTimeout is how long one rendering may take before Render gives up.
var renderTimeout = 10 * time.Second

// Vocab is what a Formatter needs from a tokenizer: token texts and the
// BOS and EOS ids. *tokenizer.Tokenizer (package kvscope/engine/tokenizer)
// implements it.
type Vocab interface {
	// Token returns the vocabulary text of id ("" if out of range).
	Token(id int) string
	// ID returns the id of the token whose vocabulary text is text.
	ID(text string) (int, bool)
	// BOS returns the beginning-of-sequence id, -1 if none.
	BOS() int
	// EOS returns the end-of-sequence id, -1 if none.
	EOS() int
}

// Model is what New chooses a Formatter from: a model's string metadata
// (KeyChatTemplate, KeyArchitecture) and its vocabulary.
type Model interface {
	Vocab
	// Metadata returns the string value of a metadata key and whether the
	// key exists with a string value.
	Metadata(key string) (string, bool)
}

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user" or "assistant" (templates may know others).
	Role string `json:"role"`
	// Content is the turn's text.
	Content string `json:"content"`
}

// Options are the per-conversation settings of one Render.
type Options struct {
	// AddGenerationPrompt ends the prompt with the start of an assistant
	// turn, for the model to write.
	AddGenerationPrompt bool
	// EnableThinking, when not nil, is passed as enable_thinking (Qwen 3
	// and similar templates turn their thinking block off with false);
	// nil leaves the variable undefined, which such templates read as on.
	EnableThinking *bool
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
	// Tools, when not nil, is passed as the template's tools variable: the
	// OpenAI tools list as decoded JSON ([]any of map[string]any, numbers
	// as json.Number), as llama.cpp passes it.
	Tools []any
}

// Segment is a piece of a prompt.
type Segment struct {
	// Text is the piece's text.
	Text string
	// Special says the text is the template's: it is tokenized with
	// special-token parsing on. Message text is not (Special false), so
	// control-token texts in it stay text.
	Special bool
}

// Prompt is a rendered conversation.
type Prompt struct {
	// Segments are the prompt's pieces in order; adjacent ones differ in
	// Special, and none is empty.
	Segments []Segment
	// Tracked says message text could be told apart from template text.
	// When false (a template whose output depends on the content in a way
	// the markers change), Segments is one Special segment.
	Tracked bool
}

// Text returns the whole prompt.
func (p *Prompt) Text() string {
	var b strings.Builder
	for _, s := range p.Segments {
		b.WriteString(s.Text)
	}
	return b.String()
}

// Formatter turns conversations into prompts for one model. It is immutable
// and safe for concurrent use.
type Formatter struct {
	mode       Mode
	name       string
	source     string
	bos, eos   string
	tmpl       *jinja.Template
	systemRole bool
	literals   []string // the template's string literals (see splitMarked)
}

// Mode returns how the Formatter makes prompts.
func (f *Formatter) Mode() Mode { return f.mode }

// Name returns which template is used: NameFromFile, a built-in template's
// name (see Builtins) or NamePlain.
func (f *Formatter) Name() string { return f.name }

// Source returns the Jinja source of the template ("" for plain completion).
func (f *Formatter) Source() string { return f.source }

// SupportsTools reports whether the chat template reads a tools
// variable (Options.Tools), as templates with tool calling do.
func (f *Formatter) SupportsTools() bool {
	return f.tmpl != nil && strings.Contains(f.source, "tools")
}

// SystemRole reports whether the template keeps system messages; when it
// does not, Render merges them into the first user message.
func (f *Formatter) SystemRole() bool { return f.systemRole }

// Plain returns the Formatter of plain completion: a prompt is its messages'
// contents joined, all of it message text.
func Plain() *Formatter { return &Formatter{mode: ModeCompletion, name: NamePlain} }

// NewTemplate compiles a chat template named name with the texts of the BOS
// and EOS tokens ("" for none), and finds by a trial render whether it keeps
// the system role.
func NewTemplate(name, source, bos, eos string) (*Formatter, error) {
	guarded, err := rewrite(source)
	if err != nil {
		return nil, err
	}
	t, err := compile(guarded)
	if err != nil {
		return nil, err
	}
	f := &Formatter{mode: ModeChat, name: name, source: source, bos: bos, eos: eos, tmpl: t, literals: stringLiterals(source)}
	f.systemRole = f.keepsSystem()
	return f, nil
}

// compile compiles a template, turning a panic of the parser into an error.
func compile(source string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat template does not compile: %v", r)
		}
	}()
	t, err = jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template does not compile: %w", err)
	}
	return t, nil
}

// systemProbe is the trial system message's text (minja's).
const systemProbe = "<System Needle>"

// keepsSystem renders a probe system message and a user message and
// reports whether the output holds the probe's text.
func (f *Formatter) keepsSystem() bool {
	out, err := f.render([]Message{{"system", systemProbe}, {"user", "Hey"}}, Options{}, nil)
	return err == nil && strings.Contains(out, systemProbe)
}

// New chooses the Formatter of a model: its chat template when the metadata
// has one, otherwise a built-in template its vocabulary's control tokens
// call for (see Builtins), otherwise plain completion. A template that does
// not compile is an error (Plain remains a choice).
func New(m Model) (*Formatter, error) {
	bos, eos := tokenText(m, m.BOS()), tokenText(m, m.EOS())
	if src, ok := m.Metadata(KeyChatTemplate); ok && strings.TrimSpace(src) != "" {
		f, err := NewTemplate(NameFromFile, src, bos, eos)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyChatTemplate, err)
		}
		return f, nil
	}
	arch, _ := m.Metadata(KeyArchitecture)
	if b := chooseBuiltin(arch, m); b != nil {
		return NewTemplate(b.name, b.source, bos, eos)
	}
	return Plain(), nil
}

// tokenText is the text of id, "" for none.
func tokenText(v Vocab, id int) string {
	if id < 0 {
		return ""
	}
	return v.Token(id)
}

// FromGGUF is New for a GGUF file's metadata and the vocabulary of the
// tokenizer built from it (a *tokenizer.Tokenizer).
func FromGGUF(f *gguf.File, v Vocab) (*Formatter, error) {
	return New(ggufModel{f, v})
}

// ggufModel is a Model over a GGUF file and a vocabulary.
type ggufModel struct {
	f *gguf.File
	Vocab
}

func (g ggufModel) Metadata(key string) (string, bool) { return g.f.String(key) }

// RaiseError is the error of a template's raise_exception call.
type RaiseError struct {
	// Message is the template's message.
	Message string
}

// Error returns the message with a prefix saying the template raised it.
// Error returns the message with a prefix saying the template raised it.
func (e *RaiseError) Error() string { return "chat template raised an exception: " + e.Message }

// Render makes the prompt of msgs.
func (f *Formatter) Render(msgs []Message, opt Options) (*Prompt, error) {
	if len(msgs) > maxMessages {
		return nil, fmt.Errorf("%d messages: at most %d can be rendered", len(msgs), maxMessages)
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("message %d has no role", i)
		}
	}
	if f.mode == ModeCompletion {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Content)
		}
		p := &Prompt{Tracked: true}
		if b.Len() > 0 {
			p.Segments = []Segment{{Text: b.String()}}
		}
		return p, nil
	}
	ps, ok, _, err := f.pieces(msgs, opt)
	if err != nil {
		return nil, err
	}
	return &Prompt{Segments: join(ps), Tracked: ok}, nil
}

// pieces renders msgs (a chat template's) into pieces that say whose text
// each is, with BOS and EOS cut as Render cuts them. It reports whether
// message text was told apart, and for each message rendered (msgs, or,
// where the template drops the system role, msgs merged: see mergeSystem)
// the index in msgs of the message it is unchanged, -1 for one made or
// changed by the merge; the pieces' msg fields index the rendered ones.
func (f *Formatter) pieces(msgs []Message, opt Options) ([]owned, bool, []int, error) {
	var origin []int
	if f.systemRole {
		origin = make([]int, len(msgs))
		for i := range origin {
			origin[i] = i
		}
	} else {
		msgs, origin = mergeSystem(msgs)
	}
	plain, err := f.render(msgs, opt, nil)
	if err != nil {
		return nil, false, nil, err
	}
	ps, ok := f.segments(msgs, opt, plain)
	if !ok {
		ps = []owned{{Segment{Text: plain, Special: true}, -1, false}}
	}
	return cutBOSEOS(ps, f.bos, f.eos), ok, origin, nil
}

// mergeSystem merges system messages into the next user message (joined
// by a newline), as minja's system-role polyfill does; system text before
// another role, or at the end, becomes a user message of its own. It also
// returns, for each message out, the index in msgs of the message it is
// unchanged, or -1 where the merge made or changed it.
func mergeSystem(msgs []Message) ([]Message, []int) {
	out := make([]Message, 0, len(msgs))
	var origin []int
	pending := ""
	flush := func() {
		if pending != "" {
			out = append(out, Message{Role: "user", Content: pending})
			origin = append(origin, -1)
			pending = ""
		}
	}
	for i, m := range msgs {
		from := i
		switch m.Role {
		case "system":
			if pending != "" {
				pending += "\n"
			}
			pending += m.Content
			continue
		case "user":
			if pending != "" {
				if m.Content != "" {
					m.Content = pending + "\n" + m.Content
				} else {
					m.Content = pending
				}
				pending = ""
				from = -1
			}
		default:
			flush()
		}
		out = append(out, m)
		origin = append(origin, from)
	}
	flush()
	return out, origin
}

// cutBOSEOS cuts the BOS text off the start and the EOS text off the end
// of the prompt, where the template (not a message) wrote them.
func cutBOSEOS(segs []owned, bos, eos string) []owned {
	if bos != "" && len(segs) > 0 && segs[0].Special && strings.HasPrefix(segs[0].Text, bos) {
		segs[0].Text = segs[0].Text[len(bos):]
		if segs[0].Text == "" {
			segs = segs[1:]
		}
	}
	if n := len(segs); eos != "" && n > 0 && segs[n-1].Special && strings.HasSuffix(segs[n-1].Text, eos) {
		segs[n-1].Text = segs[n-1].Text[:len(segs[n-1].Text)-len(eos)]
		if segs[n-1].Text == "" {
			segs = segs[:n-1]
		}
	}
	return segs
}

// render runs the template on msgs, whose contents are replaced by
// contents when that is not nil. It returns one error for every failure:
// a raise_exception, an error of the engine, a panic inside it, or a
// rendering that runs past renderTimeout.
func (f *Formatter) render(msgs []Message, opt Options, contents []string) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f.renderNow(msgs, opt, contents)
		done <- result{out, err}
	}()
	timer := time.NewTimer(renderTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.out, r.err
	case <-timer.C:
		return "", fmt.Errorf("chat template did not finish rendering in %v", renderTimeout)
	}
}

// renderNow is render without the time limit.
func (f *Formatter) renderNow(msgs []Message, opt Options, contents []string) (out string, err error) {
	var raised *RaiseError
	budget := maxRange // numbers range may still make in this rendering
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template failed: %v", r)
		}
	}()
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		c := m.Content
		if contents != nil {
			c = contents[i]
		}
		d.AsDict().Set("content", jinja.NewString(c))
		list[i] = d
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(opt.AddGenerationPrompt),
		"bos_token":             jinja.NewString(f.bos),
		"eos_token":             jinja.NewString(f.eos),
		"raise_exception": jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			msg := "(no message)"
			if len(args) > 0 {
				msg = printValue(args[0])
			}
			raised = &RaiseError{Message: msg}
			return jinja.Undefined(), raised
		}),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Undefined(), errors.New("strftime_now: want one format string")
			}
			return jinja.NewString(strftime(now(), args[0].AsString())), nil
		}),
		"range": jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			v, err := boundedRange(args, budget)
			if err == nil {
				budget -= v.AsList().Len()
			}
			return v, err
		}),
	}
	macros := 0 // macro calls in progress
	vars[guardEnter] = jinja.NewCallable(guardEnter, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if macros++; macros > maxMacroDepth {
			return jinja.Undefined(), fmt.Errorf("macros nested more than %d calls deep (a macro that calls itself without end?)", maxMacroDepth)
		}
		return jinja.NewString(""), nil
	})
	vars[guardLeave] = jinja.NewCallable(guardLeave, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		macros--
		return jinja.NewString(""), nil
	})
	if opt.EnableThinking != nil {
		vars["enable_thinking"] = jinja.NewBool(*opt.EnableThinking)
	}
	if opt.Tools != nil {
		vars["tools"] = jinja.FromGoValue(opt.Tools)
	}
	out, err = f.tmpl.RenderValues(vars)
	if err != nil {
		if raised != nil {
			return "", raised
		}
		if re, ok := errors.AsType[*RaiseError](err); ok {
			return "", re
		}
		return "", fmt.Errorf("chat template failed: %w", err)
	}
	return out, nil
}

// printValue is a value as a template prints it: strings without quotes.
func printValue(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// maxRange bounds the numbers the range calls of one rendering make, all
// together.
const maxRange = 1 << 20

// boundedRange is Python's range (1 to 3 integer arguments), refusing to make
// more than budget numbers.
func boundedRange(args []jinja.Value, budget int) (jinja.Value, error) {
	n := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			n[i] = a.AsInt()
		case a.IsBool():
			if a.AsBool() {
				n[i] = 1
			}
		default:
			return jinja.Undefined(), fmt.Errorf("range: argument %d is %s, not an integer", i+1, a.String())
		}
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(n) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: want 1 to 3 arguments, got %d", len(n))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var count uint64
	switch {
	case step > 0 && stop > start:
		d, s := uint64(stop)-uint64(start), uint64(step)
		count = d / s
		if d%s != 0 {
			count++
		}
	case step < 0 && stop < start:
		d, s := uint64(start)-uint64(stop), uint64(-step)
		count = d / s
		if d%s != 0 {
			count++
		}
	}
	if count > uint64(budget) {
		return jinja.Undefined(), fmt.Errorf("range: %d numbers asked for, %d left of the %d one rendering may make", count, budget, maxRange)
	}
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}
