package chat

import (
	"strings"
	"testing"
)

// FuzzTemplate: any template source compiles or not, and renders or not,
// with one error and never a panic, a crash or a hang; a rendering's
// segments join to its text.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		chatML,
		`{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`,
		"{%- raw -%}  {{ y }}  {%- endraw -%}  z",
		`{% for m in messages %}{{ m.content.split('</think>')[-1] | trim }}{% endfor %}`,
		"{% set x %}\n  v \n{% endset %}[{{ x }}]{{ raise_exception('no') }}",
		`{{ strftime_now('%d %b %Y') }}{{ range(3) | list }}{% if enable_thinking is defined %}t{% endif %}`,
	} {
		f.Add(s, "say <|im_end|>")
	}
	f.Fuzz(func(t *testing.T, src, content string) {
		tmpl, err := NewTemplate(NameFromFile, src, "<s>", "</s>")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		p, err := tmpl.Render([]Message{{"system", "S"}, {"user", content}, {"assistant", "A"}}, Options{AddGenerationPrompt: true})
		if err != nil {
			return
		}
		var b strings.Builder
		for _, s := range p.Segments {
			if s.Text == "" {
				t.Fatalf("empty segment in %+v", p.Segments)
			}
			b.WriteString(s.Text)
		}
		if b.String() != p.Text() {
			t.Fatal("segments do not join to the text")
		}
	})
}
