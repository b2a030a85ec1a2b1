package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"kvscope/internal/testshared"
)

// renderBoth renders src as is and guarded, on the same conversation.
func renderBoth(t *testing.T, src string, msgs []Message) (plain, guarded string) {
	t.Helper()
	raw, err := jinja.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewTemplate(NameFromFile, src, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	u := *g
	u.tmpl = raw
	opt := Options{AddGenerationPrompt: true}
	if plain, err = u.render(msgs, opt, nil); err != nil {
		t.Fatal(err)
	}
	if guarded, err = g.render(msgs, opt, nil); err != nil {
		t.Fatal(err)
	}
	return plain, guarded
}

// TestGuardKeepsRendering: the macro guard changes no rendering, whatever
// the trim marks around macro tags.
func TestGuardKeepsRendering(t *testing.T) {
	msgs := []Message{{"system", "S"}, {"user", " U "}, {"assistant", "A"}}
	tests := []struct{ name, src string }{
		{"plain tags", "{% macro f(x) %}\n  [{{ x }}]\n{% endmacro %}\n{{ f(1) }}|{{ f(2) }}\n"},
		{"trim marks", "{%- macro f(x) -%}\n  [{{ x }}]\n  {%- endmacro -%}\n{{ f(1) }}\n"},
		{"indented tags", "  {% macro f(x) %}\n    {{ x }}\n  {% endmacro %}\n{{ f('a') }}{{ f('b') }}"},
		{"left trim only", "{% macro f(x) -%}\n\n  <{{ x }}>  \n\n{%- endmacro %}\n\n{{ f('a') }}"},
		{"tags beside the macro tags", "a {%- macro f() %}{% if true %}\n  x\n{% endif %}{%- endmacro %}\n\n{{ f() }}  {%- macro g() -%}  {{- 'y' -}}  {%- endmacro -%}  {{ g() }}"},
		{"a macro at the end", "{{ 'a' }}\n{% macro f() %}\n{% endmacro %}"},
		{"caller", "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"},
		{"macros calling macros", "{% macro a(x) %}({{ x }}){% endmacro %}{% macro b(x) %}[{{ a(x) }}]{% endmacro %}{% for m in messages %}{{ b(m.content) }}{% endfor %}"},
		{"recursion that ends", "{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"},
		{"a closer in a string argument", "{% macro f(a='%}') %}{{ a }}{% endmacro %}{{ f() }}"},
		{"macro text in raw", "{% raw %}{% macro x() %}{% endraw %}ok"},
		{"macro text in a comment", "{# {% macro x() %} #}ok{{ messages[0].content }}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain, guarded := renderBoth(t, tt.src, msgs)
			if plain != guarded {
				t.Fatalf("guard changed the rendering\nplain:   %q\nguarded: %q", plain, guarded)
			}
		})
	}
}

// TestGuardKeepsRealTemplates: the same for every real template and
// llama.cpp case.
func TestGuardKeepsRealTemplates(t *testing.T) {
	c := loadCases(t)
	srcs := map[string]string{}
	for _, tc := range c.Cases {
		srcs[tc.Name] = tc.Template
	}
	files, _ := filepath.Glob(filepath.Join(testshared.Path(t, "testdata/chat-templates/jinja"), "*.jinja"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs[filepath.Base(p)] = string(b)
	}
	for name, src := range srcs {
		t.Run(name, func(t *testing.T) {
			plain, guarded := renderBoth(t, src, c.Messages[1:])
			if plain != guarded {
				t.Fatalf("guard changed the rendering\nplain:   %q\nguarded: %q", plain, guarded)
			}
		})
	}
}

// TestGuardRefuses: templates that would overflow the stack give an error.
func TestGuardRefuses(t *testing.T) {
	tests := []struct {
		name, src  string
		compileErr string // error of NewTemplate, or "" for one of Render
		renderErr  string
	}{
		{"a macro calling itself", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "", "macros nested more than 256 calls deep"},
		{"two macros calling each other", `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, "", "macros nested more than 256 calls deep"},
		{"deep brackets", "{{ " + strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000) + " }}", "brackets nested 10000 deep", ""},
		{"deep blocks", strings.Repeat("{% if true %}", 100000) + "x" + strings.Repeat("{% endif %}", 100000), "blocks nested more than 64 deep", ""},
		{"a huge tag", "{{ " + strings.Repeat("not ", 100000) + "x }}", "a tag of 400003 bytes", ""},
		{"a huge template", strings.Repeat("x", maxSourceSize+1), "chat template refused", ""},
		{"an unclosed tag", "ok {{ x ", "unclosed tag", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewTemplate(NameFromFile, tt.src, "", "")
			if tt.compileErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.compileErr) {
					t.Fatalf("error %v, want one with %q", err, tt.compileErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Render([]Message{{"user", "x"}}, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.renderErr) {
				t.Fatalf("error %v, want one with %q", err, tt.renderErr)
			}
		})
	}
}
