package cli

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"kvscope/engine/constrain"
	"kvscope/engine/sample"
)

// sampleSchema is bench sample's JSON schema: an object with a bounded
// string, an integer and an array of short strings, as a tool's arguments
// might be.
const sampleSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","age","tags"]}`

// llama32Q4KMBytes is the size of Llama 3.2 1B Instruct in llama.cpp's
// Q4_K_M (807,694,464 bytes, nearly all of it weights, the tied embedding
// table included): what one decode step reads.
const llama32Q4KMBytes = 807694464

func benchSample(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench sample", "[-m VOCAB.gguf] [--vocab N] [-r REQUESTS]", stderr)
	path := fs.String("m", sharedPath("testdata/tokenizer/ggml-vocab-gpt-2.gguf"), "GGUF `file` whose vocabulary is sampled over (a vocabulary-only file will do)")
	size := intFlag(fs, "vocab", 128256, 2, 1<<20, "vocabulary size: a smaller vocabulary is extended with pairs of its tokens up to it (Llama 3's is 128,256)")
	reqs := intFlag(fs, "r", 20, 1, 10000, "requests per row, each generating up to 64 tokens")
	if err := fs.parse(args); err != nil {
		return err
	}
	tok, err := loadTokenizer(*path)
	if err != nil {
		return err
	}
	base := constrain.FromTokenizer(tok)
	pieces := make([]string, base.Size())
	for id := range pieces {
		pieces[id] = base.Piece(id)
	}
	pieces = extendPieces(pieces, *size)
	v := constrain.NewVocab(pieces)
	how := "its own"
	if len(pieces) > base.Size() {
		how = fmt.Sprintf("extended with pairs of its tokens of up to 16 bytes from %d", base.Size())
	}
	fmt.Fprintf(stdout, "vocabulary: %d tokens (%s, %s), a trie of %d nodes\n", len(pieces), *path, how, v.Nodes())
	measure, bwHow := bandwidthProbe()
	bw := measure()
	step := float64(llama32Q4KMBytes) / bw
	fmt.Fprintf(stdout, "decode step of Llama 3.2 1B Q4_K_M at this machine's read bandwidth: %.1f ms (%.2f GB of weights a token at %.1f GB/s, %s)\n",
		step*1e3, float64(llama32Q4KMBytes)/1e9, bw/1e9, bwHow)
	rows, err := sampleRows(v, *reqs)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "Sampling time per token: llama.cpp's default chain (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8)")
	fmt.Fprintln(stdout, "over random logits, and with a constraint its mask, the sampling and the matcher's advance; wall")
	fmt.Fprintln(stdout, "time, and the thread's CPU time (without the time other processes took the core), where it can be read.")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "constraint\ttokens\tmean µs\tp99 µs\tworst µs\tCPU mean µs\tCPU p99 µs\tCPU worst µs\tmean / decode step\tworst / decode step\tcompile µs\t")
	for _, r := range rows {
		worst := r.worst
		if r.cpu {
			worst = r.cpuWorst
		}
		compile := "-"
		if r.compiles {
			compile = fmt.Sprintf("%.0f", r.compile*1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t\n", r.name, r.tokens, r.mean*1e6, r.p99*1e6, r.worst*1e6,
			cpuCell(r.cpu, r.cpuMean), cpuCell(r.cpu, r.cpuP99), cpuCell(r.cpu, r.cpuWorst), 100*r.mean/step, 100*worst/step, compile)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "(worst / decode step: of the CPU time where it was read, else of the wall time; compile: the mean")
	fmt.Fprintln(stdout, "wall time of a request's constraint compile, before its first step, where each request compiles one:")
	fmt.Fprintln(stdout, "a schema's compile builds its automaton, up to 4096 states, so that its steps read tables)")
	return nil
}

// extendPieces pads pieces up to n with concatenations of two random
// pieces of up to 16 bytes that are not already there (a fixed seed), a
// stand-in for a larger vocabulary of the same text.
func extendPieces(pieces []string, n int) []string {
	seen := make(map[string]bool, n)
	var usable []string
	for _, p := range pieces {
		seen[p] = true
		if p != "" {
			usable = append(usable, p)
		}
	}
	if len(usable) == 0 {
		return pieces
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for tries := 0; len(pieces) < n && tries < 100*n; tries++ {
		p := usable[rng.IntN(len(usable))] + usable[rng.IntN(len(usable))]
		if len(p) > 16 || seen[p] {
			continue
		}
		seen[p] = true
		pieces = append(pieces, p)
	}
	return pieces
}

func cpuCell(ok bool, sec float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f", sec*1e6)
}

// sampleRow is one row of bench sample's table, in seconds.
type sampleRow struct {
	name                      string
	tokens                    int
	mean, p99, worst          float64
	cpu                       bool // the CPU times were read
	cpuMean, cpuP99, cpuWorst float64
	compiles                  bool    // each request compiled its constraint
	compile                   float64 // the mean wall time of that
}

// spread returns the mean, the 99th percentile and the largest of times
// (sorted here).
func spread(times []float64) (mean, p99, worst float64) {
	slices.Sort(times)
	for _, t := range times {
		mean += t
	}
	return mean / float64(len(times)), times[len(times)*99/100], times[len(times)-1]
}

// sampleRows times sampling steps with no constraint, a JSON object, the
// schema compiled afresh for each request (a schema the process has not
// seen: its automaton and masks are built as the request goes) and one
// compiled schema reused by every request (kvscope serve keeps the
// Grammars of the schemas and tools it has seen).
func sampleRows(v *constrain.Vocab, reqs int) ([]sampleRow, error) {
	rng := rand.New(rand.NewPCG(1, 1))
	logits := make([][]float32, 8)
	for i := range logits {
		logits[i] = make([]float32, v.Size())
		for j := range logits[i] {
			logits[i][j] = float32(rng.NormFloat64() * 2)
		}
	}
	warm, err := constrain.Schema([]byte(sampleSchema))
	if err != nil {
		return nil, err
	}
	cases := []struct {
		name  string
		make  func() (*constrain.Grammar, error)
		fresh bool // make compiles a new Grammar
	}{
		{"none", nil, false},
		{"JSON object", func() (*constrain.Grammar, error) { return constrain.JSON(true), nil }, true},
		{"JSON schema, new to the process", func() (*constrain.Grammar, error) { return constrain.Schema([]byte(sampleSchema)) }, true},
		{"JSON schema, seen before", func() (*constrain.Grammar, error) { return warm, nil }, false},
	}
	var rows []sampleRow
	mask := make([]uint64, v.MaskWords())
	runtime.LockOSThread() // the thread's CPU time is the steps'
	defer runtime.UnlockOSThread()
	for _, c := range cases {
		s, err := sample.New(sample.DefaultParams())
		if err != nil {
			return nil, err
		}
		var times, cpus []float64
		cpuOK := true
		var compile time.Duration
		for range reqs {
			var m *constrain.Matcher
			if c.make != nil {
				t0 := time.Now()
				g, err := c.make()
				if err != nil {
					return nil, err
				}
				compile += time.Since(t0)
				m = g.NewMatcher()
			}
			for k := range 64 {
				lg := logits[k%len(logits)]
				c0, ok0 := threadCPU()
				t0 := time.Now()
				if m == nil {
					s.Sample(lg, nil)
				} else {
					if m.Allowed(v, mask) == 0 {
						return nil, fmt.Errorf("%s: no token continues the output", c.name)
					}
					id := s.SampleAllowed(lg, nil, mask)
					if id < 0 || !m.Advance(v.Piece(id)) {
						return nil, fmt.Errorf("%s: the sampler drew token %d, which the constraint refuses", c.name, id)
					}
				}
				times = append(times, time.Since(t0).Seconds())
				c1, ok1 := threadCPU()
				cpuOK = cpuOK && ok0 && ok1
				cpus = append(cpus, (c1 - c0).Seconds())
				if m != nil && m.Done() {
					break
				}
			}
		}
		r := sampleRow{name: c.name, tokens: len(times), cpu: cpuOK, compiles: c.fresh, compile: compile.Seconds() / float64(reqs)}
		r.mean, r.p99, r.worst = spread(times)
		r.cpuMean, r.cpuP99, r.cpuWorst = spread(cpus)
		rows = append(rows, r)
	}
	return rows, nil
}
