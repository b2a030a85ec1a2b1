package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/synth"
)

func benchCmd(args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "cache":
		return benchCache(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "speed":
		return benchSpeed(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "sample":
		return benchSample(args[1:], stdout, stderr)
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprintln(stderr, "usage: kvscope bench cache [flags]  K/V precision quality and capacity, and allocator waste")
		fmt.Fprintln(stderr, "       kvscope bench speed [flags]  prefill and decode tokens/s of a real model's shape, beside llama.cpp's on the same file")
		fmt.Fprintln(stderr, "       kvscope bench sample [flags] sampling time per token with and without a JSON schema, on a 128k-token vocabulary")
		return flag.ErrHelp
	case len(args) == 0:
		return &usageError{cmd: "bench", err: errors.New("no benchmark given: want cache, speed or sample")}
	}
	return &usageError{cmd: "bench", err: fmt.Errorf("unknown benchmark %q: want cache, speed or sample", args[0])}
}

// sharedPath is a file in the shared test data ($KVSCOPE_TESTDATA or
// ../shared), the default inputs of the benchmarks.
func sharedPath(rel string) string {
	dir := os.Getenv("KVSCOPE_TESTDATA")
	if dir == "" {
		dir = filepath.Join("..", "shared")
	}
	return filepath.Join(dir, filepath.FromSlash(rel))
}

func benchCache(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench cache", "[-m MODEL] [-f TEXT]", stderr)
	path := fs.String("m", sharedPath("models/stories260K.gguf"), "GGUF model `file` for the quality table")
	file := fs.String("f", sharedPath("reference/stories260K-textA.txt"), "text `file` scored for the quality table")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	// The quality table runs on the pure Go backend, whatever
	// $KVSCOPE_BACKEND says: its arithmetic is f32 throughout, so the K/V
	// precision is the only difference between a row and the f32
	// reference. A native backend rounds activations for its matrix
	// kernels, and a small change in K/V flips some of those roundings:
	// on parity-llama3 that alone is a KL of 3e-4 at f16.
	l, ids, err := loadText(*path, *file, "go")
	if err != nil {
		return err
	}
	defer l.close()
	if len(ids) < 2 {
		return fmt.Errorf("-f %s: the text has %d tokens; at least 2 are needed", *file, len(ids))
	}
	if err := precisionTable(stdout, l.m, ids); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := headDimTable(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "Allocator waste on synthetic workloads (lognormal lengths with the PagedAttention paper's means;")
	fmt.Fprintln(stdout, "the paper reports 60–80% waste for reservation-based systems and under 4% for vLLM at block size 16).")
	for _, w := range []kvcache.Workload{kvcache.ShareGPTLike, kvcache.AlpacaLike} {
		rows, err := kvcache.WasteTable(w, 64*1024)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		if err := kvcache.WriteWasteTable(stdout, rows); err != nil {
			return err
		}
	}
	return nil
}

// precisionTable prints, per K/V precision and block size, the mean KL of
// next-token distributions from f32 K/V on ids (teacher forced), the bytes
// per token, and the tokens a budget holds in 1,000-token sequences
// relative to f16 (scales, zero points and f16 residuals counted).
func precisionTable(out io.Writer, m *model.Model, ids []int) error {
	ctx := min(len(ids), m.Context)
	ids = ids[:ctx]
	fmt.Fprintf(out, "K/V precision on %d tokens, pure Go backend (mean KL from f32 K/V; capacity: tokens a budget holds in 1,000-token sequences, relative to f16, key residuals counted)\n",
		len(ids))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "precision\tblock\tKL\tbits/value K\tbits/value V\tbytes/token\tcapacity\t")
	for _, bs := range []int{16, 32} {
		cc := engine.DefaultConfig().Cache
		cc.BlockSize, cc.K, cc.V = bs, kvstore.F32, kvstore.F32
		ref := make([][]float32, len(ids))
		if err := teacherForced(m, ids, cc, ctx, func(i int, l []float32) { ref[i] = l }); err != nil {
			return err
		}
		for _, p := range kvstore.Precisions() {
			cc.K, cc.V = p, p
			var kl float64
			if err := teacherForced(m, ids, cc, ctx, func(i int, l []float32) { kl += klDiv(ref[i], l) }); err != nil {
				return err
			}
			kl /= float64(len(ref))
			sc := m.CacheConfig(bs, 1, p, p)
			kb, vb := kvstore.BitsPerValue(sc)
			fmt.Fprintf(tw, "%s\t%d\t%.3g\t%.2f\t%.2f\t%.0f\t%.2f×\t\n", p, bs, kl, kb, vb, kvstore.BytesPerToken(sc), capacityRatio(sc))
		}
	}
	return tw.Flush()
}

// capacityRatio is how many times the tokens of f16 K/V a budget holds at
// store c's precisions, in 1,000-token sequences: the bytes of such a
// sequence at f16 over its bytes under c (its blocks and, once a sequence,
// the residual of a partly filled key group), with no rounding to whole
// sequences.
func capacityRatio(c kvstore.Config) float64 {
	f := c
	f.K, f.V = kvstore.F16, kvstore.F16
	seq := kvstore.SequenceBytes(c, 1000)
	if seq == 0 {
		return 0
	}
	return float64(kvstore.SequenceBytes(f, 1000)) / float64(seq)
}

// kvShape is a model's K/V shape, for headDimTable.
type kvShape struct {
	name                     string
	layers, kvHeads, headDim int
}

// headDimShapes are headDimTable's columns: stories260K (head dim 8), the
// parity Llama 3 (32), gen-model's TinyLlama preset (64), and Llama 3 8B's
// shape (128).
var headDimShapes = []kvShape{
	{"stories260K", 5, 4, 8},
	{"parity-llama3", 2, 1, 32},
	{"gen-model " + synth.TinyLlama.Name[len("synthetic "):len("synthetic TinyLlama-1.1B")], synth.TinyLlama.Layers, synth.TinyLlama.KVHeads, synth.TinyLlama.HeadDim()},
	{"Llama-3-8B shape", 32, 8, 128},
}

// headDimTable prints, per K/V precision and block size, the bits a K and a
// V value take (scales and zero points counted) and the capacity relative
// to f16 (residuals counted), at each of headDimShapes' head dims: what
// the capacity view and the lessons count, from the same functions.
func headDimTable(out io.Writer) error {
	fmt.Fprintln(out, "Bits a value (K/V, scales and zero points counted) and capacity relative to f16 (1,000-token sequences, key residuals counted), by head dim")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "precision\tblock\t")
	for _, sh := range headDimShapes {
		fmt.Fprintf(tw, "D=%d K/V bits\tD=%d capacity\t", sh.headDim, sh.headDim)
	}
	fmt.Fprintln(tw)
	for _, bs := range []int{16, 32} {
		for _, p := range kvstore.Precisions() {
			fmt.Fprintf(tw, "%s\t%d\t", p, bs)
			for _, sh := range headDimShapes {
				c := kvstore.Config{Layers: sh.layers, KVHeads: sh.kvHeads, HeadDim: sh.headDim, BlockSize: bs, Blocks: 1, K: p, V: p}
				kb, vb := kvstore.BitsPerValue(c)
				fmt.Fprintf(tw, "%.2f/%.2f\t%.2f×\t", kb, vb, capacityRatio(c))
			}
			fmt.Fprintln(tw)
		}
	}
	fmt.Fprint(tw, "model\t\t")
	for _, sh := range headDimShapes {
		fmt.Fprintf(tw, "%s\t%d×%d heads\t", sh.name, sh.layers, sh.kvHeads)
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
