package synth_test

import (
	"testing"

	"kvscope/engine/synth"
)

// BenchmarkGenerateDemo times making the demo model.
func BenchmarkGenerateDemo(b *testing.B) { benchGenerate(b, synth.Demo) }

// BenchmarkGenerateTinyLlama times making the 1.1-billion-weight TinyLlama
// shape (620 MB; seconds per iteration: run it with -benchtime 1x).
func BenchmarkGenerateTinyLlama(b *testing.B) { benchGenerate(b, synth.TinyLlama) }

func benchGenerate(b *testing.B, s synth.Shape) {
	b.ReportAllocs()
	var n int
	for i := 0; b.Loop(); i++ {
		out, err := synth.Generate(s, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.SetBytes(int64(n))
	b.ReportMetric(float64(s.Params())/1e6, "Mweights")
}
