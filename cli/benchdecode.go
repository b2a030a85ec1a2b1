package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// llamaCppQ4_0 are llama.cpp's figures on this workplace's 2-core machines
// for the same TinyLlama shape in Q4_0 (shared/README.md): single-sequence
// decode, and aggregate decode with several sequences (llama-batched-bench).
var llamaCppQ4_0 = map[int]float64{1: 28.4, 4: 41.1, 8: 33.8}

func benchDecode(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench decode", "[--type q4_0] [-n TOKENS] [--prompt TOKENS]", stderr)
	typ := fs.String("type", "Q4_0", "weight type of the synthetic model: Q4_0, Q8_0, Q4_K, F16 ...")
	n := intFlag(fs, "n", 8, 1, maxTokens, "tokens each sequence decodes")
	promptLen := intFlag(fs, "prompt", 8, 1, maxTokens, "prompt tokens per sequence")
	small := fs.Bool("small", false, "use the small demo shape instead of TinyLlama's (quick check)")
	if err := fs.parse(args); err != nil {
		return err
	}
	shape := synth.TinyLlama
	if *small {
		shape = synth.Demo
	}
	t, ok := parseType(*typ)
	if !ok {
		return fs.usageErr("--type %q is not a weight type kvscope can compute with", *typ)
	}
	shape.Type = t
	if *promptLen+*n >= shape.Context {
		return fs.usageErr("--prompt %d and -n %d: together they must stay below the model's context of %d tokens", *promptLen, *n, shape.Context)
	}
	t0 := time.Now()
	f, err := synth.Open(shape, 1)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := model.New(f)
	if err != nil {
		return err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return err
	}
	// Every matrix is read once per step, except the embedding table, of
	// which only the tokens' rows are read (unless it is also the output).
	_, tied := f.Tensor("output.weight")
	tied = !tied
	var weightBytes int64
	for _, ti := range f.Tensors {
		if ti.Name != "token_embd.weight" || tied {
			weightBytes += int64(ti.Size)
		}
	}
	bw := readBandwidth()
	fmt.Fprintf(stdout, "model: %s, %s weights, %s read per token; made in %.1f s\n", shape.Name, t, humanize.IBytes(uint64(weightBytes)), time.Since(t0).Seconds())
	fmt.Fprintf(stdout, "machine: %d threads, read bandwidth measured %.1f GB/s: decode of one sequence cannot beat %.1f tokens/s\n",
		runtime.GOMAXPROCS(0), bw/1e9, bw/float64(weightBytes))
	peerNote := ""
	if shape.Name == synth.TinyLlama.Name && t == quant.Q4_0 {
		peerNote = "  (llama.cpp, same shape and type, this machine: " + peerFigures() + ")"
	}
	fmt.Fprintf(stdout, "%9s %14s %14s %14s %13s\n", "sequences", "prefill tok/s", "decode tok/s", "per sequence", "weights GB/s")
	for _, seqs := range []int{1, 4, 8, 16} {
		pre, dec, err := decodeRun(m, tok, seqs, *promptLen, *n)
		if err != nil {
			return err
		}
		peer := ""
		if v, ok := llamaCppQ4_0[seqs]; ok && peerNote != "" {
			peer = fmt.Sprintf("   llama.cpp %.1f", v)
		}
		fmt.Fprintf(stdout, "%9d %14.1f %14.1f %14.1f %13.2f%s\n", seqs, pre, dec, dec/float64(seqs), dec/float64(seqs)*float64(weightBytes)/1e9, peer)
	}
	if peerNote != "" {
		fmt.Fprintln(stdout, "decode tok/s is aggregate over all sequences"+peerNote)
	}
	return nil
}

func parseType(s string) (quant.Type, bool) {
	for t := quant.Type(0); t < 64; t++ {
		if t.Known() && quant.Supported(t) && (t.String() == s || fmt.Sprintf("%v", t) == upper(s)) {
			return t, true
		}
	}
	return 0, false
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// decodeRun runs seqs sequences of promptLen random tokens together and
// returns prefill and aggregate decode rates, timing the engine's own steps
// (paused and stepped, so that only model work is counted).
func decodeRun(m *model.Model, tok *tokenizer.Tokenizer, seqs, promptLen, n int) (prefill, decode float64, err error) {
	cfg := engine.DefaultConfig()
	cfg.Sched.MaxSeqs = seqs
	cfg.Sched.StepTokens = max(512, seqs*promptLen)
	cfg.Context = promptLen + n + 1
	e, err := engine.New(m, tok, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	if err := e.Pause(); err != nil {
		return 0, 0, err
	}
	var streams []*engine.Stream
	for s := range seqs {
		ids := make([]int, promptLen)
		for i := range ids {
			ids[i] = 3 + (s*7919+i*104729)%(m.Vocab-3)
		}
		st, err := e.Submit(context.Background(), engine.Request{Tokens: ids, MaxTokens: n, IgnoreEOS: true})
		if err != nil {
			return 0, 0, err
		}
		streams = append(streams, st)
	}
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); st.Collect() }()
	}
	var preTok, decTok int
	var preT, decT time.Duration
	for {
		rep, err := e.Step()
		if err != nil {
			break // nothing left to do
		}
		if rep.Prefill > 0 {
			preTok += rep.Prefill
			preT += rep.Duration
		} else {
			decTok += rep.Decode
			decT += rep.Duration
		}
	}
	wg.Wait()
	return float64(preTok) / preT.Seconds(), float64(decTok) / decT.Seconds(), nil
}

// readBandwidth measures how fast all threads together can read memory,
// in bytes per second, summing a buffer much larger than the caches.
func readBandwidth() float64 {
	const size = 256 << 20
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	workers := runtime.GOMAXPROCS(0)
	best := 0.0
	for range 3 {
		t0 := time.Now()
		var wg sync.WaitGroup
		chunk := len(buf) / workers
		sums := make([]uint64, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				part := buf[w*chunk : (w+1)*chunk]
				var s0, s1, s2, s3 uint64
				for i := 0; i+3 < len(part); i += 4 {
					s0 += part[i]
					s1 += part[i+1]
					s2 += part[i+2]
					s3 += part[i+3]
				}
				sums[w] = s0 + s1 + s2 + s3
			}()
		}
		wg.Wait()
		best = max(best, float64(size)/time.Since(t0).Seconds())
	}
	return best
}

func peerFigures() string {
	return fmt.Sprintf("aggregate decode %.1f at 1 sequence, %.1f at 4, %.1f at 8", llamaCppQ4_0[1], llamaCppQ4_0[4], llamaCppQ4_0[8])
}
