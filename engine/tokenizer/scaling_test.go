package tokenizer

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// scalingInputs are adversarial texts of about n bytes: long runs that make
// a backtracking matcher try each start position against the rest of the
// run, and mixtures that switch character class at every code point.
var scalingInputs = []struct {
	name string
	make func(n int) string
}{
	{"spaces then a digit", func(n int) string { return strings.Repeat(" ", n-1) + "1" }},
	{"spaces then a letter", func(n int) string { return strings.Repeat(" ", n-1) + "a" }},
	{"spaces", func(n int) string { return strings.Repeat(" ", n) }},
	{"tabs and spaces then a newline", func(n int) string { return strings.Repeat("\t ", n/2-1) + "x\n" }},
	{"ideographic spaces then a digit", func(n int) string { return strings.Repeat("\u3000", n/3) + "7" }},
	{"digits", func(n int) string { return strings.Repeat("1", n) }},
	{"letters", func(n int) string { return strings.Repeat("a", n) }},
	{"punctuation", func(n int) string { return strings.Repeat("!", n) }},
	{"space and punctuation", func(n int) string { return strings.Repeat(" !", n/2) }},
	{"apostrophes", func(n int) string { return strings.Repeat("'", n) }},
	{"letters and marks", func(n int) string { return strings.Repeat("a\u0301", n/3) }},
	{"newlines", func(n int) string { return strings.Repeat("\n", n) }},
	{"spaces and newlines", func(n int) string { return strings.Repeat(" \r\n", n/3) }},
	{"CJK", func(n int) string { return strings.Repeat("漢", n/3) }},
	{"invalid UTF-8", func(n int) string { return strings.Repeat("\xff", n) }},
	{"mixed", func(n int) string { return strings.Repeat("a 1!'\n\u00e9\t", n/9) }},
}

// checkLinear fails unless the work prepare(2n) returns takes at most 3
// times as long as the work prepare(n) returns. prepare builds the input
// outside the timing. Each is timed several times in CPU time of the
// thread, interleaved and with the garbage collector off, and the best
// times are compared; on a busy
// machine the comparison is tried up to five times, since only a
// consistent excess means a failure: a quadratic cost gives about 4, and a
// linear one 2 to 2.5 where the other core's work shares the caches (2.5
// failed there now and then).
func checkLinear(t *testing.T, n int, prepare func(n int) func()) {
	t.Helper()
	small, large := prepare(n), prepare(2*n)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	timed := func(f func()) time.Duration {
		start := threadCPU()
		f()
		return threadCPU() - start
	}
	var t1, t2 time.Duration
	for range 5 {
		small() // warm up
		t1, t2 = time.Duration(1<<63-1), time.Duration(1<<63-1)
		for range 5 {
			runtime.GC()
			t1 = min(t1, timed(small))
			runtime.GC()
			t2 = min(t2, timed(large))
		}
		if t2 <= t1*3 {
			return
		}
	}
	t.Errorf("size %d took %v, size %d %v: %.1f times as long, want at most 3", n, t1, 2*n, t2, float64(t2)/float64(t1))
}

// Every pre-tokenizer splits in time linear in its input.
func TestPreTokenizersLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	for _, pre := range []string{"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "starcoder"} {
		p, err := newPreTokenizer(pre)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range scalingInputs {
			t.Run(pre+"/"+in.name, func(t *testing.T) {
				checkLinear(t, scalingN, func(n int) func() {
					text := in.make(n)
					return func() { p.split(text) }
				})
			})
		}
	}
}
