package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestPerplexityCommand(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	f := testshared.Path(t, "reference/stories260K-textA.txt")
	code, out, errOut := run(t, "perplexity", "-m", m, "-f", f)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(out, "perplexity:")), 64)
	if err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if v < 3.6605 || v > 3.6625 {
		t.Errorf("perplexity %.4f, want 3.6615 ± 0.001", v)
	}
	// A short context forces several windows; the figure must still be sane.
	code, out, errOut = run(t, "perplexity", "-m", m, "-f", f, "-c", "64")
	if code != 0 || !strings.Contains(errOut, "windows of 64") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
}

func TestRunGreedyMatchesLlamaCpp(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	c := testshared.Greedy(t, testshared.Path(t, "reference/stories260K-greedy.txt"))[0]
	code, out, errOut := run(t, "run", "-m", m, "-p", c.Prompt, "-n", "60", "--temp", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	out = strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(out, c.Prompt) {
		t.Fatalf("output %q does not start with the prompt", out)
	}
	gen := strings.TrimPrefix(out, c.Prompt)
	if len(gen) < 100 || !strings.HasPrefix(c.Output, gen) {
		t.Errorf("generated %q\nwant a 60-token prefix of %q", gen, c.Output)
	}
	if !strings.Contains(errOut, "generation: 60 tokens") || !strings.Contains(errOut, "tokens/s") {
		t.Errorf("no speed line: %q", errOut)
	}
}

func TestRunSeedReproducible(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	_, a, _ := run(t, "run", "-m", m, "-p", "Tom", "-n", "30", "--seed", "7")
	_, b, _ := run(t, "run", "-m", m, "-p", "Tom", "-n", "30", "--seed", "7")
	if a != b || len(a) < 10 {
		t.Errorf("same seed, different text:\n%q\n%q", a, b)
	}
}

func TestTokenizeCommand(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{[]string{"Once upon a time"}, []int{1, 403, 407, 261, 378}},
		{[]string{"--no-bos", "Once upon a time"}, []int{403, 407, 261, 378}},
	} {
		code, out, errOut := run(t, append([]string{"tokenize", "-m", m}, tc.args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var got []int
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if !equal(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.args, got, tc.want)
		}
	}
	// <s> is plain text unless --parse-special.
	_, plain, _ := run(t, "tokenize", "-m", m, "--no-bos", "<s>")
	_, special, _ := run(t, "tokenize", "-m", m, "--no-bos", "--parse-special", "<s>")
	if strings.TrimSpace(special) != "[1]" || strings.TrimSpace(plain) == "[1]" {
		t.Errorf("plain %s, special %s", plain, special)
	}
}

func equal(a, b []int) bool {
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

func TestInfoCommand(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	code, out, errOut := run(t, "info", "-m", m)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"architecture:  llama", "layers:        5", "4 key/value, head dim 8", "F32", "512 tokens, llama", "BOS 1", "chat template: no"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.gguf")
	os.WriteFile(broken, []byte("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{"run", "-p", "x"}, 1, "no model given"},
		{[]string{"run", "-m", filepath.Join(dir, "none.gguf"), "-p", "x"}, 1, "no such file"},
		{[]string{"run", "-m", broken, "-p", "x"}, 1, "malformed GGUF"},
		{[]string{"run", "-m", m}, 1, "exactly one prompt"},
		{[]string{"run", "-m", m, "-p", "x", "--top-p", "2"}, 1, "top"},
		{[]string{"run", "-m", m, "-p", "x", "--cache-k", "f12"}, 1, "f16"},
		{[]string{"run", "-m", m, "-p", "x", "--block-size", "0"}, 1, "block size"},
		{[]string{"run", "-m", m, "-p", strings.Repeat("a b ", 40), "-c", "16"}, 1, "context holds 16"},
		{[]string{"run", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"perplexity", "-m", m}, 1, "no text file"},
		{[]string{"tokenize", "-m", m}, 1, "no text given"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(strings.ToLower(errOut), strings.ToLower(tc.want)) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
