package cli

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"kvscope/engine/sample"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "-m FILE -p PROMPT [-n N] [--temp T] [--seed S]", stderr)
	model := fs.String("m", "", "GGUF model `file`")
	var prompts multiFlag
	fs.Var(&prompts, "p", "the `prompt`")
	n := fs.Int("n", -1, "tokens to generate (-1: until end of text or a full context)")
	sp := sample.DefaultParams()
	temp := fs.Float64("temp", float64(sp.Temperature), "temperature (0: greedy)")
	seed := fs.Int64("seed", -1, "random seed (-1: random)")
	topK := fs.Int("top-k", sp.TopK, "top-k sampling (0: off)")
	topP := fs.Float64("top-p", float64(sp.TopP), "top-p sampling (1: off)")
	minP := fs.Float64("min-p", float64(sp.MinP), "min-p sampling (0: off)")
	rep := fs.Float64("repeat-penalty", float64(sp.RepeatPenalty), "repetition penalty (1: off)")
	cf := addCacheFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireModel(*model); err != nil {
		return err
	}
	if len(prompts) != 1 {
		return fmt.Errorf("give exactly one prompt with -p (got %d)", len(prompts))
	}
	sp.Temperature, sp.TopK, sp.TopP, sp.MinP, sp.RepeatPenalty = float32(*temp), *topK, float32(*topP), float32(*minP), float32(*rep)
	sp.Seed = uint64(*seed)
	if *seed < 0 {
		sp.Seed = rand.Uint64()
	}
	sampler, err := sample.New(sp)
	if err != nil {
		return err
	}
	s, err := openSession(*model, cf.get())
	if err != nil {
		return err
	}
	defer s.close()

	ids := s.tok.Encode(prompts[0], true, true)
	if len(ids) == 0 {
		return fmt.Errorf("the prompt is empty")
	}
	if len(ids) >= s.ctx {
		return fmt.Errorf("the prompt is %d tokens long; the context holds %d, so nothing can be generated", len(ids), s.ctx)
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	fmt.Fprint(out, prompts[0])
	out.Flush()

	t0 := time.Now()
	logits, err := s.forward(ids, 0, func(i int) bool { return i == len(ids)-1 })
	if err != nil {
		return err
	}
	tPrompt := time.Since(t0)

	t1 := time.Now()
	dec := s.tok.NewDecoder()
	history := append([]int(nil), ids...)
	generated := 0
	last := logits[0]
	stop := "length"
	for *n < 0 || generated < *n {
		next := sampler.Sample(last, history)
		if s.tok.IsEOG(next) {
			stop = "end of text"
			break
		}
		if len(history) >= s.ctx {
			stop = "context full"
			break
		}
		fmt.Fprint(out, dec.Add(next))
		out.Flush()
		generated++
		pos := len(history)
		history = append(history, next)
		l, err := s.forward([]int{next}, pos, func(int) bool { return true })
		if err != nil {
			return err
		}
		last = l[0]
	}
	fmt.Fprintln(out, dec.Flush())
	tGen := time.Since(t1)
	fmt.Fprintf(stderr, "\nprompt: %d tokens in %.3f s (%.1f tokens/s); generation: %d tokens in %.3f s (%.1f tokens/s); stopped: %s\n",
		len(ids), tPrompt.Seconds(), rate(len(ids), tPrompt), generated, tGen.Seconds(), rate(generated, tGen), stop)
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
