package quant

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// allTypes lists every supported type in a fixed order.
var allTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL}

// gaussian returns n normally distributed values (standard deviation sd).
func gaussian(r *rand.Rand, n int, sd float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sd)
	}
	return x
}

// relRMS returns the RMS of got-want divided by the RMS of want.
func relRMS(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// TestQuantizeRoundTrip quantizes Gaussian data and checks the relative RMS
// error of the decoded values. Bounds are about 1.4× the measured figures
// (logged with -v); a wrong layout gives errors near 100%.
func TestQuantizeRoundTrip(t *testing.T) {
	bounds := map[Type]float64{ // measured: see the comment at each
		F32:    0,
		F16:    3e-4,   // 0.0002
		BF16:   2.5e-3, // 0.0016
		Q8_0:   0.008,  // 0.0055
		Q5_0:   0.06,   // 0.044
		Q5_1:   0.055,  // 0.039
		Q4_0:   0.12,   // 0.089
		Q4_1:   0.11,   // 0.078
		IQ4_NL: 0.10,   // 0.076
		Q6_K:   0.027,  // 0.019
		Q5_K:   0.055,  // 0.039
		Q4_K:   0.11,   // 0.078
		Q3_K:   0.22,   // 0.159
		Q2_K:   0.45,   // 0.327
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 16 * 256
	src := gaussian(r, n, 0.02)
	// Vary the scale from block to block, as real weights do.
	for i := range src {
		src[i] *= float32(1 + i/256)
	}
	for _, ty := range allTypes {
		t.Run(ty.String(), func(t *testing.T) {
			nb, err := ty.RowBytes(n)
			if err != nil {
				t.Fatal(err)
			}
			q := make([]byte, nb)
			if err := Quantize(ty, src, q); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n)
			if err := Dequantize(ty, q, got); err != nil {
				t.Fatal(err)
			}
			e := relRMS(got, src)
			t.Logf("%s: relative RMS error %.4f", ty, e)
			if e > bounds[ty] {
				t.Errorf("relative RMS error %.4f, want <= %g", e, bounds[ty])
			}
			// Zeros stay zeros.
			zero := make([]float32, 256)
			if err := Quantize(ty, zero, q[:nb/16]); err != nil {
				t.Fatal(err)
			}
			if err := Dequantize(ty, q[:nb/16], got[:256]); err != nil {
				t.Fatal(err)
			}
			for i, v := range got[:256] {
				if v != 0 {
					t.Fatalf("zero block decoded to %g at %d", v, i)
				}
			}
		})
	}
}

// halfFields lists the byte offsets of each block's half-precision scales,
// so that random blocks can be given finite, sensible scales.
var halfFields = map[Type][]int{
	Q8_0: {0}, Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, IQ4_NL: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208},
}

// randomRow returns n elements of type ty: random bytes with random finite
// scales for block types, random values for plain types.
func randomRow(r *rand.Rand, ty Type, n int) []byte {
	nb, _ := ty.RowBytes(n)
	b := make([]byte, nb)
	if ty.BlockSize() == 1 {
		if err := Quantize(ty, gaussian(r, n, 1), b); err != nil {
			panic(err)
		}
		return b
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for blk := 0; blk < nb; blk += ty.TypeSize() {
		for _, off := range halfFields[ty] {
			h := F32ToF16(float32((r.Float64() - 0.3) * 0.01))
			b[blk+off], b[blk+off+1] = byte(h), byte(h>>8)
		}
	}
	return b
}

// TestDotMatchesDequantize compares DotFunc with dequantize-then-dot in
// float64, relative to the sum of |w·x| (the scale of the rounding error).
func TestDotMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ty := range allTypes {
		dot, err := DotFunc(ty)
		if err != nil {
			t.Fatal(err)
		}
		sizes := []int{256, 2048}
		if ty.BlockSize() == 1 {
			sizes = append(sizes, 1, 37, 100) // partial chunks
		}
		for _, n := range sizes {
			for trial := 0; trial < 5; trial++ {
				row := randomRow(r, ty, n)
				x := gaussian(r, n, 1)
				w := make([]float32, n)
				if err := Dequantize(ty, row, w); err != nil {
					t.Fatal(err)
				}
				var ref, mag float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					mag += math.Abs(float64(w[i]) * float64(x[i]))
				}
				got := dot(row, x)
				if d := math.Abs(float64(got) - ref); d > 1e-4*mag || math.IsNaN(float64(got)) {
					t.Errorf("%s n=%d: dot %g, dequantized dot %g (|diff| %.3g, scale %.3g)", ty, n, got, ref, d, mag)
				}
			}
		}
	}
}

// TestDotF16Specials feeds F16 rows with subnormals, infinities and zeros,
// which take dotF16's slow path.
func TestDotF16Specials(t *testing.T) {
	halves := []uint16{0x0001, 0x03ff, 0x8200, 0x0000, 0x8000, 0x3c00, 0x7c00, 0x0400}
	row := make([]byte, 2*64)
	x := make([]float32, 64)
	var want float64
	for i := range x {
		h := halves[i%len(halves)]
		if h == 0x7c00 && i >= 8 {
			h = 0x3555
		}
		row[2*i], row[2*i+1] = byte(h), byte(h>>8)
		x[i] = float32(i%5) - 2
		want += float64(F16ToF32(h)) * float64(x[i])
	}
	// x[6] = -1 meets the +Inf at element 6.
	got := dotF16(row, x)
	if !math.IsInf(float64(got), -1) || !math.IsInf(want, -1) {
		t.Errorf("dot with an infinity = %g, want -Inf (reference %g)", got, want)
	}
	row[12], row[13] = 0x00, 0x3c // replace the infinity by 1
	want = 0
	for i := range x {
		want += float64(F16ToF32(uint16(row[2*i])|uint16(row[2*i+1])<<8)) * float64(x[i])
	}
	if got := dotF16(row, x); math.Abs(float64(got)-want) > 1e-6 {
		t.Errorf("dot with subnormals = %g, want %g", got, want)
	}
}

// TestMatMulBatchInvariant checks that MatMul's output for (b, r) does not
// depend on how many vectors are multiplied together or how rows are
// split among goroutines, and equals DotFunc's value bit for bit.
func TestMatMulBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols, nx = 67, 512, 7
	for _, ty := range allTypes {
		w := make([]byte, 0)
		for range rows {
			w = append(w, randomRow(r, ty, cols)...)
		}
		x := gaussian(r, nx*cols, 1)
		all := make([]float32, nx*rows)
		if err := MatMul(ty, w, rows, cols, x, all); err != nil { // 240k MACs: parallel
			t.Fatal(err)
		}
		dot, _ := DotFunc(ty)
		rb, _ := ty.RowBytes(cols)
		one := make([]float32, rows)
		for b := 0; b < nx; b++ {
			if err := MatMul(ty, w, rows, cols, x[b*cols:(b+1)*cols], one); err != nil { // 34k MACs: serial
				t.Fatal(err)
			}
			for row := 0; row < rows; row++ {
				d := dot(w[row*rb:(row+1)*rb], x[b*cols:(b+1)*cols])
				if math.Float32bits(one[row]) != math.Float32bits(all[b*rows+row]) || math.Float32bits(d) != math.Float32bits(one[row]) {
					t.Fatalf("%s (b=%d, r=%d): nx=1 gives %g, nx=%d gives %g, DotFunc %g", ty, b, row, one[row], nx, all[b*rows+row], d)
				}
			}
		}
		// A single row (no parallelism at all) agrees too.
		single := make([]float32, nx)
		if err := MatMul(ty, w[:rb], 1, cols, x, single); err != nil {
			t.Fatal(err)
		}
		for b := range single {
			if math.Float32bits(single[b]) != math.Float32bits(all[b*rows]) {
				t.Fatalf("%s: one-row MatMul differs at b=%d", ty, b)
			}
		}
	}
}

// TestMatMulEmpty checks that zero rows or zero vectors are accepted.
func TestMatMulEmpty(t *testing.T) {
	if err := MatMul(Q8_0, nil, 0, 32, make([]float32, 64), nil); err != nil {
		t.Errorf("zero rows: %v", err)
	}
	if err := MatMul(Q8_0, make([]byte, 34), 1, 32, nil, nil); err != nil {
		t.Errorf("zero vectors: %v", err)
	}
}

// TestDotF32Unaligned checks that an F32 row that cannot be read in place
// (odd address) gives the same dot product and values as an aligned one.
func TestDotF32Unaligned(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 7, 32, 100, 1024} {
		row := randomRow(r, F32, n)
		x := gaussian(r, n, 1)
		// A buffer of uint32s is 4-byte aligned, so one byte in is not (a
		// byte buffer may start anywhere, and one byte in may be aligned).
		words := make([]uint32, n+1)
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4*len(words))
		odd := buf[1 : 1+len(row)]
		copy(odd, row)
		if _, ok := f32View(odd); ok {
			t.Fatal("f32View accepted an odd address")
		}
		a, b := dotF32(row, x), dotF32(odd, x)
		if math.Float32bits(a) != math.Float32bits(b) {
			t.Errorf("n=%d: aligned %g, unaligned %g", n, a, b)
		}
		w1, w2 := make([]float32, n), make([]float32, n)
		if err := Dequantize(F32, row, w1); err != nil {
			t.Fatal(err)
		}
		if err := Dequantize(F32, odd, w2); err != nil {
			t.Fatal(err)
		}
		for i := range w1 {
			if math.Float32bits(w1[i]) != math.Float32bits(w2[i]) {
				t.Fatalf("n=%d: Dequantize differs at %d: %g vs %g", n, i, w1[i], w2[i])
			}
		}
	}
}
