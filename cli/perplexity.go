package cli

import (
	"fmt"
	"io"
	"math"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
	"kvscope/engine/sample"
)

func perplexityCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("perplexity", "-m FILE -f TEXTFILE", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	file := fs.String("f", "", "text `file` to score")
	cfg := engine.DefaultConfig()
	addCacheFlags(fs, &cfg)
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	if cfg.Context == 1 {
		return fs.usageErr("-c 1: a window of 1 token scores nothing; give at least 2 (or 0 for the model's context)")
	}
	l, ids, err := loadText(*path, *file, *be)
	if err != nil {
		return err
	}
	defer l.close()
	defer func() {
		if err == nil { // a failure's one line stays one line
			fmt.Fprintln(stderr, l.backend)
		}
	}()
	ppl, n, win, err := perplexity(l.m, ids, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d tokens scored in windows of %d; K/V cache %s/%s in %d-token blocks (%s)\n",
		n, win, cfg.Cache.K, cfg.Cache.V, cfg.Cache.BlockSize, cfg.Cache.Allocator)
	fmt.Fprintf(stdout, "perplexity: %.4f\n", ppl)
	return nil
}

// loadText reads a text file, loads a model and tokenizes the text with it
// (BOS first).
func loadText(model, file, be string) (*loaded, []int, error) {
	text, err := readText(file)
	if err != nil {
		return nil, nil, err
	}
	l, err := load(model, be)
	if err != nil {
		return nil, nil, err
	}
	return l, l.tok.Encode(text, true, false), nil
}

// perplexity scores ids (which start with BOS) as one sequence, split into
// consecutive windows of the context length when longer, each run on a fresh
// cache: it returns exp of the mean negative log-likelihood of every token
// after the first of its window, how many tokens were scored, and the
// window length. It keeps no logits: each position's are reduced to the
// log-probability of the next token as they come.
func perplexity(m *model.Model, ids []int, cfg engine.Config) (float64, int, int, error) {
	if len(ids) < 2 {
		return 0, 0, 0, fmt.Errorf("the text has %d tokens; at least 2 are needed", len(ids))
	}
	if cfg.Context > m.Context {
		return 0, 0, 0, fmt.Errorf("-c %d is outside 2..%d, the model's training context", cfg.Context, m.Context)
	}
	ctx := cfg.ContextFor(m)
	if ctx < 2 {
		return 0, 0, 0, fmt.Errorf("a context of %d token scores nothing; at least 2 are needed", ctx)
	}
	var acc nllSum
	for lo := 0; lo < len(ids)-1; lo += ctx {
		win := ids[lo:min(lo+ctx, len(ids))]
		if len(win) < 2 {
			break
		}
		err := teacherForced(m, win, cfg.Cache, ctx, func(i int, logits []float32) {
			if i+1 < len(win) {
				acc.add(logits, win[i+1])
			}
		})
		if err != nil {
			return 0, 0, 0, err
		}
	}
	return acc.perplexity(), acc.n, ctx, nil
}

// nllSum accumulates the negative log-likelihood of tokens, one position's
// logits at a time, in one vocabulary-sized buffer.
type nllSum struct {
	lp  []float32 // log-softmax scratch, reused
	nll float64
	n   int
}

// add scores token next under logits.
func (s *nllSum) add(logits []float32, next int) {
	s.lp = sample.LogSoftmax(s.lp, logits)
	s.nll -= float64(s.lp[next])
	s.n++
}

// perplexity is exp of the mean negative log-likelihood (NaN before any add).
func (s *nllSum) perplexity() float64 { return math.Exp(s.nll / float64(s.n)) }

// maxRows bounds the rows of one forward call, which bounds its scratch
// memory (and its logits) on long texts.
const maxRows = 256

// teacherForced runs ids as one sequence through a fresh cache with the
// given settings (its block table comes from a real cache manager) and
// calls each with every position's logits, in order; the logits are not
// kept after each returns.
func teacherForced(m *model.Model, ids []int, c engine.CacheConfig, ctx int, each func(pos int, logits []float32)) error {
	st, mgr, err := engine.NewPool(m, c, max(ctx, len(ids)), 1, 0) // one sequence: the window

	if err != nil {
		return err
	}
	toks := make([]int32, len(ids))
	for i, id := range ids {
		toks[i] = int32(id)
	}
	if _, err := mgr.Allocate(1, toks, kvcache.SeqOptions{}); err != nil {
		return fmt.Errorf("the %d-token window does not fit the cache: %w", len(ids), err)
	}
	table := mgr.BlockTable(1)
	var b model.Batch
	for lo := 0; lo < len(ids); lo += maxRows {
		b.Reset()
		for i := lo; i < min(lo+maxRows, len(ids)); i++ {
			b.Add(ids[i], i, table, true)
		}
		logits, err := m.Forward(st, &b)
		if err != nil {
			return err
		}
		for i, row := range logits {
			each(lo+i, row)
		}
	}
	return nil
}

// klDiv returns KL(softmax(p) ‖ softmax(q)).
func klDiv(p, q []float32) float64 {
	lp := sample.LogSoftmax(nil, p)
	lq := sample.LogSoftmax(nil, q)
	var kl float64
	for i := range lp {
		kl += math.Exp(float64(lp[i])) * float64(lp[i]-lq[i])
	}
	return kl
}
