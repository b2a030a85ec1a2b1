package native

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"kvscope/engine/quant"
)

// BenchmarkMatMul measures GB/s of weights read by the native library's
// matrix product on each SIMD path this machine runs (named in the
// sub-benchmark) and by quant.MatMul, for Q4_0 and Q8_0 weights of a 4096×2048 matrix at batch 1,
// 4 and 8, on GOMAXPROCS threads (-cpu 1 for one core), per second of wall
// time.
func BenchmarkMatMul(b *testing.B) {
	l := loadLib(b)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 4096, 2048
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0} {
		w, _ := randWeights(b, r, typ, rows, cols)
		for _, n := range []int{1, 4, 8} {
			x := randVec(r, n*cols)
			out := make([]float32, n*rows)
			run := func(b *testing.B, f func() error) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			}
			for _, p := range l.Paths() {
				if err := l.SetPath(p); err != nil {
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("%s/n%d/native-%s", typ, n, l.PathName(p)), func(b *testing.B) {
					run(b, func() error { return l.MatMul(typ, w, rows, cols, x, n, out) })
				})
			}
			if err := l.SetPath(-1); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/n%d/go", typ, n), func(b *testing.B) {
				run(b, func() error { return quant.MatMul(typ, w, rows, cols, x, out) })
			})
		}
	}
}

// BenchmarkCall measures the cost of one call into the library (an Add of
// one value): the overhead each goroutine's share of a MatMul pays.
func BenchmarkCall(b *testing.B) {
	l := loadLib(b)
	x, y := []float32{1}, []float32{2}
	for b.Loop() {
		if err := l.Add(x, y); err != nil {
			b.Fatal(err)
		}
	}
}
