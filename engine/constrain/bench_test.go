package constrain

import (
	"math/rand/v2"
	"testing"
	"time"

	"kvscope/engine/sample"
)

// BenchmarkSampleStep measures sampling time per token on a 128k-token
// vocabulary, with llama.cpp's default sampler, without a constraint and
// with a JSON schema (a fresh Grammar each iteration, compiled outside the
// timed steps, so that its masks are built as a new request builds them).
// Each iteration generates one object of up to 64 tokens from random
// logits. worst-ns is the slowest single step seen (a string's first
// mask, most often).
func BenchmarkSampleStep(b *testing.B) {
	v := synthVocab(b)
	const schema = `{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","age","tags"]}`
	rng := rand.New(rand.NewPCG(1, 1))
	logits := make([][]float32, 8)
	for i := range logits {
		logits[i] = make([]float32, v.Size())
		for j := range logits[i] {
			logits[i][j] = float32(rng.NormFloat64() * 2)
		}
	}
	for _, constrained := range []bool{false, true} {
		name := "plain"
		if constrained {
			name = "schema"
		}
		b.Run(name, func(b *testing.B) {
			s, err := sample.New(sample.DefaultParams())
			if err != nil {
				b.Fatal(err)
			}
			mask := make([]uint64, v.MaskWords())
			tokens := 0
			var worst time.Duration
			for b.Loop() {
				var m *Matcher
				if constrained {
					b.StopTimer()
					g, err := Schema([]byte(schema))
					if err != nil {
						b.Fatal(err)
					}
					m = g.NewMatcher()
					b.StartTimer()
				}
				for k := range 64 {
					t0 := time.Now()
					lg := logits[k%len(logits)]
					if m == nil {
						s.Sample(lg, nil)
					} else {
						if m.Allowed(v, mask) == 0 {
							break
						}
						tok := s.SampleAllowed(lg, nil, mask)
						if tok < 0 || !m.Advance(v.Piece(tok)) {
							b.Fatalf("token %d", tok)
						}
					}
					worst = max(worst, time.Since(t0))
					tokens++
					if m != nil && m.Done() {
						break
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
			b.ReportMetric(float64(worst.Nanoseconds()), "worst-ns")
		})
	}
}
