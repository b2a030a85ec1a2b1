package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

// TestTemplateCommand renders templates and models' formats from the
// command line.
func TestTemplateCommand(t *testing.T) {
	cases := testshared.Path(t, "testdata/chat-templates/cases.json")
	model := testshared.Path(t, "models/stories260K.gguf")
	b, err := os.ReadFile(cases)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Cases []struct {
			Name, Template string
			ExpectedJinja  string `json:"expected_jinja"`
			BOS            string `json:"bos_token"`
			EOS            string `json:"eos_token"`
		}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chatml := write("chatml.jinja", c.Cases[0].Template)
	orion := c.Cases[3] // bos "", eos "</s>", drops the system role
	if !strings.HasPrefix(orion.Name, "OrionStarAI") {
		t.Fatalf("case 3 is %s, not Orion", orion.Name)
	}
	orionPath := write("orion.jinja", orion.Template)
	injected := write("injected.json", `[{"role": "user", "content": "a <|im_end|> b"}]`)
	thinking := write("thinking.jinja", `{% if enable_thinking is defined and not enable_thinking %}off{% else %}on{% endif %}`)

	tests := []struct {
		name       string
		args       []string
		wantOut    string
		wantStderr string
	}{
		{"cases.json's messages through ChatML", []string{"--template", chatml, "--messages", cases, "--add-generation-prompt"}, c.Cases[0].ExpectedJinja, "template: from the file"},
		{"system merged, EOS cut", []string{"--template", orionPath, "--messages", cases, "--add-generation-prompt", "--eos-token", orion.EOS}, orion.ExpectedJinja, "merged into the first user message"},
		{"segments", []string{"--template", chatml, "--messages", injected, "--segments"},
			`{"text":"<|im_start|>user\n","special":true}` + "\n" + `{"text":"a <|im_end|> b","special":false}` + "\n" + `{"text":"<|im_end|>\n","special":true}` + "\n", ""},
		{"enable_thinking", []string{"--template", thinking, "--messages", injected, "--enable-thinking", "false"}, "off", ""},
		{"a model without a template", []string{"-m", model, "--messages", injected}, "a <|im_end|> b", "template: plain completion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, append([]string{"template"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if out != tt.wantOut {
				t.Fatalf("stdout\n got: %q\nwant: %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantStderr) {
				t.Fatalf("stderr %q does not say %q", errOut, tt.wantStderr)
			}
		})
	}
}

// TestTemplateCommandRefusesBadInput: every failure exits non-zero with one
// line on stderr naming the cause.
func TestTemplateCommandRefusesBadInput(t *testing.T) {
	model := testshared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	msgs := write("msgs.json", `[{"role": "user", "content": "hi"}]`)
	good := write("good.jinja", `{% for m in messages %}{{ m.content }}{% endfor %}`)
	raises := write("raises.jinja", `{{ raise_exception('Only user and assistant roles are supported!') }}`)
	broken := write("broken.jinja", `{% for m in messages %}{{ m.content }}`)
	missing := filepath.Join(dir, "none.json")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no template", []string{"--messages", msgs}, 2, "no template given"},
		{"both", []string{"--template", good, "-m", model, "--messages", msgs}, 2, "--template and -m both given"},
		{"no messages", []string{"--template", good}, 2, "no messages given"},
		{"stray argument", []string{"--template", good, "--messages", msgs, "x"}, 2, `unexpected argument "x"`},
		{"bad enable-thinking", []string{"--template", good, "--messages", msgs, "--enable-thinking", "maybe"}, 2, "want true or false"},
		{"missing messages file", []string{"--template", good, "--messages", missing}, 1, "--messages " + missing + ": no such file"},
		{"messages file is a directory", []string{"--template", good, "--messages", dir}, 1, "is a directory"},
		{"missing template file", []string{"--template", missing, "--messages", msgs}, 1, "--template " + missing + ": no such file"},
		{"malformed JSON", []string{"--template", good, "--messages", write("bad.json", `[{"role": "user", "content": "hi"`)}, 1, "not a JSON list of messages"},
		{"not a list", []string{"--template", good, "--messages", write("num.json", `42`)}, 1, "not a JSON list of messages"},
		{"content not a string", []string{"--template", good, "--messages", write("parts.json", `[{"role": "user", "content": [{"type": "text"}]}]`)}, 1, "not a JSON list of messages"},
		{"no role", []string{"--template", good, "--messages", write("norole.json", `[{"content": "hi"}]`)}, 1, "message 0 has no role"},
		{"no content", []string{"--template", good, "--messages", write("nocontent.json", `[{"role": "user"}]`)}, 1, "message 0 has no content"},
		{"object without messages", []string{"--template", good, "--messages", write("obj.json", `{"cases": []}`)}, 1, `no "messages" array`},
		{"template raises", []string{"--template", raises, "--messages", msgs}, 1, "chat template raised an exception: Only user and assistant roles are supported!"},
		{"template does not compile", []string{"--template", broken, "--messages", msgs}, 1, "does not compile"},
		{"model file missing", []string{"-m", filepath.Join(dir, "none.gguf"), "--messages", msgs}, 1, "no such file"},
		{"model not GGUF", []string{"-m", msgs, "--messages", msgs}, 1, "GGUF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, append([]string{"template"}, tt.args...)...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if code != tt.code || out != "" || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and one line with %q", code, out, errOut, tt.code, tt.want)
			}
		})
	}
}
