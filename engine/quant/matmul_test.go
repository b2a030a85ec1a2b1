package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestMatMulBatchShapes checks batch invariance on shapes that exercise
// every path of MatMul's tiling: row counts that leave partial tiles,
// batches that leave partial groups of vectors or need several passes
// (more than maxVec), rows shorter than a span or ending in a partial one,
// plain-type rows that end in a partial group, and one goroutine or
// several. Vector b's outputs must be the bits DotFunc gives, whatever
// else is in the batch.
func TestMatMulBatchShapes(t *testing.T) {
	tests := []struct {
		ty         Type
		rows, cols int
	}{
		{Q4_0, 37, 96},
		{Q4_0, 64, 1024},
		{Q8_0, 19, 288},
		{Q4_1, 11, 544},
		{Q4_K, 21, 512},
		{Q5_K, 6, 256},
		{Q6_K, 9, 768},
		{Q2_K, 5, 256},
		{Q3_K, 5, 256},
		{IQ4_NL, 7, 64},
		{F16, 13, 37},
		{F32, 10, 300},
		{BF16, 5, 7},
	}
	nxs := []int{1, 2, 3, 5, 8, 9, 35}
	r := rand.New(rand.NewPCG(31, 32))
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%dx%d", tc.ty, tc.rows, tc.cols), func(t *testing.T) {
			var w []byte
			for range tc.rows {
				w = append(w, randomRow(r, tc.ty, tc.cols)...)
			}
			rb, _ := tc.ty.RowBytes(tc.cols)
			dot, _ := DotFunc(tc.ty)
			for _, procs := range []int{1, 4} {
				prev := runtime.GOMAXPROCS(procs)
				for _, nx := range nxs {
					x := gaussian(r, nx*tc.cols, 1)
					out := make([]float32, nx*tc.rows)
					if err := MatMul(tc.ty, w, tc.rows, tc.cols, x, out); err != nil {
						runtime.GOMAXPROCS(prev)
						t.Fatal(err)
					}
					for b := range nx {
						xb := x[b*tc.cols : (b+1)*tc.cols]
						for row := range tc.rows {
							want := dot(w[row*rb:(row+1)*rb], xb)
							if got := out[b*tc.rows+row]; math.Float32bits(got) != math.Float32bits(want) {
								runtime.GOMAXPROCS(prev)
								t.Fatalf("GOMAXPROCS=%d nx=%d: (vector %d, row %d) = %g, DotFunc %g", procs, nx, b, row, got, want)
							}
						}
					}
				}
				runtime.GOMAXPROCS(prev)
			}
		})
	}
}

// TestMatMulMatchesFloat64 checks MatMul's accuracy against a float64 dot
// product of the dequantized weights: the float32 sums may differ only by
// rounding, small next to the sum of |w·x|.
func TestMatMulMatchesFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const rows, cols, nx = 24, 2048, 6
	for _, ty := range allTypes {
		var w []byte
		for range rows {
			w = append(w, randomRow(r, ty, cols)...)
		}
		deq := make([]float32, rows*cols)
		if err := Dequantize(ty, w, deq); err != nil {
			t.Fatal(err)
		}
		x := gaussian(r, nx*cols, 1)
		out := make([]float32, nx*rows)
		if err := MatMul(ty, w, rows, cols, x, out); err != nil {
			t.Fatal(err)
		}
		for b := range nx {
			for row := range rows {
				var ref, mag float64
				for j := range cols {
					p := float64(deq[row*cols+j]) * float64(x[b*cols+j])
					ref += p
					mag += math.Abs(p)
				}
				if d := math.Abs(float64(out[b*rows+row]) - ref); d > 1e-5*mag {
					t.Fatalf("%s (vector %d, row %d): %g, float64 reference %g (|diff| %.3g, scale %.3g)", ty, b, row, out[b*rows+row], ref, d, mag)
				}
			}
		}
	}
}
