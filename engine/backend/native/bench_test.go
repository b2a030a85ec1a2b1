//go:build unix

package native

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"kvscope/engine/quant"
)

// processCPU returns the CPU time this process has used, all threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMatMul measures GB/s of weights read by the native library's
// matrix product (the path in force, named in the sub-benchmark) and by
// quant.MatMul, for Q4_0 and Q8_0 weights of a 4096×2048 matrix at batch 1,
// 4 and 8, on GOMAXPROCS threads: GB/s per second of wall time, and GB/cpu-s
// per second of CPU time (all threads), which other work on a shared machine
// disturbs less.
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
				cpu0 := processCPU()
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				bytes := float64(len(w)) * float64(b.N)
				b.ReportMetric(bytes/b.Elapsed().Seconds()/1e9, "GB/s")
				if cpu := processCPU() - cpu0; cpu > 0 {
					b.ReportMetric(bytes/cpu.Seconds()/1e9, "GB/cpu-s")
				}
			}
			b.Run(fmt.Sprintf("%s/n%d/native-%s", typ, n, l.PathName(l.Path())), func(b *testing.B) {
				run(b, func() error { return l.MatMul(typ, w, rows, cols, x, n, out) })
			})
			b.Run(fmt.Sprintf("%s/n%d/go", typ, n), func(b *testing.B) {
				run(b, func() error { return quant.MatMul(typ, w, rows, cols, x, out) })
			})
		}
	}
}
