package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"kvscope/engine"
	"kvscope/engine/sample"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "-m FILE -p PROMPT [-p PROMPT ...] [-n N] [--temp T] [--seed S]", stderr)
	model := fs.String("m", "", "GGUF model `file`")
	var prompts multiFlag
	fs.Var(&prompts, "p", "a `prompt`; repeat -p to run several at once")
	n := fs.Int("n", -1, "tokens to generate per prompt (-1: until end of text or a full context)")
	sp := sample.DefaultParams()
	temp := fs.Float64("temp", float64(sp.Temperature), "temperature (0: greedy)")
	seed := fs.Int64("seed", -1, "random seed (-1: random)")
	topK := fs.Int("top-k", sp.TopK, "top-k sampling (0: off)")
	topP := fs.Float64("top-p", float64(sp.TopP), "top-p sampling (1: off)")
	minP := fs.Float64("min-p", float64(sp.MinP), "min-p sampling (0: off)")
	rep := fs.Float64("repeat-penalty", float64(sp.RepeatPenalty), "repetition penalty (1: off)")
	parallel := fs.Int("parallel", 8, "most sequences decoding at once")
	cf := addCacheFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireModel(*model); err != nil {
		return err
	}
	if len(prompts) == 0 {
		return fmt.Errorf("no prompt given: pass -p PROMPT")
	}
	sp.Temperature, sp.TopK, sp.TopP, sp.MinP, sp.RepeatPenalty = float32(*temp), *topK, float32(*topP), float32(*minP), float32(*rep)
	sp.Seed = uint64(*seed)
	if *seed < 0 {
		sp.Seed = rand.Uint64()
	}
	if err := sp.Validate(); err != nil {
		return err
	}
	cfg, err := cf.config()
	if err != nil {
		return err
	}
	cfg.Sched.MaxSeqs = *parallel
	cfg.Sched.StepTokens = max(cfg.Sched.StepTokens, *parallel)
	l, err := load(*model)
	if err != nil {
		return err
	}
	defer l.close()
	e, err := l.engine(cfg)
	if err != nil {
		return err
	}
	defer e.Close()

	maxTokens := max(*n, 0)
	t0 := time.Now()
	streams := make([]*engine.Stream, len(prompts))
	for i, p := range prompts {
		s, err := e.Submit(context.Background(), engine.Request{Prompt: p, MaxTokens: maxTokens, Sampling: &sp, Label: fmt.Sprintf("prompt %d", i+1)})
		if err != nil {
			if len(prompts) > 1 {
				return fmt.Errorf("prompt %d: %w", i+1, err)
			}
			return err
		}
		streams[i] = s
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	if len(prompts) == 1 {
		return streamOne(out, stderr, prompts[0], streams[0], t0)
	}
	// Several prompts run together; print each when it is complete.
	total := 0
	for i, s := range streams {
		texts, finals := s.Collect()
		fmt.Fprintf(out, "### prompt %d\n%s%s\n", i+1, prompts[i], texts[0])
		if f := finals[0]; f.Reason == engine.FinishError {
			fmt.Fprintf(out, "(failed: %v)\n", f.Err)
		}
		total += finals[0].Generated
	}
	d := time.Since(t0)
	fmt.Fprintf(out, "### %d prompts: %d tokens generated in %.3f s, %.1f tokens/s aggregate\n", len(prompts), total, d.Seconds(), rate(total, d))
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
