package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

// templateCases is testdata/chat-templates/cases.json.
type templateCases struct {
	Messages            []Message `json:"messages"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	Cases               []struct {
		Name          string `json:"name"`
		Template      string `json:"template"`
		ExpectedJinja string `json:"expected_jinja"`
		BOS           string `json:"bos_token"`
		EOS           string `json:"eos_token"`
	} `json:"cases"`
}

func loadCases(t *testing.T) templateCases {
	t.Helper()
	b, err := os.ReadFile(testshared.Path(t, "testdata/chat-templates/cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c templateCases
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Cases) == 0 || len(c.Messages) == 0 {
		t.Fatal("cases.json has no cases or no messages")
	}
	return c
}

// TestLlamaCppCases renders every case of llama.cpp's chat-template tests
// and wants expected_jinja exactly.
func TestLlamaCppCases(t *testing.T) {
	c := loadCases(t)
	pass := 0
	for _, tc := range c.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tc.Template, tc.BOS, tc.EOS)
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.Render(c.Messages, Options{AddGenerationPrompt: c.AddGenerationPrompt})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Text(); got != tc.ExpectedJinja {
				t.Fatalf("rendering differs\n got: %q\nwant: %q", got, tc.ExpectedJinja)
			}
			if !p.Tracked {
				t.Errorf("message text not told apart from template text")
			}
			pass++
		})
	}
	t.Logf("%d of %d llama.cpp cases render exactly", pass, len(c.Cases))
}

// TestRealTemplates renders a two-turn conversation with a system prompt
// through every real template and wants each message's content in it.
func TestRealTemplates(t *testing.T) {
	dir := testshared.Path(t, "testdata/chat-templates/jinja")
	files, err := filepath.Glob(filepath.Join(dir, "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}
	msgs := []Message{
		{"system", "You are a terse assistant."},
		{"user", "What is the capital of France?"},
		{"assistant", "Paris."},
		{"user", "And of Italy?"},
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewTemplate(NameFromFile, string(src), "<s>", "</s>")
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.Render(msgs, Options{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			text := p.Text()
			for _, m := range msgs {
				if !strings.Contains(text, m.Content) {
					t.Errorf("%s message %q missing from\n%s", m.Role, m.Content, text)
				}
			}
			if !p.Tracked {
				t.Errorf("message text not told apart from template text")
			}
			for _, m := range msgs[1:] {
				if !hasPlainSegment(p, m.Content) {
					t.Errorf("%q is not in a message-text segment: %+v", m.Content, p.Segments)
				}
			}
			t.Logf("system role kept: %v", f.SystemRole())
		})
	}
}

// hasPlainSegment reports whether a non-special segment of p holds s.
func hasPlainSegment(p *Prompt, s string) bool {
	for _, seg := range p.Segments {
		if !seg.Special && strings.Contains(seg.Text, s) {
			return true
		}
	}
	return false
}

// TestThinkingCut: DeepSeek R1's template keeps only what follows
// </think> in an assistant turn; the answer is message text and the
// template's <｜Assistant｜> stays whole in template text.
func TestThinkingCut(t *testing.T) {
	src, err := os.ReadFile(testshared.Path(t, "testdata/chat-templates/jinja/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewTemplate(NameFromFile, string(src), "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Render([]Message{
		{"user", "Capital of France?"},
		{"assistant", "<think>It is Paris.</think>Paris."},
		{"user", "<｜Assistant｜>And Italy?"},
	}, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Segment{
		{"<｜User｜>", true},
		{"Capital of France?", false},
		{"<｜Assistant｜>", true},
		{"Paris.", false},
		{"<｜end▁of▁sentence｜><｜User｜>", true},
		{"<｜Assistant｜>And Italy?", false},
		{"<｜Assistant｜><think>\n", true},
	}
	if !p.Tracked || !equalSegments(p.Segments, want) {
		t.Fatalf("segments\n got: %+v\nwant: %+v", p.Segments, want)
	}
}
