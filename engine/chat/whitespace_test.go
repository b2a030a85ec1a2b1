package chat

import (
	"encoding/json"
	"os"
	"testing"
)

// whitespaceCases is testdata/whitespace.json, which
// testdata/gen_whitespace.py writes with Python's jinja2 (the test needs
// neither).
type whitespaceCases struct {
	Jinja2 string `json:"jinja2"`
	Cases  []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
		Context  struct {
			Messages            []Message `json:"messages"`
			AddGenerationPrompt bool      `json:"add_generation_prompt"`
			BOS                 string    `json:"bos_token"`
			EOS                 string    `json:"eos_token"`
		} `json:"context"`
		Expected string `json:"expected"`
	} `json:"cases"`
}

// TestWhitespaceCases renders every case of testdata/whitespace.json (trim
// marks beside newlines, "+" marks, trim_blocks and lstrip_blocks with
// inline tags, comments, raw blocks, Python's white space, real GLM
// templates and random templates) and wants jinja2's rendering exactly.
func TestWhitespaceCases(t *testing.T) {
	b, err := os.ReadFile("testdata/whitespace.json")
	if err != nil {
		t.Fatal(err)
	}
	var c whitespaceCases
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Cases) < 15 {
		t.Fatalf("%d cases in whitespace.json, want at least 15", len(c.Cases))
	}
	for _, tc := range c.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tc.Template, tc.Context.BOS, tc.Context.EOS)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.render(tc.Context.Messages, Options{AddGenerationPrompt: tc.Context.AddGenerationPrompt}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.Expected {
				t.Fatalf("rendering differs from jinja2 %s\ntemplate: %q\n     got: %q\n    want: %q", c.Jinja2, tc.Template, got, tc.Expected)
			}
		})
	}
}
