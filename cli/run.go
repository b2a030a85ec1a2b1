package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"kvscope/engine"
	"kvscope/engine/constrain"
)

// defaultTokens is run's -n default.
const defaultTokens = 256

func runCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("run", "-m FILE -p PROMPT [-p PROMPT ...] [-n N] [--temp T] [--seed S]", stderr)
	model := fs.String("m", "", "GGUF model `file`")
	var ps prompts
	fs.Var(&ps, "p", fmt.Sprintf("a `prompt`; repeat -p to run up to %d at once", maxPrompts))
	n := intFlag(fs, "n", defaultTokens, 1, maxTokens, "most tokens to generate per prompt (generation also ends at end of text, and with --overflow stop at the full context)")
	special := fs.Bool("parse-special", false, "turn special-token text in the prompts, such as <s>, into those tokens")
	schemaFile := fs.String("json-schema", "", "constrain the output to JSON valid under the JSON Schema in `file`")
	sampling := samplingFlags(fs)
	cfg := engine.DefaultConfig()
	intVar(fs, &cfg.Sched.MaxSeqs, "parallel", 1, maxParallel, "most sequences decoding at once")
	addCacheFlags(fs, &cfg)
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*model); err != nil {
		return err
	}
	if len(ps) == 0 {
		return fmt.Errorf("no prompt given: pass -p PROMPT")
	}
	sp, err := sampling()
	if err != nil {
		return err
	}
	var cons *constrain.Grammar
	if *schemaFile != "" {
		data, err := os.ReadFile(*schemaFile)
		if err != nil {
			return fmt.Errorf("--json-schema: %w", err)
		}
		if cons, err = constrain.Schema(data); err != nil {
			return fmt.Errorf("--json-schema %s: %w", *schemaFile, err)
		}
	}
	cfg.Sched.StepTokens = max(cfg.Sched.StepTokens, cfg.Sched.MaxSeqs)
	l, err := load(*model, *be)
	if err != nil {
		return err
	}
	defer l.close()
	defer func() {
		if err == nil { // a failure's one line stays one line
			fmt.Fprintln(stderr, l.backend)
		}
	}()
	e, err := l.engine(cfg)
	if err != nil {
		return err
	}
	defer e.Close()

	t0 := time.Now()
	streams := make([]*engine.Stream, len(ps))
	failed := make([]error, len(ps))
	for i, p := range ps {
		streams[i], failed[i] = e.Submit(context.Background(), engine.Request{Prompt: p, ParseSpecial: *special, MaxTokens: *n, Sampling: &sp, Label: fmt.Sprintf("prompt %d", i+1), Constraint: cons})
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	if len(ps) == 1 {
		if failed[0] != nil {
			return failed[0]
		}
		return streamOne(out, stderr, ps[0], streams[0], t0)
	}
	// Several prompts run together; print each when it is complete.
	total := 0
	for i, s := range streams {
		var text string
		if s != nil {
			texts, finals := s.Collect()
			text = texts[0]
			if f := finals[0]; f.Reason == engine.FinishError {
				failed[i] = f.Err
			}
			total += finals[0].Generated
		}
		fmt.Fprintf(out, "### prompt %d\n%s%s\n", i+1, ps[i], text)
		if failed[i] != nil {
			fmt.Fprintf(out, "(failed: %s)\n", firstLine(failed[i].Error()))
		}
	}
	d := time.Since(t0)
	fmt.Fprintf(out, "### %d prompts: %d tokens generated in %.3f s, %.1f tokens/s aggregate\n", len(ps), total, d.Seconds(), rate(total, d))
	return failures(failed)
}

// failures sums up the prompts that failed (nil where none did): how many,
// which, and the first one's error.
func failures(errs []error) error {
	var which []string
	var first error
	for i, err := range errs {
		if err != nil {
			which = append(which, strconv.Itoa(i+1))
			first = cmp.Or(first, err)
		}
	}
	switch len(which) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("prompt %s of %d failed: %w", which[0], len(errs), first)
	}
	return fmt.Errorf("prompts %s of %d failed; prompt %s: %w", strings.Join(which, ", "), len(errs), which[0], first)
}

// prompts collects run's -p flags, refusing an empty prompt and more than
// maxPrompts.
type prompts []string

func (p *prompts) String() string { return strings.Join(*p, ", ") }

func (p *prompts) Set(s string) error {
	switch {
	case s == "":
		return errors.New("the prompt is empty")
	case len(*p) == maxPrompts:
		return fmt.Errorf("at most %d prompts at once", maxPrompts)
	}
	*p = append(*p, s)
	return nil
}

// streamOne prints one prompt's continuation as it arrives, then the speeds.
func streamOne(out *bufio.Writer, stderr io.Writer, prompt string, s *engine.Stream, t0 time.Time) error {
	fmt.Fprint(out, prompt)
	out.Flush()
	var first time.Time
	var final engine.Chunk
	for c := range s.C {
		if c.Token >= 0 && first.IsZero() {
			first = time.Now()
		}
		fmt.Fprint(out, c.Text)
		out.Flush()
		if c.Done {
			final = c
		}
	}
	fmt.Fprintln(out)
	out.Flush()
	if final.Reason == engine.FinishError {
		return final.Err
	}
	if first.IsZero() {
		first = time.Now()
	}
	tPrompt, tGen := first.Sub(t0), time.Since(first)
	computed := final.PromptTokens - final.CachedTokens
	stop := string(final.Reason)
	if final.Err != nil {
		stop += " (" + final.Err.Error() + ")"
	}
	fmt.Fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.1f tokens/s); generation: %d tokens in %.3f s (%.1f tokens/s); stopped: %s\n",
		computed, tPrompt.Seconds(), rate(computed, tPrompt), final.Generated, tGen.Seconds(), rate(max(final.Generated-1, 0), tGen), stop)
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
