package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchDot times one dot product of a 4096-element row held in cache. The
// byte rate is the rate at which one core consumes weight bytes.
func benchDot(b *testing.B, ty Type) {
	const n = 4096
	r := rand.New(rand.NewPCG(7, 8))
	row := randomRow(r, ty, n)
	x := gaussian(r, n, 1)
	dot, err := DotFunc(ty)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(row)))
	var sink float32
	for b.Loop() {
		sink += dot(row, x)
	}
	_ = sink
}

func BenchmarkDotF32(b *testing.B)    { benchDot(b, F32) }
func BenchmarkDotF16(b *testing.B)    { benchDot(b, F16) }
func BenchmarkDotBF16(b *testing.B)   { benchDot(b, BF16) }
func BenchmarkDotQ8_0(b *testing.B)   { benchDot(b, Q8_0) }
func BenchmarkDotQ4_0(b *testing.B)   { benchDot(b, Q4_0) }
func BenchmarkDotQ4_1(b *testing.B)   { benchDot(b, Q4_1) }
func BenchmarkDotQ5_0(b *testing.B)   { benchDot(b, Q5_0) }
func BenchmarkDotQ5_1(b *testing.B)   { benchDot(b, Q5_1) }
func BenchmarkDotIQ4_NL(b *testing.B) { benchDot(b, IQ4_NL) }
func BenchmarkDotQ2_K(b *testing.B)   { benchDot(b, Q2_K) }
func BenchmarkDotQ3_K(b *testing.B)   { benchDot(b, Q3_K) }
func BenchmarkDotQ4_K(b *testing.B)   { benchDot(b, Q4_K) }
func BenchmarkDotQ5_K(b *testing.B)   { benchDot(b, Q5_K) }
func BenchmarkDotQ6_K(b *testing.B)   { benchDot(b, Q6_K) }

// BenchmarkMatMul multiplies a rows×cols weight matrix by nx vectors on all
// GOMAXPROCS threads, at the shapes of a TinyLlama-class model: 2048×2048
// (attention projections) and 5632×2048 (feed-forward gate and up). nx is
// the batch: the number of sequences decoded together. The byte rate counts
// the weight bytes read per call, so at nx=1 it compares with the machine's
// read bandwidth; Gelem·vec/s counts multiply-adds (rows×cols×nx) per
// second of wall time, so batching pays when it grows with nx; Gelem·vec/cpu-s
// counts them per second of CPU time (all threads), which other work on a
// shared machine disturbs less.
func BenchmarkMatMul(b *testing.B) {
	shapes := []struct{ rows, cols int }{{2048, 2048}, {5632, 2048}}
	r := rand.New(rand.NewPCG(9, 10))
	for _, ty := range []Type{F32, F16, Q8_0, Q4_0, Q4_K, Q6_K} {
		for _, sh := range shapes {
			w := make([]byte, 0, sh.rows*len(randomRow(r, ty, sh.cols)))
			for range sh.rows {
				w = append(w, randomRow(r, ty, sh.cols)...)
			}
			for _, nx := range []int{1, 4, 8, 16} {
				x := gaussian(r, nx*sh.cols, 1)
				out := make([]float32, nx*sh.rows)
				b.Run(fmt.Sprintf("%s/%dx%d/nx=%d", ty, sh.rows, sh.cols, nx), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					cpu0 := processCPU()
					for b.Loop() {
						if err := MatMul(ty, w, sh.rows, sh.cols, x, out); err != nil {
							b.Fatal(err)
						}
					}
					macs := float64(sh.rows) * float64(sh.cols) * float64(nx) * float64(b.N)
					b.ReportMetric(macs/b.Elapsed().Seconds()/1e9, "Gelem·vec/s")
					if cpu := processCPU() - cpu0; cpu > 0 {
						b.ReportMetric(macs/cpu.Seconds()/1e9, "Gelem·vec/cpu-s")
					}
				})
			}
		}
	}
}
