package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"kvscope/internal/testshared"
)

// TestMainRefusesBadInput runs every subcommand with absurd flag values,
// missing and wrong files and bad command lines: each must exit non-zero
// with exactly one line on stderr naming the cause, without a panic, a
// hang or a goroutine left behind.
func TestMainRefusesBadInput(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	broken := write("broken.gguf", "GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff")
	empty := write("empty.gguf", "")
	notGGUF := write("story.gguf", "Once upon a time there was a cat.")
	text := write("text.txt", "Once upon a time there was a cat.")
	emptyText := write("empty.txt", "")
	missing := filepath.Join(dir, "none.gguf")
	fifo := filepath.Join(dir, "fifo")
	fifoErr := mkfifo(fifo)
	long := strings.Repeat("a b ", 40)
	huge := "99999999999999999999"
	var manyPrompts []string
	for range maxPrompts + 1 {
		manyPrompts = append(manyPrompts, "-p", "x")
	}
	r := func(args ...string) []string { return append([]string{"run", "-m", m, "-p", "Once"}, args...) }
	ppl := func(args ...string) []string { return append([]string{"perplexity", "-m", m, "-f", text}, args...) }

	for _, tc := range []struct {
		args []string
		want string // in the one line of stderr, case aside
	}{
		{nil, "no command given"},
		{[]string{"nonsense"}, `unknown command "nonsense"`},
		{[]string{"--bogus"}, `unknown command "--bogus"`},

		// run: files.
		{[]string{"run", "-p", "x"}, "no model given"},
		{[]string{"run", "-m", "", "-p", "x"}, "no model given"},
		{[]string{"run", "-m", missing, "-p", "x"}, "no such file"},
		{[]string{"run", "-m", dir, "-p", "x"}, "is a directory"},
		{[]string{"run", "-m", fifo, "-p", "x"}, "named pipe"},
		{[]string{"run", "-m", broken, "-p", "x"}, "malformed GGUF"},
		{[]string{"run", "-m", empty, "-p", "x"}, "empty"},
		{[]string{"run", "-m", notGGUF, "-p", "x"}, "GGUF"},
		// run: the command line.
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "-m", m}, "no prompt given"},
		{[]string{"run", "-m", m, "-p", ""}, "the prompt is empty"},
		{append([]string{"run", "-m", m}, manyPrompts...), "at most 1024 prompts"},
		{r("extra"), `unexpected argument "extra"`},
		{r("-n"), "flag needs an argument: -n"},
		{r("--parse-special=maybe"), "parse-special"},
		// run: counts.
		{r("-n", "0"), "flag -n: want an integer from 1 to"},
		{r("-n", "-1"), "flag -n: want an integer from 1 to"},
		{r("-n", "abc"), "flag -n: want an integer"},
		{r("-n", "1e3"), "flag -n: want an integer"},
		{r("-n", "0x10"), "flag -n: want an integer"},
		{r("-n", huge), "flag -n: want an integer"},
		{r("--parallel", "0"), "flag -parallel: want an integer from 1 to 1024"},
		{r("--parallel", "-3"), "flag -parallel"},
		{r("--parallel", "9223372036854775807"), "flag -parallel"},
		{r("--parallel", huge), "flag -parallel"},
		{r("--seed", "-2"), "flag -seed: want an integer from -1 to"},
		{r("--seed", "9223372036854775808"), "flag -seed"},
		{r("--top-k", "-1"), "flag -top-k: want an integer from 0 to"},
		{r("--top-k", huge), "flag -top-k"},
		{r("-c", "-1"), "flag -c: want an integer from 0 to"},
		{r("-c", huge), "flag -c"},
		{r("-c", "100000"), "outside 1..2048"},
		{r("--block-size", "0"), "flag -block-size: want an integer from 1 to 256"},
		{r("--block-size", "257"), "flag -block-size"},
		{r("--block-size", "-16"), "flag -block-size"},
		// run: reals.
		{r("--temp", "-1"), "flag -temp: want a number from 0 to 100"},
		{r("--temp", "NaN"), "flag -temp"},
		{r("--temp", "Inf"), "flag -temp"},
		{r("--temp", "hot"), "flag -temp"},
		{r("--top-p", "0"), "flag -top-p: want a number above 0, at most 1"},
		{r("--top-p", "2"), "flag -top-p"},
		{r("--top-p", "nan"), "flag -top-p"},
		{r("--min-p", "-0.1"), "flag -min-p"},
		{r("--min-p", "1.5"), "flag -min-p"},
		{r("--repeat-penalty", "0"), "flag -repeat-penalty"},
		{r("--repeat-penalty", "-1"), "flag -repeat-penalty"},
		{r("--repeat-penalty", "+Inf"), "flag -repeat-penalty"},
		// run: sizes and names.
		{r("--cache-budget", "lots"), "flag -cache-budget: want a size"},
		{r("--cache-budget", "0"), "flag -cache-budget"},
		{r("--cache-budget", "-5MiB"), "flag -cache-budget"},
		{r("--cache-budget", ""), "flag -cache-budget"},
		{r("--cache-budget", " 5MB"), "flag -cache-budget"},
		{r("--cache-budget", "18446744073709551615"), "flag -cache-budget"},
		{r("--cache-budget", "2TiB"), "flag -cache-budget"},
		{r("--cache-budget", "100B"), "holds no block"},
		{r("--cache-k", "f12"), "flag -cache-k"},
		{r("--cache-v", ""), "flag -cache-v"},
		{r("--allocator", "buddy"), "flag -allocator"},
		{r("--eviction", "mru"), "flag -eviction"},
		{r("--preempt", "never"), "flag -preempt"},
		{r("--overflow", "wrap"), "flag -overflow"},
		// run: prompts the context cannot hold.
		{[]string{"run", "-m", m, "-p", long, "-c", "16", "--overflow", "stop"}, "context holds 16"},
		{[]string{"run", "-m", m, "-p", "Once", "-p", long, "-c", "16", "-n", "4"}, "prompt 2 of 2 failed"},
		{[]string{"run", "-m", m, "-p", long, "-p", "Once", "-p", long, "-c", "16", "-n", "4"}, "prompts 1, 3 of 3 failed"},

		// info.
		{[]string{"info"}, "no model given"},
		{[]string{"info", "-m", missing}, "no such file"},
		{[]string{"info", "-m", dir}, "is a directory"},
		{[]string{"info", "-m", fifo}, "named pipe"},
		{[]string{"info", "-m", broken}, "malformed GGUF"},
		{[]string{"info", "-m", m, "extra"}, "unexpected argument"},
		{[]string{"info", "--bogus"}, "flag provided but not defined"},

		// tokenize.
		{[]string{"tokenize", "-m", m}, "no text given"},
		{[]string{"tokenize", "x"}, "no model given"},
		{[]string{"tokenize", "-m", fifo, "x"}, "named pipe"},
		{[]string{"tokenize", "-m", dir, "x"}, "is a directory"},
		{[]string{"tokenize", "-m", broken, "x"}, "malformed GGUF"},
		{[]string{"tokenize", "-m", m, "-f", missing}, "no such file"},
		{[]string{"tokenize", "-m", m, "-f", dir}, "is a directory"},
		{[]string{"tokenize", "-m", m, "-f", fifo}, "named pipe"},
		{[]string{"tokenize", "-m", m, "-f", text, "x"}, "not both"},
		{[]string{"tokenize", "-m", m, "--no-bos=3", "x"}, "no-bos"},

		// perplexity.
		{[]string{"perplexity", "-m", m}, "no text file given"},
		{[]string{"perplexity", "-f", text}, "no model given"},
		{[]string{"perplexity", "-m", fifo, "-f", text}, "named pipe"},
		{[]string{"perplexity", "-m", m, "-f", fifo}, "named pipe"},
		{[]string{"perplexity", "-m", m, "-f", dir}, "is a directory"},
		{[]string{"perplexity", "-m", m, "-f", missing}, "no such file"},
		{[]string{"perplexity", "-m", m, "-f", emptyText}, "at least 2 are needed"},
		{ppl("-c", "1"), "-c 1"},
		{ppl("-c", "-1"), "flag -c"},
		{ppl("-c", "3000"), "outside 2..2048"},
		{ppl("--block-size", "0"), "flag -block-size"},
		{ppl("--cache-budget", "100B"), "holds no block"},
		{ppl("--cache-k", "f12"), "flag -cache-k"},
		{ppl("extra"), "unexpected argument"},

		// bench.
		{[]string{"bench"}, "no benchmark given"},
		{[]string{"bench", "nonsense"}, `unknown benchmark "nonsense"`},
		{[]string{"bench", "decode"}, `unknown benchmark "decode"`},
		{[]string{"bench", "speed", "-p", "-1"}, "flag -p: want an integer from 1 to"},
		{[]string{"bench", "speed", "-p", "0"}, "flag -p"},
		{[]string{"bench", "speed", "-n", "0"}, "flag -n"},
		{[]string{"bench", "speed", "-n", huge}, "flag -n"},
		{[]string{"bench", "speed", "-t", "0"}, "flag -t"},
		{[]string{"bench", "speed", "--types", "Q4_0,q9_9"}, `--type "q9_9" is not a weight type`},
		{[]string{"bench", "speed", "--preset", "gpt-5"}, `unknown preset "gpt-5"`},
		{[]string{"bench", "speed", "--npl", "1,x"}, `--npl "1,x"`},
		{[]string{"bench", "speed", "--npl", "0"}, `--npl "0"`},
		{[]string{"bench", "speed", "--ctx", "8", "--ctx-gen", "8"}, "--ctx-gen 8 must be less than --ctx 8"},
		{[]string{"bench", "speed", "extra"}, "unexpected argument"},

		// gen-model.
		{[]string{"gen-model", "-o", missing}, "no preset given"},
		{[]string{"gen-model", "--preset", "llama-9", "-o", missing}, `unknown preset "llama-9"`},
		{[]string{"gen-model", "--preset", "small", "--type", "Q3_X", "-o", missing}, `--type "Q3_X" is not a weight type`},
		{[]string{"gen-model", "--preset", "small", "--type", "Q8_0_M", "-o", missing}, `--type "Q8_0_M"`},
		{[]string{"gen-model", "--preset", "small"}, "no output file given"},
		{[]string{"gen-model", "--preset", "small", "-o", dir}, "is a directory, not a file to write"},
		{[]string{"gen-model", "--preset", "small", "-o", filepath.Join(missing, "m.gguf")}, "m.gguf: no such file or directory"},
		{[]string{"gen-model", "--preset", "small", "-o", "x.gguf", "extra"}, "unexpected argument"},
		{[]string{"bench", "cache", "-m", missing, "-f", text}, "no such file"},
		{[]string{"bench", "cache", "-m", m, "-f", fifo}, "named pipe"},
		{[]string{"bench", "cache", "-m", m, "-f", emptyText}, "at least 2 are needed"},
	} {
		name := strings.Join(tc.args, " ")
		if len(name) > 80 {
			name = name[:80]
		}
		t.Run(name, func(t *testing.T) {
			if fifoErr != nil && strings.Contains(strings.Join(tc.args, " "), fifo) {
				t.Skipf("no named pipe: %v", fifoErr)
			}
			before := goroutines()
			code, stdout, stderr := mainWithin(t, 30*time.Second, tc.args...)
			t.Logf("exit %d: %s", code, stderr)
			if code == 0 {
				t.Errorf("exit 0, want non-zero; stdout %q", stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
				t.Errorf("stderr is not exactly one line: %q", stderr)
			}
			if !strings.Contains(strings.ToLower(stderr), strings.ToLower(tc.want)) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
			}
			if strings.Contains(stderr, "internal error") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr reports a panic: %q", stderr)
			}
			noGoroutinesLeft(t, before)
		})
	}
}

// mainWithin runs Main with args, failing the test if it takes longer than
// limit (a hang).
func mainWithin(t *testing.T, limit time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(args, &o, &e) }()
	select {
	case code = <-done:
	case <-time.After(limit):
		t.Fatalf("still running after %v", limit)
	}
	return code, o.String(), e.String()
}

// goroutines counts the live goroutines but the native backend's helpers
// (engine/backend/native's pool), which start with the process's first
// parallel product and stay for the process's life by design.
func goroutines() int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	n := 0
	for _, rec := range strings.Split(b.String(), "\n\n") {
		var k int
		if _, err := fmt.Sscanf(rec, "%d @", &k); err != nil {
			continue // the header, or no record
		}
		if !strings.Contains(rec, "engine/backend/native.helper+") {
			n += k
		}
	}
	return n
}

// noGoroutinesLeft waits a little for the goroutine count to fall back to
// before, and fails listing the goroutines if it does not.
func noGoroutinesLeft(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for goroutines() > before {
		if time.Now().After(deadline) {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines left behind (from %d):\n%s", goroutines()-before, before, b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMainSucceeds checks commands that must work end to end, exit 0 and
// show what their flags changed.
func TestMainSucceeds(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		// With a rolling or truncating context, -n still ends the run.
		{[]string{"run", "-m", m, "-p", "Once", "-c", "16", "--overflow", "truncate", "-n", "40", "--temp", "0"}, "generation: 40 tokens"},
		{[]string{"run", "-m", m, "-p", "Once", "-c", "48", "--overflow", "rolling", "-n", "80", "--temp", "0"}, "generation: 80 tokens"},
		// Without -n, the default bounds the run.
		{[]string{"run", "-m", m, "-p", "Once", "-c", "16", "--overflow", "truncate"}, "generation: 256 tokens"},
		// <s> typed in a prompt stays text unless --parse-special: BOS + <s> is 2 tokens.
		{[]string{"run", "-m", m, "-p", "<s>", "-n", "1", "--parse-special"}, "prompt: 2 tokens"},
		{[]string{"run", "-m", m, "-p", "x", "--cache-budget", "64KiB", "-n", "2", "--parallel", "1024"}, "generation: 2 tokens"},
	} {
		t.Run(strings.Join(tc.args[3:], " "), func(t *testing.T) {
			before := goroutines()
			code, _, stderr := mainWithin(t, 30*time.Second, tc.args...)
			if code != 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 0 and %q", code, stderr, tc.want)
			}
			noGoroutinesLeft(t, before)
		})
	}
	// Without --parse-special, <s> is more than one token of text.
	_, _, stderr := mainWithin(t, 30*time.Second, "run", "-m", m, "-p", "<s>", "-n", "1")
	if strings.Contains(stderr, "prompt: 2 tokens") || !strings.Contains(stderr, "prompt: ") {
		t.Errorf("<s> without --parse-special: %q", stderr)
	}
}

// TestMainHelp checks that -h prints the usage, with run's -n default, and
// exits 0.
func TestMainHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"run", "-h"}, {"perplexity", "-h"}, {"bench", "-h"}, {"bench", "speed", "-h"}, {"gen-model", "-h"}} {
		code, _, stderr := run(t, args...)
		if code != 0 || !strings.HasPrefix(stderr, "usage: kvscope") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	_, _, stderr := run(t, "run", "-h")
	if !strings.Contains(stderr, "(default 256)") || !strings.Contains(stderr, "1 to 16777216") {
		t.Errorf("run -h does not show -n's default and range:\n%s", stderr)
	}
}

// TestFirstLine checks that an error's message is cut to one line.
func TestFirstLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"engine failure: boom\ngoroutine 7 [running]:\nmain.f()", "engine failure: boom"},
		{"\n  padded  \nrest", "padded"},
		{"", ""},
	} {
		if got := firstLine(tc.in); got != tc.want {
			t.Errorf("firstLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestMainRecoversPanic checks that a command that panics still ends in
// one line and exit 1, not a stack trace.
func TestMainRecoversPanic(t *testing.T) {
	saved := Commands
	defer func() { Commands = saved }()
	Commands = append(Commands[:len(Commands):len(Commands)], Command{"boom", "panics", func([]string, io.Writer, io.Writer) error {
		var m map[string]int
		m["x"]++
		return nil
	}})
	code, _, stderr := run(t, "boom")
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "kvscope boom: internal error: assignment to entry in nil map") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
