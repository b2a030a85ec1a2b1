package model_test

import (
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/synth"
)

// BenchmarkPrefillTinyLlama times a 128-token prompt's forward pass, one
// batch, on the synthetic TinyLlama shape (Q4_0, f16 K/V in blocks of 16):
// the figure that shows what decoding each K/V block once per sequence
// saves. Each iteration takes seconds; run it with -benchtime 3x. On a
// machine shared with other work, cpu-s/op (all threads) is steadier than
// the wall time.
func BenchmarkPrefillTinyLlama(b *testing.B) {
	const prompt, blockSize = 128, 16
	f, err := synth.Open(synth.TinyLlama, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := model.New(f)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := kvstore.New(m.CacheConfig(blockSize, prompt/blockSize, kvstore.F16, kvstore.F16))
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int, prompt/blockSize)
	for i := range table {
		table[i] = i
	}
	var batch model.Batch
	for i := range prompt {
		batch.Add(3+i, i, table, i == prompt-1)
	}
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := m.Forward(kv, &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(prompt*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	}
}
