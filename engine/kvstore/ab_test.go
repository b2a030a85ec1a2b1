package kvstore

import (
	"testing"

	"kvscope/engine/quant"
)

var tab16 = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = quant.F16ToF32(uint16(i))
	}
	return &t
}()

func BenchmarkAB(b *testing.B) {
	c := Config{Layers: 1, KVHeads: 4, HeadDim: 64, BlockSize: 32, Blocks: 1}
	keys, _ := gen(c, 1, 32)
	src := make([]uint16, 0, 8192)
	for _, r := range keys {
		for _, v := range r {
			src = append(src, quant.F32ToF16(v))
		}
	}
	dst := make([]float32, len(src))
	b.Run("table", func(b *testing.B) {
		for b.Loop() {
			t := tab16
			for i, v := range src {
				dst[i] = t[v]
			}
		}
	})
	b.Run("h2f", func(b *testing.B) {
		for b.Loop() {
			for i, v := range src {
				dst[i] = h2f(v)
			}
		}
	})
	b.Run("bf16", func(b *testing.B) {
		for b.Loop() {
			for i, v := range src {
				dst[i] = quant.BF16ToF32(v)
			}
		}
	})
}
