package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// coldRun is one fresh process run to its first token: its wall time from
// start to exit, its peak RSS (getrusage of the child) and, for kvscope,
// the prefill rate it reported.
type coldRun struct {
	wall    time.Duration
	maxRSS  int64   // bytes
	prefill float64 // tokens/s, 0 where not reported
	err     error
}

// coldPrompt returns a text of about n tokens for the model at path
// (counted with its tokenizer, BOS included), and the count.
func coldPrompt(path string, n int) (string, int, error) {
	tok, err := loadTokenizer(path)
	if err != nil {
		return "", 0, err
	}
	words := strings.Fields("the quick brown fox jumps over the lazy dog while a cat sleeps in the warm sun")
	var b strings.Builder
	count := 0
	for i := 0; count < n && i < 4*n; i++ {
		next := b.String() + " " + words[i%len(words)]
		if i == 0 {
			next = words[0]
		}
		c := len(tok.Encode(next, true, false))
		if c > n {
			break
		}
		b.Reset()
		b.WriteString(next)
		count = c
	}
	return b.String(), count, nil
}

// runCold runs bin with args from an empty folder (llama.cpp's ggml loads
// CPU variants from the current folder too) and measures it.
func runCold(bin string, args ...string) coldRun {
	dir, err := os.MkdirTemp("", "kvscope-cold-")
	if err != nil {
		return coldRun{err: err}
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, nil
	t0 := time.Now()
	err = cmd.Start()
	var peak int64
	if err == nil {
		done := make(chan struct{})
		polled := make(chan int64)
		go func() { polled <- pollHWM(cmd.Process.Pid, done) }()
		err = cmd.Wait()
		close(done)
		peak = <-polled
	}
	r := coldRun{wall: time.Since(t0), maxRSS: peak}
	if r.maxRSS == 0 && cmd.ProcessState != nil {
		r.maxRSS = maxRSS(cmd.ProcessState)
	}
	if err != nil {
		r.err = fmt.Errorf("%s: %v: %s", filepath.Base(bin), err, firstLine(lastLine(stderr.String())))
		return r
	}
	if m := promptRate.FindSubmatch(stderr.Bytes()); m != nil { // kvscope run's summary
		r.prefill, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return r
}

// pollHWM reads the peak resident set (VmHWM) of process pid from
// /proc every 5 ms until done is closed, and returns the last it read, in
// bytes (0 where /proc has none). The child's getrusage figure cannot
// serve on Linux: a child that Go starts shares its parent's memory until
// it execs, and the kernel counts the parent's resident set into the
// child's peak then (a few hundred MB here).
func pollHWM(pid int, done <-chan struct{}) int64 {
	path := fmt.Sprintf("/proc/%d/status", pid)
	var peak int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					peak = max(peak, kb*1024)
				}
			}
		}
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}

// promptRate finds kvscope run's prompt rate in its summary line.
var promptRate = regexp.MustCompile(`prompt: \d+ tokens in [0-9.]+ s \(([0-9.]+) tokens/s\)`)

// lastLine returns s's last non-empty line.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// coldRuns is a model's cold starts, one a round of bench speed: a fresh
// kvscope process (this executable's `run`) and, where the peer has it,
// llama-cli -n 1 -st, each on the model with a prompt of o.prompt tokens,
// timed to the first token. Run in the rounds, each cold prompt meets the
// bandwidth of its round's steady prefill: this machine's swings from
// minute to minute, and one cold run against the best of several steady
// ones would measure the minutes, not the cold start.
type coldRuns struct {
	path, text, cli string
	n               int
	o               speedOpts
	skip            string    // why kvscope's runs are not made, if they are not
	ours, theirs    []coldRun // each round's
	ratios          []float64 // each round's cold prompt over that round's steady prefill
}

// newColdRuns prepares the cold starts of the model at path; peer is
// llama.cpp's folder ("" for none).
func newColdRuns(path string, o speedOpts, peer string) *coldRuns {
	c := &coldRuns{o: o}
	self, err := os.Executable()
	if err != nil || strings.HasSuffix(self, ".test") {
		c.skip = "not run from a kvscope binary"
		return c
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the runs start in an empty folder
	}
	c.path = path
	if c.text, c.n, err = coldPrompt(path, o.prompt); err != nil {
		c.skip = err.Error()
		return c
	}
	if peer != "" {
		if st, err := os.Stat(filepath.Join(peer, "llama-cli")); err == nil && st.Mode().IsRegular() {
			c.cli = filepath.Join(peer, "llama-cli")
		}
	}
	return c
}

// runOurs runs kvscope once; steady is its prefill rate in this round (0:
// none).
func (c *coldRuns) runOurs(steady float64) {
	if c.skip != "" {
		return
	}
	self, _ := os.Executable()
	args := []string{"run", "-m", c.path, "-c", "2048", "-n", "1", "-p", c.text}
	if c.o.backend != "" {
		args = append(args, "--backend", c.o.backend)
	}
	r := runCold(self, args...)
	c.ours = append(c.ours, r)
	if r.err == nil && r.prefill > 0 && steady > 0 {
		c.ratios = append(c.ratios, r.prefill/steady)
	}
}

// runTheirs runs llama-cli once, where there is one.
func (c *coldRuns) runTheirs() {
	if c.skip != "" || c.cli == "" {
		return
	}
	c.theirs = append(c.theirs, runCold(c.cli, "-m", c.path, "-c", "2048", "-n", "1", "-st", "-t", strconv.Itoa(c.o.threads), "-p", c.text))
}

// best returns the fastest of runs (the shortest wall time, the highest
// prefill rate) with the largest peak RSS of them all, or the first
// failure.
func best(runs []coldRun) coldRun {
	var b coldRun
	for i, r := range runs {
		if r.err != nil {
			return r
		}
		if i == 0 {
			b = r
			continue
		}
		b.wall = min(b.wall, r.wall)
		b.prefill = max(b.prefill, r.prefill)
		b.maxRSS = max(b.maxRSS, r.maxRSS)
	}
	return b
}

// write prints the cold starts' times to the first token and peak RSS
// beside the file's size; steady is kvscope's best prefill rate from the
// table (0: none).
func (c *coldRuns) write(out io.Writer, size int64, steady float64) {
	if c.skip != "" {
		fmt.Fprintf(out, "cold start: not run (%s)\n", c.skip)
		return
	}
	fileRatio := func(r coldRun) string {
		return fmt.Sprintf("%s (%.2f× the file)", humanize.Bytes(uint64(r.maxRSS)), float64(r.maxRSS)/float64(max(size, 1)))
	}
	of := ""
	if len(c.ours) > 1 {
		of = fmt.Sprintf(" (the best of %d runs, one a round; peak RSS the largest)", len(c.ours))
	}
	if ours := best(c.ours); ours.err != nil {
		fmt.Fprintf(out, "cold start: kvscope failed: %v\n", ours.err)
	} else {
		first := ""
		if ours.prefill > 0 && steady > 0 {
			first = fmt.Sprintf(", its prompt at %.1f tokens/s (%.2f× the steady prefill above", ours.prefill, ours.prefill/steady)
			if len(c.ratios) > 1 {
				first += fmt.Sprintf("; the rounds' median of each run over its round's prefill %.2f", median(c.ratios))
			}
			first += ")"
		}
		fmt.Fprintf(out, "cold start, %d-token prompt, process start to exit after the first token%s: kvscope run %.2f s%s; peak RSS %s\n",
			c.n, of, ours.wall.Seconds(), first, fileRatio(ours))
	}
	switch theirs := best(c.theirs); {
	case c.cli == "":
		fmt.Fprintln(out, "cold start: llama-cli not run (none beside the peer's benchmarks)")
	case theirs.err != nil:
		fmt.Fprintf(out, "cold start: llama-cli failed: %v\n", theirs.err)
	default:
		fmt.Fprintf(out, "cold start, the same prompt: llama-cli -n 1 -st %.2f s; peak RSS %s\n", theirs.wall.Seconds(), fileRatio(theirs))
	}
}
