package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"kvscope/engine/backend/native"
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

func TestRunSeveralPrompts(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	cases := testshared.Greedy(t, testshared.Path(t, "reference/stories260K-greedy.txt"))
	args := []string{"run", "-m", m, "-n", "40", "--temp", "0"}
	for _, c := range cases {
		args = append(args, "-p", c.Prompt)
	}
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for i, c := range cases {
		head := "### prompt " + strconv.Itoa(i+1) + "\n" + c.Prompt
		at := strings.Index(out, head)
		if at < 0 {
			t.Fatalf("no section %q in\n%s", head, out)
		}
		body := out[at+len(head):]
		body = body[:strings.Index(body, "\n###")]
		if len(body) < 50 || !strings.HasPrefix(c.Output, body) {
			t.Errorf("prompt %d: %q is not a prefix of llama.cpp's %q", i+1, body, c.Output)
		}
	}
	if !strings.Contains(out, "tokens/s aggregate") {
		t.Errorf("no aggregate speed line:\n%s", out)
	}
}

func TestPerplexityCacheFlags(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	f := testshared.Path(t, "reference/stories260K-textA.txt")
	get := func(extra ...string) float64 {
		code, out, errOut := run(t, append([]string{"perplexity", "-m", m, "-f", f}, extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(out, "perplexity:")), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := get()
	f32 := get("--cache-k", "f32", "--cache-v", "f32", "--block-size", "3", "--allocator", "contiguous")
	int4 := get("--cache-k", "int4", "--cache-v", "int4", "--block-size", "32")
	t.Logf("perplexity: f16 %.4f, f32 %.4f, int4 %.4f", base, f32, int4)
	if math.Abs(f32-3.6607) > 0.001 {
		t.Errorf("f32 K/V perplexity %.4f, llama.cpp's is 3.6607", f32)
	}
	if int4 <= f32 || int4 > f32*1.2 {
		t.Errorf("int4 K/V perplexity %.4f should be a little worse than f32's %.4f", int4, f32)
	}
}

// With the native CPU library, `run` names the library by its file name
// and SIMD path on its backend line, and `info` gives its full path.
func TestRunBackendLineIsShort(t *testing.T) {
	lib, err := native.Load("")
	if err != nil {
		t.Skipf("the native CPU library does not load (make native builds it): %v", err)
	}
	m := testshared.Path(t, "models/stories260K.gguf")
	code, _, errOut := run(t, "run", "-m", m, "-p", "Once", "-n", "2", "--backend", "cpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	base := filepath.Base(lib.File())
	if !strings.Contains(errOut, "backend cpu (") || !strings.Contains(errOut, base) || strings.Contains(errOut, lib.File()) {
		t.Errorf("run's backend line should name %s, not %s:\n%s", base, lib.File(), errOut)
	}
	code, out, errOut := run(t, "info", "-m", m, "--backend", "cpu")
	if code != 0 || !strings.Contains(out, lib.File()) {
		t.Errorf("info (exit %d) does not give the library's path %s:\n%s%s", code, lib.File(), out, errOut)
	}
}
