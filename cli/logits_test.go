package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

// TestLogitsMatchLlamaCpp: the logits of parity.ids on parity-f32.gguf are
// llama.cpp's within the parity bound (RMS at most 3% of their std).
func TestLogitsMatchLlamaCpp(t *testing.T) {
	m := testshared.Path(t, "models/parity/parity-f32.gguf")
	ids := testshared.Path(t, "models/parity/parity.ids")
	want := testshared.Logits(t, testshared.Path(t, "models/parity/parity-f32.logits.f32"), 512)
	out := filepath.Join(t.TempDir(), "out.f32")
	code, _, stderr := run(t, "logits", "-m", m, "--ids", ids, "-o", out, "--backend", "go")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := testshared.Logits(t, out, 512)
	rel, kl, err := testshared.Compare(got, want)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RMS %.4f%% of std, mean KL %.2g", 100*rel, kl)
	if rel > 0.03 {
		t.Errorf("logits differ from llama.cpp's by an RMS of %.2f%% of their std, want at most 3%%", 100*rel)
	}
}

// TestLogitsRefuses: bad input gives one line naming the cause, and no
// output file.
func TestLogitsRefuses(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.ids", "1 403 407")
	out := filepath.Join(dir, "out.f32")
	long := write("long.ids", strings.Repeat("1 ", 100000))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--ids", good, "-o", out}, "no model given"},
		{"no ids", []string{"-m", m, "-o", out}, "no ids given"},
		{"no output", []string{"-m", m, "--ids", good}, "no output given"},
		{"missing ids file", []string{"-m", m, "--ids", filepath.Join(dir, "none"), "-o", out}, "no such file"},
		{"ids file is a directory", []string{"-m", m, "--ids", dir, "-o", out}, "is a directory"},
		{"empty ids", []string{"-m", m, "--ids", write("empty.ids", " \n"), "-o", out}, "holds no ids"},
		{"not a number", []string{"-m", m, "--ids", write("word.ids", "1 two 3"), "-o", out}, `"two" (number 2) is not a token id`},
		{"negative", []string{"-m", m, "--ids", write("neg.ids", "1 -3"), "-o", out}, "is not a token id"},
		{"outside the vocabulary", []string{"-m", m, "--ids", write("big.ids", "1 512"), "-o", out}, "id 512 (number 2) is outside the vocabulary (0..511)"},
		{"longer than the context", []string{"-m", m, "--ids", long, "-o", out}, "100000 ids are more than the context"},
		{"longer than -c", []string{"-m", m, "--ids", good, "-o", out, "-c", "2"}, "3 ids are more than the context of 2"},
		{"output is a directory", []string{"-m", m, "--ids", good, "-o", dir}, "is a directory"},
		{"output folder missing", []string{"-m", m, "--ids", good, "-o", filepath.Join(dir, "none", "out.f32")}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, append([]string{"logits"}, tc.args...)...)
			if code == 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q in one line", code, stderr, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("an output file was left behind")
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}
