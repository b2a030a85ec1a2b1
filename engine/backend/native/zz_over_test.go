package native

import (
	"math/rand/v2"
	"testing"

	"kvscope/engine/quant"
)

func BenchmarkZZOverhead(b *testing.B) {
	l := loadLib(b)
	r := rand.New(rand.NewPCG(1, 2))
	w, _ := randWeights(b, r, quant.Q8_0, 16, 64)
	p, _ := l.Pack(quant.Q8_0, w, 16, 64)
	x := randVec(r, 64)
	out := make([]float32, 16)
	b.Run("packed", func(b *testing.B) {
		for b.Loop() {
			l.MatMulPacked(p, x, 1, out)
		}
	})
	b.Run("actBytes", func(b *testing.B) {
		for b.Loop() {
			l.actBytes(8, 64, 1)
		}
	})
	b.Run("packable", func(b *testing.B) {
		for b.Loop() {
			l.Packable(quant.Q8_0)
		}
	})
}
