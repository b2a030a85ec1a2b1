package cli

import (
	"fmt"
	"io"
	"math/rand/v2"
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
	fmt.Fprintln(stdout, "over random logits, and with a constraint its mask, the sampling and the matcher's advance.")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "constraint\ttokens\tmean µs\tp99 µs\tworst µs\tmean / decode step\tworst / decode step\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f%%\t%.1f%%\t\n", r.name, r.tokens, r.mean*1e6, r.p99*1e6, r.worst*1e6, 100*r.mean/step, 100*r.worst/step)
	}
	return tw.Flush()
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

// sampleRow is one row of bench sample's table, in seconds.
type sampleRow struct {
	name             string
	tokens           int
	mean, p99, worst float64
}

// sampleRows times sampling steps with no constraint, a JSON object, the
// schema compiled afresh for each request (as the server does) and one
// compiled schema reused by every request.
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
		name string
		make func() (*constrain.Grammar, error)
	}{
		{"none", nil},
		{"JSON object", func() (*constrain.Grammar, error) { return constrain.JSON(true), nil }},
		{"JSON schema, compiled per request", func() (*constrain.Grammar, error) { return constrain.Schema([]byte(sampleSchema)) }},
		{"JSON schema, compiled once", func() (*constrain.Grammar, error) { return warm, nil }},
	}
	var rows []sampleRow
	mask := make([]uint64, v.MaskWords())
	for _, c := range cases {
		s, err := sample.New(sample.DefaultParams())
		if err != nil {
			return nil, err
		}
		var times []float64
		for range reqs {
			var m *constrain.Matcher
			if c.make != nil {
				g, err := c.make()
				if err != nil {
					return nil, err
				}
				m = g.NewMatcher()
			}
			for k := range 64 {
				lg := logits[k%len(logits)]
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
				if m != nil && m.Done() {
					break
				}
			}
		}
		slices.Sort(times)
		total := 0.0
		for _, t := range times {
			total += t
		}
		rows = append(rows, sampleRow{name: c.name, tokens: len(times), mean: total / float64(len(times)),
			p99: times[len(times)*99/100], worst: times[len(times)-1]})
	}
	return rows, nil
}
