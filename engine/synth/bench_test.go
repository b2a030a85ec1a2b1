package synth_test

import (
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/model"
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

// BenchmarkDecodeDemo times one decoding step of the demo model after a
// 64-token prompt.
func BenchmarkDecodeDemo(b *testing.B) { benchDecode(b, synth.Demo) }

// BenchmarkDecodeTinyLlama times one decoding step of the TinyLlama shape,
// the figure to set beside llama.cpp's (README of the shared data).
func BenchmarkDecodeTinyLlama(b *testing.B) { benchDecode(b, synth.TinyLlama) }

func benchDecode(b *testing.B, s synth.Shape) {
	const prompt, blockSize, blocks = 64, 16, 64
	f, err := synth.Open(s, 1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.New(f)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := kvstore.New(m.CacheConfig(blockSize, blocks, kvstore.F16, kvstore.F16))
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int, blocks)
	for i := range table {
		table[i] = i
	}
	var batch model.Batch
	for i := range prompt {
		batch.Add(3+i, i, table, i == prompt-1)
	}
	if _, err := m.Forward(kv, &batch); err != nil {
		b.Fatal(err)
	}
	pos := prompt
	for b.Loop() {
		if pos == blockSize*blocks {
			pos = prompt // overwrite the same cache slots again
		}
		batch.Reset()
		batch.Add(300, pos, table, true)
		if _, err := m.Forward(kv, &batch); err != nil {
			b.Fatal(err)
		}
		pos++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
