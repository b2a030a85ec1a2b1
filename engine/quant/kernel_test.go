package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDequantMatchesGo checks that every fast dequantizer (SSE2 on amd64)
// writes exactly the values of the plain Go one, on random blocks, in runs
// of several lengths.
func TestDequantMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	tests := []struct {
		ty        Type
		fast, ref func(src []byte, dst []float32)
		sizes     []int
	}{
		{Q4_0, dequantQ4_0, dequantQ4_0Go, []int{32, 96, 256, 1024}},
		{Q4_1, dequantQ4_1, dequantQ4_1Go, []int{32, 160, 256, 1024}},
		{Q8_0, dequantQ8_0, dequantQ8_0Go, []int{32, 64, 256, 1024}},
		{Q4_K, dequantQ4_K, dequantQ4_KGo, []int{256, 768}},
		{Q6_K, dequantQ6_K, dequantQ6_KGo, []int{256, 768}},
		{F16, dequantF16, dequantF16Go, []int{1, 7, 8, 37, 256}},
	}
	for _, tc := range tests {
		for _, n := range tc.sizes {
			for trial := range 20 {
				var b []byte
				if trial%2 == 0 {
					b = randomRow(r, tc.ty, n) // realistic scales
				} else {
					nb, _ := tc.ty.RowBytes(n)
					b = make([]byte, nb)
					for i := range b {
						b[i] = byte(r.Uint32()) // any bits, scales included
					}
				}
				got, want := make([]float32, n), make([]float32, n)
				tc.fast(b, got)
				tc.ref(b, want)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) &&
						!(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
						t.Fatalf("%s n=%d: value %d is %g (%#08x), Go dequantizer gives %g (%#08x)",
							tc.ty, n, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// TestDequantF16Specials runs every half through the F16 dequantizer:
// zeros, subnormals, infinities and NaN must come out as F16ToF32 gives
// them.
func TestDequantF16Specials(t *testing.T) {
	b := make([]byte, 2<<16)
	for h := range 1 << 16 {
		b[2*h], b[2*h+1] = byte(h), byte(h>>8)
	}
	dst := make([]float32, 1<<16)
	dequantF16(b, dst)
	for h, v := range dst {
		want := F16ToF32(uint16(h))
		if math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("half %#04x dequantizes to %#08x, want %#08x", h, math.Float32bits(v), math.Float32bits(want))
		}
	}
}

// TestKernelsMatchGeneric checks every kernel shape (SSE on amd64) against
// the dot16 reference, bit for bit, including infinities, NaN, signed
// zeros and subnormal products.
func TestKernelsMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-38, -3e-39, float32(math.Inf(1)), float32(math.NaN()), 1e30}
	shapes := [][2]int{{8, 1}, {4, 4}, {4, 2}, {4, 1}, {2, 4}, {2, 2}, {2, 1}, {1, 4}, {1, 2}, {1, 1}, {3, 3}}
	for _, sh := range shapes {
		rows, vecs := sh[0], sh[1]
		for _, ng := range []int{0, 1, 5, 16, 40} {
			for trial := range 10 {
				ws, xs := 16*ng+4*trial, 16*ng+3
				w := make([]float32, rows*ws)
				x := make([]float32, vecs*xs)
				for i := range w {
					w[i] = float32(r.NormFloat64())
				}
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				if trial%3 == 1 {
					for range 4 {
						x[r.IntN(len(x))] = special[r.IntN(len(special))]
					}
				}
				as := 4*vecs + trial
				got := make([]float32, rows*as)
				for i := range got {
					got[i] = float32(r.NormFloat64()) // sums already under way
				}
				want := append([]float32(nil), got...)
				macTile(rows, vecs, w, ws, x, xs, ng, got, as)
				macGeneric(rows, vecs, w, ws, x, xs, ng, want, as)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) &&
						!(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
						t.Fatalf("%d×%d kernel, %d groups: output %d is %g, reference %g", rows, vecs, ng, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestKernelBadOperands checks that a kernel call whose slices are too
// short panics with a message instead of reading out of bounds.
func TestKernelBadOperands(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("macTile with 15 weights for a 16-element group did not panic")
		}
	}()
	macTile(1, 1, make([]float32, 15), span, make([]float32, 16), 0, 1, make([]float32, 4), 4)
}
