package quant

import "fmt"

// kernel holds the operations kvscope implements for one type. quant is nil
// for types that can be read but not written. DotFunc and MatMul compute
// with dequant (see matmul.go).
type kernel struct {
	dequant func(src []byte, dst []float32)
	quant   func(src []float32, dst []byte)
}

var kernels = map[Type]kernel{
	F32:    {dequant: dequantF32, quant: quantF32},
	F16:    {dequant: dequantF16, quant: quantF16},
	BF16:   {dequant: dequantBF16, quant: quantBF16},
	Q8_0:   {dequant: dequantQ8_0, quant: quantQ8_0},
	Q4_0:   {dequant: dequantQ4_0, quant: quantQ4_0},
	Q4_1:   {dequant: dequantQ4_1, quant: quantQ4_1},
	Q5_0:   {dequant: dequantQ5_0, quant: quantQ5_0},
	Q5_1:   {dequant: dequantQ5_1, quant: quantQ5_1},
	Q2_K:   {dequant: dequantQ2_K, quant: quantQ2_K},
	Q3_K:   {dequant: dequantQ3_K, quant: quantQ3_K},
	Q4_K:   {dequant: dequantQ4_K, quant: quantQ4_K},
	Q5_K:   {dequant: dequantQ5_K, quant: quantQ5_K},
	Q6_K:   {dequant: dequantQ6_K, quant: quantQ6_K},
	IQ4_NL: {dequant: dequantIQ4_NL, quant: quantIQ4_NL},
}

// Supported reports whether kvscope can dequantize t and take dot products
// with it.
func Supported(t Type) bool {
	_, ok := kernels[t]
	return ok
}

// CanQuantize reports whether Quantize can write type t.
func CanQuantize(t Type) bool {
	k, ok := kernels[t]
	return ok && k.quant != nil
}

func kernelFor(t Type) (kernel, error) {
	k, ok := kernels[t]
	if !ok {
		return kernel{}, fmt.Errorf("tensor type %s is not supported", t)
	}
	return k, nil
}

// checkLengths verifies that n elements of t fit in a whole number of blocks
// and take exactly nbytes bytes.
func checkLengths(t Type, n, nbytes int) error {
	bs := t.BlockSize()
	if n%bs != 0 {
		return fmt.Errorf("%s: %d elements are not a whole number of %d-element blocks", t, n, bs)
	}
	want := n / bs * t.TypeSize()
	if nbytes != want {
		return fmt.Errorf("%s: %d elements take %d bytes, got %d", t, n, want, nbytes)
	}
	return nil
}

// Dequantize decodes src, which holds len(dst) elements of type t, into
// dst. len(dst) must be a multiple of t's block size and len(src) must be
// exactly the bytes those elements take.
func Dequantize(t Type, src []byte, dst []float32) error {
	k, err := kernelFor(t)
	if err != nil {
		return err
	}
	if err := checkLengths(t, len(dst), len(src)); err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	k.dequant(src, dst)
	return nil
}

// Quantize encodes src into dst as type t. len(src) must be a multiple of
// t's block size and len(dst) must be exactly the bytes those elements take.
// For F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 the bytes are those
// llama.cpp's reference encoders write. The IQ4_NL and K-quant encoders are
// simpler than llama.cpp's: they produce valid blocks with small error (see
// the package tests for figures), but not llama.cpp's bytes.
func Quantize(t Type, src []float32, dst []byte) error {
	k, err := kernelFor(t)
	if err != nil {
		return err
	}
	if k.quant == nil {
		return fmt.Errorf("quantizing to %s is not supported", t)
	}
	if err := checkLengths(t, len(src), len(dst)); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	k.quant(src, dst)
	return nil
}

// DotFunc returns the function that computes the dot product of one row of
// type t (len(x) elements, stored in len(row) bytes) with the float32 vector
// x. It dequantizes the row 256 elements at a time and sums the products in
// float32 in a fixed order (four lanes, element j in lane j%4), so a given
// (row, x) always gives the same bits, the same as MatMul gives for that
// row and vector; it is Dequantize followed by a float32 dot product.
//
// The returned function does not check its arguments: len(x) must be a
// multiple of t's block size and len(row) must equal t.RowBytes(len(x)).
// Violating this is a programming error and panics.
func DotFunc(t Type) (func(row []byte, x []float32) float32, error) {
	k, err := kernelFor(t)
	if err != nil {
		return nil, err
	}
	return dotFunc(t, k.dequant), nil
}

// dotLenPanic reports a violated DotFunc contract.
func dotLenPanic(t Type, nrow, nx int) {
	panic(fmt.Sprintf("quant: %s dot product of a %d-byte row with %d activations: lengths do not match", t, nrow, nx))
}
