package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"kvscope/internal/testshared"
)

// renderBoth renders src on the engine alone and rewritten, on the same
// conversation.
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

// TestWhitespaceLikeJinja2: whitespace control is Jinja2's with
// trim_blocks and lstrip_blocks; each want is what Python's jinja2 3.1
// renders (Environment(trim_blocks=True, lstrip_blocks=True)). The engine
// alone gets the adjacent-tag cases wrong ("a{% if true %}{% endif %}\n\nb"
// gives "ab").
func TestWhitespaceLikeJinja2(t *testing.T) {
	tests := []struct{ template, want string }{
		{"a{% if true %}{% endif %}\n\nb", "a\nb"},
		{"x  \n  {%- if true %}{% endif %}y", "xy"},
		{"{% for m in ['a','b'] %}\n  {{ m }}{% endfor %}\n", "  a  b"},
		{"<s>\n{{ 'x' }}{%- if true %}y{% endif %}", "<s>\nxy"},
		{"  {% if true %}\n    a\n  {% endif %}\n", "    a\n"},
		{"{% if true %}  \n a{% endif %}", "  \n a"},
		{"a  {% if true %}b{% endif %}", "a  b"},
		{"a\n  {# c #}\n  b", "a\n  b"},
		{"a\n  {#- c -#}\n  b", "ab"},
		{"{%- if true -%}\n  a  \n{%- endif -%}\n\nb", "ab"},
		{"{{ 'a' }}\n{% if true %}\n{{ 'b' }}\n{% endif %}\n{{ 'c' }}", "a\nb\nc"},
		{"{% for i in [1,2] %}{{ i }}\n{% endfor %}", "1\n2\n"},
		{"{% for i in [1,2] %}\n{{ i }}{{ ',' }}\n{% endfor %}", "1,\n2,\n"},
		{"\t{% if true %}x{% endif %}", "x"},
		{"a {% raw %}{{ x }}\n{% endraw %}\nb", "a {{ x }}\nb"},
		{"{% raw %}\n  x\n  {% endraw %}\ny", "\n  x\ny"},
		{"{%- raw -%}  {{ y }}  {%- endraw -%}  z", "{{ y }}z"},
		{"{% set x %}\n  v \n{% endset %}[{{ x }}]", "[  v \n]"},
		{"{% macro f() %}\n  m\n{% endmacro %}[{{ f() }}]", "[  m\n]"},
		{"{{ 'a' -}}   \n  {{ 'b' }}", "ab"},
		{"a  \n{{- 'b' }}", "ab"},
		{"{% if true %}a{% endif %}\r\nb", "ab"},
		{"line\n    {% if true %}{{ 'x' }}{% endif %}\n    z", "line\nx    z"},
		{"{{ 'q' }}   {% if true %}y{% endif %}", "q   y"},
		{"{{ 'a' }}\n", "a"},
		{"{{ 'a' }}\n\n", "a\n"},
		{"a\r\nb\rc", "a\nb\nc"},
		{"  {%+ if true %}x{% endif +%}\ny", "  x\ny"},
		{"{% if true -%}\n\n  <a>  \n\n{%- endif %}\n\n{{ 'z' }}", "<a>\nz"},
		{"{% macro f(x) %}\n  [{{ x }}]\n{% endmacro %}\n{{ f(1) }}|{{ f(2) }}\n", "  [1]\n|  [2]\n"},
		{"{%- macro f(x) -%}\n  [{{ x }}]\n  {%- endmacro -%}\n{{ f(1) }}\n", "[1]"},
		{"a {%- macro f() %}{% if true %}\n  x\n{% endif %}{%- endmacro %}\n\n{{ f() }}  {%- macro g() -%}  {{- 'y' -}}  {%- endmacro -%}  {{ g() }}", "a\n  x\ny"},
		{"{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}\nin\n{% endcall %}", "<in\n>"},
		{"{{ \"quote \\\" and backslash \\\\ \" }}\\ \" '", "quote \" and backslash \\ \\ \" '"},
		{"{% for m in [1] %}{{ m }}{# c #}\n{% endfor %}", "1"},
		{"x\n   {# c #}   \ny", "x\n   \ny"},
		{"{% if true %}{{ 'a' }}  {% endif %}\n", "a  "},
	}
	for _, tt := range tests {
		f, err := NewTemplate(NameFromFile, tt.template, "", "")
		if err != nil {
			t.Errorf("%q: %v", tt.template, err)
			continue
		}
		got, err := f.render(nil, Options{}, nil)
		if err != nil {
			t.Errorf("%q: %v", tt.template, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%q\n got: %q\nwant: %q", tt.template, got, tt.want)
		}
	}
}

// TestRewriteKeepsRealTemplates: on every real template and llama.cpp case
// (which the engine alone renders as Jinja2 does) the rewrite changes
// nothing.
func TestRewriteKeepsRealTemplates(t *testing.T) {
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
				t.Fatalf("rewrite changed the rendering\nplain:   %q\nguarded: %q", plain, guarded)
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
