package chat

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// chatML is the ChatML template of cases.json's first case.
const chatML = `{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

func TestSegments(t *testing.T) {
	tests := []struct {
		name     string
		template string
		bos, eos string
		msgs     []Message
		want     []Segment
	}{
		{
			name:     "control token typed by the user stays text",
			template: chatML,
			msgs:     []Message{{"user", "say <|im_end|> now"}},
			want: []Segment{
				{"<|im_start|>user\n", true},
				{"say <|im_end|> now", false},
				{"<|im_end|>\n<|im_start|>assistant\n", true},
			},
		},
		{
			name:     "a content that is only a control token",
			template: chatML,
			msgs:     []Message{{"system", "<|im_end|>"}, {"user", "<|im_start|>system"}},
			want: []Segment{
				{"<|im_start|>system\n", true},
				{"<|im_end|>", false},
				{"<|im_end|>\n<|im_start|>user\n", true},
				{"<|im_start|>system", false},
				{"<|im_end|>\n<|im_start|>assistant\n", true},
			},
		},
		{
			name:     "trimmed content: the white space the template dropped is gone",
			template: `{% for m in messages %}[{{ m.content | trim }}]{% endfor %}`,
			msgs:     []Message{{"user", "  a b  "}, {"assistant", "\n c\n"}},
			want:     []Segment{{"[", true}, {"a b", false}, {"][", true}, {"c", false}, {"]", true}},
		},
		{
			name:     "untrimmed white space of a content is template text",
			template: `{% for m in messages %}[{{ m.content }}]{% endfor %}`,
			msgs:     []Message{{"user", "  a  "}},
			want:     []Segment{{"[  ", true}, {"a", false}, {"  ]", true}},
		},
		{
			name:     "end of a content kept by split",
			template: `{% for m in messages %}<a>{{ m.content.split('</think>')[-1] }}</a>{% endfor %}`,
			msgs:     []Message{{"assistant", "<think>hmm</think>The answer"}},
			want:     []Segment{{"<a>", true}, {"The answer", false}, {"</a>", true}},
		},
		{
			name:     "start of a content kept by split",
			template: `{% for m in messages %}<a>{{ m.content.split('|')[0] }}</a>{% endfor %}`,
			msgs:     []Message{{"user", "left|right"}},
			want:     []Segment{{"<a>", true}, {"left", false}, {"</a>", true}},
		},
		{
			name:     "a BOS the template writes first is cut, one inside stays",
			template: `{% for m in messages %}{{ bos_token }}{{ m.content }}{{ eos_token }}{% endfor %}`,
			bos:      "<s>", eos: "</s>",
			msgs: []Message{{"user", "a"}, {"user", "b"}},
			want: []Segment{{"a", false}, {"</s><s>", true}, {"b", false}},
		},
		{
			name:     "a BOS typed by the user is not cut",
			template: `{% for m in messages %}{{ m.content }}{% endfor %}`,
			bos:      "<s>", eos: "</s>",
			msgs: []Message{{"user", "<s>hi</s>"}},
			want: []Segment{{"<s>hi</s>", false}},
		},
		{
			name:     "empty contents make no segments",
			template: chatML,
			msgs:     []Message{{"user", ""}},
			want:     []Segment{{"<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n", true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.template, tt.bos, tt.eos)
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.Render(tt.msgs, Options{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if !p.Tracked {
				t.Fatalf("not tracked: %+v", p.Segments)
			}
			if !equalSegments(p.Segments, tt.want) {
				t.Fatalf("segments\n got: %+v\nwant: %+v", p.Segments, tt.want)
			}
		})
	}
}

func equalSegments(a, b []Segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUntracked: a template whose output depends on the content's exact
// characters gives the whole text as one Special segment, as llama.cpp
// would tokenize it.
func TestUntracked(t *testing.T) {
	tests := []struct {
		name, template string
		msgs           []Message
		want           string
	}{
		{"startswith", `{% for m in messages %}{% if m.content.startswith('/') %}cmd:{% endif %}{{ m.content }}{% endfor %}`, []Message{{"user", "/help"}}, "cmd:/help"},
		{"length", `{{ messages[0].content | length }}`, []Message{{"user", "abc"}}, "3"},
		{"marker runes in a content", chatML, []Message{{"user", "a\uE000b"}}, "<|im_start|>user\na\uE000b<|im_end|>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.template, "", "")
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.Render(tt.msgs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Tracked || len(p.Segments) != 1 || !p.Segments[0].Special || p.Text() != tt.want {
				t.Fatalf("got %+v (tracked %v), want one special segment %q", p.Segments, p.Tracked, tt.want)
			}
		})
	}
}

func TestSystemPolyfill(t *testing.T) {
	const userOnly = `{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}`
	const dropsSystem = `{% for m in messages %}{% if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}`
	tests := []struct {
		name, template string
		msgs           []Message
		keeps          bool
		want           string
	}{
		{"raises", userOnly, []Message{{"system", "S"}, {"user", "U"}, {"assistant", "A"}}, false, "<user>S\nU<assistant>A"},
		{"drops", dropsSystem, []Message{{"system", "S"}, {"user", "U"}}, false, "<user>S\nU"},
		{"two system messages", dropsSystem, []Message{{"system", "S1"}, {"system", "S2"}, {"user", "U"}}, false, "<user>S1\nS2\nU"},
		{"system before assistant", dropsSystem, []Message{{"system", "S"}, {"assistant", "A"}}, false, "<user>S<assistant>A"},
		{"system alone", dropsSystem, []Message{{"system", "S"}}, false, "<user>S"},
		{"empty user content", dropsSystem, []Message{{"system", "S"}, {"user", ""}}, false, "<user>S"},
		{"keeps", chatML, []Message{{"system", "S"}, {"user", "U"}}, true, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.template, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if f.SystemRole() != tt.keeps {
				t.Fatalf("SystemRole() = %v, want %v", f.SystemRole(), tt.keeps)
			}
			p, err := f.Render(tt.msgs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Text() != tt.want {
				t.Fatalf("got %q, want %q", p.Text(), tt.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name, template string
		msgs           []Message
		wantErr        string
	}{
		{"raise_exception", `{{ raise_exception('Conversation roles must alternate') }}`, []Message{{"user", "x"}}, "chat template raised an exception: Conversation roles must alternate"},
		{"raise_exception in a loop", `{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant ' ~ loop.index) }}{% endif %}{% endfor %}`, []Message{{"user", "x"}, {"assistant", "y"}}, "chat template raised an exception: no assistant 2"},
		{"call of an undefined name", `{{ nonexistent() }}`, []Message{{"user", "x"}}, "chat template failed:"},
		{"huge range", `{% for i in range(1000000000) %}x{% endfor %}`, []Message{{"user", "x"}}, "range: 1000000000 numbers asked for"},
		{"huge range of a negative step", `{{ range(9223372036854775807, -9223372036854775807, -1) }}`, []Message{{"user", "x"}}, "numbers asked for"},
		{"nested ranges past the budget", `{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}`, []Message{{"user", "x"}}, "range: 1000000 numbers asked for, 48576 left"},
		{"range of a string", `{{ range('a') }}`, []Message{{"user", "x"}}, "range: argument 1 is"},
		{"strftime_now without a format", `{{ strftime_now() }}`, []Message{{"user", "x"}}, "strftime_now: want one format string"},
		{"message without a role", chatML, []Message{{"", "x"}}, "message 0 has no role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.template, "", "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Render(tt.msgs, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, tt.wantErr)
			}
			if strings.HasPrefix(tt.wantErr, "chat template raised") {
				if _, ok := errors.AsType[*RaiseError](err); !ok {
					t.Fatalf("%T is not a *RaiseError", err)
				}
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct{ name, template string }{
		{"unclosed tag", `{% for m in messages %}{{ m.content }`},
		{"unclosed block", `{% for m in messages %}{{ m.content }}`},
		{"unknown statement", `{% frobnicate %}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewTemplate(NameFromFile, tt.template, "", ""); err == nil || !strings.HasPrefix(err.Error(), "chat template does not compile") {
				t.Fatalf("error %v, want one saying it does not compile", err)
			}
		})
	}
}

func TestRenderTimeout(t *testing.T) {
	old := renderTimeout
	renderTimeout = 50 * time.Millisecond
	defer func() { renderTimeout = old }()
	// 4000² iterations over a content's characters: seconds, not 50ms.
	f, err := NewTemplate(NameFromFile, `{% for a in messages[0].content %}{% for b in messages[0].content %}{% endfor %}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Render([]Message{{"user", strings.Repeat("x", 4000)}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "did not finish rendering") {
		t.Fatalf("error %v, want a time-out", err)
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, time.July, 6, 15, 4, 5, 0, time.UTC)
	tests := []struct{ format, want string }{
		{"%d %b %Y", "06 Jul 2024"},
		{"%Y-%m-%d %H:%M:%S", "2024-07-06 15:04:05"},
		{"%A %B %e, %I %p", "Saturday July  6, 03 PM"},
		{"%j %y %%Y", "188 24 %Y"},
		{"2006 Jan %q", "2006 Jan %q"},
		{"trailing %", "trailing %"},
	}
	for _, tt := range tests {
		if got := strftime(at, tt.format); got != tt.want {
			t.Errorf("strftime(%q) = %q, want %q", tt.format, got, tt.want)
		}
	}
}

func TestVariables(t *testing.T) {
	at := func() time.Time { return time.Date(2024, time.July, 26, 0, 0, 0, 0, time.UTC) }
	yes, no := true, false
	const thinking = `{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}{% if enable_thinking is not defined %}undefined{% endif %}`
	tests := []struct {
		name, template string
		opt            Options
		want           string
	}{
		{"strftime_now uses Now", `Today Date: {{ strftime_now("%d %b %Y") }}`, Options{Now: at}, "Today Date: 26 Jul 2024"},
		{"enable_thinking false", thinking, Options{EnableThinking: &no}, "<think></think>"},
		{"enable_thinking true", thinking, Options{EnableThinking: &yes}, ""},
		{"enable_thinking unset", thinking, Options{}, "undefined"},
		{"add_generation_prompt", `{% if add_generation_prompt %}go{% endif %}`, Options{AddGenerationPrompt: true}, "go"},
		{"no generation prompt", `{% if add_generation_prompt %}go{% endif %}`, Options{}, ""},
		{"bos and eos in the middle", `[{{ bos_token }}|{{ eos_token }}]`, Options{}, "[<s>|</s>]"},
		{"range", `{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}`, Options{}, "012531"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.template, "<s>", "</s>")
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.Render([]Message{{"user", "x"}}, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if p.Text() != tt.want {
				t.Fatalf("got %q, want %q", p.Text(), tt.want)
			}
		})
	}
}

// vocabGGUF writes a GGUF file of architecture arch whose BPE vocabulary
// has the ordinary tokens a..z and the given control tokens, and returns it
// with its tokenizer.
func vocabGGUF(t *testing.T, arch string, control []string, template string) (*gguf.File, *tokenizer.Tokenizer) {
	t.Helper()
	var tokens []string
	var types []int32
	for c := 'a'; c <= 'z'; c++ {
		tokens = append(tokens, string(c))
		types = append(types, tokenizer.TypeNormal)
	}
	for _, s := range append([]string{"<bos>", "<eos>"}, control...) {
		tokens = append(tokens, s)
		types = append(types, tokenizer.TypeControl)
	}
	kvs := []gguf.KV{
		gguf.NewKV("general.architecture", arch),
		gguf.NewKV("tokenizer.ggml.model", "gpt2"),
		gguf.NewKV("tokenizer.ggml.tokens", tokens),
		gguf.NewKV("tokenizer.ggml.token_type", types),
		gguf.NewKV("tokenizer.ggml.merges", []string{"a b"}),
		gguf.NewKV("tokenizer.ggml.bos_token_id", uint32(26)),
		gguf.NewKV("tokenizer.ggml.eos_token_id", uint32(27)),
	}
	if template != "" {
		kvs = append(kvs, gguf.NewKV(KeyChatTemplate, template))
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, tok
}

// TestFallbacks chooses the format of files without a template from their
// architecture and vocabulary, and renders a conversation in it.
func TestFallbacks(t *testing.T) {
	conv := []Message{{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}}
	tests := []struct {
		name     string
		arch     string
		control  []string
		template string
		wantName string
		want     string
	}{
		{"ChatML", "qwen2", []string{"<|im_start|>", "<|im_end|>"}, "", "ChatML",
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"},
		{"Llama 3", "llama", []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "", "Llama 3",
			"<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"Gemma merges the system message", "gemma2", []string{"<start_of_turn>", "<end_of_turn>"}, "", "Gemma",
			"<start_of_turn>user\nS\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n<start_of_turn>user\nV<end_of_turn>\n<start_of_turn>model\n"},
		{"Phi-3", "phi3", []string{"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"}, "", "Phi-3",
			"<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\nA<|end|>\n<|user|>\nV<|end|>\n<|assistant|>\n"},
		{"Llama 2", "llama", []string{"[INST]", "[/INST]"}, "", "Llama 2",
			"[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A <eos><bos>[INST] V [/INST]"},
		{"architecture picks among several", "llama", []string{"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "", "Llama 3", ""},
		{"first in order when no architecture prefers", "mamba", []string{"[INST]", "[/INST]", "<start_of_turn>", "<end_of_turn>"}, "", "Gemma", ""},
		{"a partial set is not a format", "llama", []string{"<|im_start|>"}, "", NamePlain, "SUAV"},
		{"no control tokens: plain completion", "llama", nil, "", NamePlain, "SUAV"},
		{"the file's template wins", "qwen2", []string{"<|im_start|>", "<|im_end|>"}, `{% for m in messages %}{{ m.role[0] }}{{ m.content }}{% endfor %}`, NameFromFile, "sSuUaAuV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, tok := vocabGGUF(t, tt.arch, tt.control, tt.template)
			f, err := FromGGUF(file, tok)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name() != tt.wantName {
				t.Fatalf("Name() = %q, want %q", f.Name(), tt.wantName)
			}
			if wantMode := map[bool]Mode{true: ModeCompletion, false: ModeChat}[tt.wantName == NamePlain]; f.Mode() != wantMode {
				t.Fatalf("Mode() = %v, want %v", f.Mode(), wantMode)
			}
			p, err := f.Render(conv, Options{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && p.Text() != tt.want {
				t.Fatalf("got  %q\nwant %q", p.Text(), tt.want)
			}
			for _, m := range conv[1:] {
				if !hasPlainSegment(p, m.Content) {
					t.Errorf("%q not in a message-text segment: %+v", m.Content, p.Segments)
				}
			}
			if got, want := Tokenize(p, tok, false), tok.Encode(p.Text(), false, true); !slices.Equal(got, want) {
				t.Errorf("Tokenize gives %v, the whole text %v", got, want)
			}
		})
	}
}

// TestSharedModels: the shared test models have no template and no chat
// tokens, so they are plain completion.
func TestSharedModels(t *testing.T) {
	for _, rel := range []string{"models/stories260K.gguf", "models/llama-2-tiny-random.gguf"} {
		t.Run(rel, func(t *testing.T) {
			file, err := gguf.Open(testshared.Path(t, rel))
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			tok, err := tokenizer.FromGGUF(file)
			if err != nil {
				t.Fatal(err)
			}
			f, err := FromGGUF(file, tok)
			if err != nil {
				t.Fatal(err)
			}
			if f.Mode() != ModeCompletion || f.Name() != NamePlain {
				t.Fatalf("got %v %q, want plain completion", f.Mode(), f.Name())
			}
			p, err := f.Render([]Message{{"user", "Once upon a time <s>"}}, Options{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Segments) != 1 || p.Segments[0].Special || p.Text() != "Once upon a time <s>" {
				t.Fatalf("got %+v", p.Segments)
			}
		})
	}
}

func TestBuiltin(t *testing.T) {
	for _, name := range Builtins() {
		f, err := Builtin(name, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.Name() != name || f.Mode() != ModeChat || f.Source() == "" {
			t.Fatalf("%s: got %q %v", name, f.Name(), f.Mode())
		}
	}
	if _, err := Builtin("Vicuna", "", ""); err == nil || !strings.Contains(err.Error(), "ChatML") {
		t.Fatalf("error %v, want one listing the known formats", err)
	}
}

// TestConcurrentRender renders with one Formatter from several goroutines
// (run under -race).
func TestConcurrentRender(t *testing.T) {
	f, err := NewTemplate(NameFromFile, chatML, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				p, err := f.Render([]Message{{"user", "hi"}}, Options{AddGenerationPrompt: true})
				if err != nil {
					errs <- err
					return
				}
				if p.Text() != want {
					errs <- errors.New("wrong text " + p.Text())
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
