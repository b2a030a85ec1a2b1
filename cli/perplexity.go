package cli

import (
	"fmt"
	"io"
	"math"
	"os"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/sample"
)

func perplexityCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("perplexity", "-m FILE -f TEXTFILE", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	file := fs.String("f", "", "text `file` to score")
	cf := addCacheFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	cfg, err := cf.config()
	if err != nil {
		return err
	}
	l, ids, err := loadText(*path, *file)
	if err != nil {
		return err
	}
	defer l.close()
	ppl, n, win, err := perplexity(l.m, ids, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d tokens scored in windows of %d; K/V cache %s/%s in %d-token blocks (%s)\n",
		n, win, cfg.Cache.K, cfg.Cache.V, cfg.Cache.BlockSize, cfg.Cache.Allocator)
	fmt.Fprintf(stdout, "perplexity: %.4f\n", ppl)
	return nil
}

// loadText loads a model and tokenizes a text file with it (BOS first).
func loadText(model, file string) (*loaded, []int, error) {
	if file == "" {
		return nil, nil, fmt.Errorf("no text file given: pass -f FILE")
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	l, err := load(model)
	if err != nil {
		return nil, nil, err
	}
	return l, l.tok.Encode(string(text), true, false), nil
}

// perplexity scores ids (which start with BOS) as one sequence, split into
// consecutive windows of the context length when longer, each run on a fresh
// cache: it returns exp of the mean negative log-likelihood of every token
// after the first of its window, how many tokens were scored, and the
// window length.
func perplexity(m *model.Model, ids []int, cfg engine.Config) (float64, int, int, error) {
	if len(ids) < 2 {
		return 0, 0, 0, fmt.Errorf("the text has %d tokens; at least 2 are needed", len(ids))
	}
	ctx := m.Context
	if cfg.Context > 0 {
		ctx = min(ctx, cfg.Context)
	}
	var nll float64
	var n int
	var lp []float32
	for lo := 0; lo < len(ids)-1; lo += ctx {
		win := ids[lo:min(lo+ctx, len(ids))]
		if len(win) < 2 {
			break
		}
		logits, err := teacherForced(m, win, cfg.Cache, ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		for i := range len(win) - 1 {
			lp = sample.LogSoftmax(lp, logits[i])
			nll -= float64(lp[win[i+1]])
			n++
		}
	}
	return math.Exp(nll / float64(n)), n, ctx, nil
}

// maxRows bounds the rows of one forward call, which bounds its scratch
// memory on long texts.
const maxRows = 256

// teacherForced runs ids as one sequence through a fresh cache with the
// given settings (its block table comes from a real cache manager) and
// returns the logits of every position.
func teacherForced(m *model.Model, ids []int, c engine.CacheConfig, ctx int) ([][]float32, error) {
	sc, _, err := engine.PoolConfig(m, c, ctx, 1)
	if err != nil {
		return nil, err
	}
	st, err := kvstore.New(sc)
	if err != nil {
		return nil, err
	}
	mgr, err := kvcache.New(kvcache.Config{BlockSize: sc.BlockSize, BlockBytes: kvstore.BlockBytes(sc), Budget: int64(sc.Blocks) * int64(kvstore.BlockBytes(sc)),
		Allocator: c.Allocator, Eviction: c.Eviction, MaxLen: len(ids)}, st)
	if err != nil {
		return nil, err
	}
	toks := make([]int32, len(ids))
	for i, id := range ids {
		toks[i] = int32(id)
	}
	if _, err := mgr.Allocate(1, toks, kvcache.SeqOptions{}); err != nil {
		return nil, fmt.Errorf("the %d-token window does not fit the cache: %w", len(ids), err)
	}
	table := mgr.BlockTable(1)
	var out [][]float32
	var b model.Batch
	for lo := 0; lo < len(ids); lo += maxRows {
		b.Reset()
		for i := lo; i < min(lo+maxRows, len(ids)); i++ {
			b.Add(ids[i], i, table, true)
		}
		logits, err := m.Forward(st, &b)
		if err != nil {
			return nil, err
		}
		out = append(out, logits...)
	}
	return out, nil
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
