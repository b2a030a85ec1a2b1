package native

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// BenchmarkMatMul measures GB/s of weights read by the native library's
// matrix product on each SIMD path this machine runs (named in the
// sub-benchmark) and by quant.MatMul, for weights of each packed type in a
// 4096×2048 matrix at batch 1, 4 and 8, on GOMAXPROCS threads (-cpu 1 for
// one core), per second of wall time, counting the file's bytes. They run on
// the file's layout (native-; Q5_0 and the K-quants pack each group of 16
// rows into scratch first) and packed (packed-, what the backend
// multiplies).
func BenchmarkMatMul(b *testing.B) {
	l := loadLib(b)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 4096, 2048
	for _, typ := range packTypes {
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
				if pk, err := l.Pack(typ, w, rows, cols); err == nil {
					b.Run(fmt.Sprintf("%s/n%d/packed-%s", typ, n, l.PathName(p)), func(b *testing.B) {
						run(b, func() error { return l.MatMulPacked(pk, x, n, out) })
					})
				}
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

// packTypes are the types the library packs.
var packTypes = []quant.Type{quant.Q4_0, quant.Q5_0, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// BenchmarkPack measures Lib.Pack in GB/s of the file's bytes, a
// 4096×4096 matrix of each packed type on GOMAXPROCS goroutines: the work
// of loading a model, beside the page faults of reading its file.
func BenchmarkPack(b *testing.B) {
	l := loadLib(b)
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 4096, 4096
	for _, typ := range packTypes {
		w, _ := randWeights(b, r, typ, rows, cols)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				if _, err := l.Pack(typ, w, rows, cols); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
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

// BenchmarkAttention measures paged attention for a TinyLlama-shaped layer
// (32 query heads over 4 KV heads of 64) at each quantized K/V precision
// and f16, block size 16: one row attending 1024 and 8192 positions, and
// eight rows of different sequences attending 1024 each; and for a layer
// of 32 query heads each with a KV head of its own, of 128 (Llama 2 7B's:
// "mha", 34 MB of f16 K/V, read from memory) or 96 (Phi-3's: "mha96"), one
// row attending 2048 positions. The rate is K/V bytes read per second.
func BenchmarkAttention(b *testing.B) {
	l := loadLib(b)
	for _, prec := range []kvstore.Precision{kvstore.F16, kvstore.Q8_0, kvstore.Int8, kvstore.Int4, kvstore.FP8} {
		for _, shape := range []struct {
			rows, n, kvHeads, dim int
			layer                 string
		}{{1, 1024, 4, 64, ""}, {8, 1024, 4, 64, ""}, {1, 8192, 4, 64, ""}, {1, 2048, 32, 128, "mha/"}, {1, 2048, 32, 96, "mha96/"}} {
			rows, n := shape.rows, shape.n
			c := attnCase{k: prec, v: prec, blockSize: 16, kvHeads: shape.kvHeads, heads: 32, dim: shape.dim}
			b.Run(fmt.Sprintf("%v/%srows%d/ctx%d/%s", prec, shape.layer, rows, n, l.PathName(l.Path())), func(b *testing.B) {
				// The store is made here, so that a benchmark left out
				// by -bench costs nothing.
				lens := make([]int, rows)
				for i := range lens {
					lens[i] = n
				}
				s, tables := seqStore(b, rand.New(rand.NewPCG(1, 2)), c, lens)
				ar := make([]AttnRow, rows)
				for i := range ar {
					ar[i] = AttnRow{NPos: n, Blocks: tables[i]}
				}
				q := randVec(rand.New(rand.NewPCG(3, 4)), rows*c.heads*c.dim)
				out := make([]float32, len(q))
				kb, vb := kvstore.BitsPerValue(s.Config())
				b.SetBytes(int64(float64(rows*n*c.kvHeads*c.dim) * (kb + vb) / 8))
				for b.Loop() {
					if err := l.Attention(s, 0, c.heads, 0.125, q, ar, out); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
