package cli

import (
	"fmt"
	"io"
	"math"
	"os"

	"kvscope/engine/sample"
)

func perplexityCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("perplexity", "-m FILE -f TEXTFILE", stderr)
	model := fs.String("m", "", "GGUF model `file`")
	file := fs.String("f", "", "text `file` to score")
	cf := addCacheFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireModel(*model); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("no text file given: pass -f FILE")
	}
	text, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	s, err := openSession(*model, cf.get())
	if err != nil {
		return err
	}
	defer s.close()
	ids := s.tok.Encode(string(text), true, false)
	ppl, n, err := s.perplexity(ids, cf.get())
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d tokens scored in windows of %d\n", n, s.ctx)
	fmt.Fprintf(stdout, "perplexity: %.4f\n", ppl)
	return nil
}

// perplexity scores ids (which start with BOS) as one sequence, split into
// consecutive windows of the context length when longer, each run on a fresh
// cache: it returns exp of the mean negative log-likelihood of every token
// after the first of its window, and how many tokens were scored.
func (s *session) perplexity(ids []int, cf cacheFlags) (float64, int, error) {
	if len(ids) < 2 {
		return 0, 0, fmt.Errorf("the text has %d tokens; at least 2 are needed", len(ids))
	}
	var nll float64
	var n int
	var lp []float32
	for lo := 0; lo < len(ids)-1; lo += s.ctx {
		win := ids[lo:min(lo+s.ctx, len(ids))]
		if len(win) < 2 {
			break
		}
		if lo > 0 {
			if err := s.resetCache(cf); err != nil {
				return 0, 0, err
			}
		}
		logits, err := s.forward(win, 0, func(i int) bool { return i < len(win)-1 })
		if err != nil {
			return 0, 0, err
		}
		for i, l := range logits {
			lp = sample.LogSoftmax(lp, l)
			nll -= float64(lp[win[i+1]])
			n++
		}
	}
	return math.Exp(nll / float64(n)), n, nil
}
