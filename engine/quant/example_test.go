package quant_test

import (
	"fmt"

	"kvscope/engine/quant"
)

// Quantize a row to Q8_0, then take its dot product with an activation
// vector straight from the blocks.
func Example() {
	w := make([]float32, 64)
	x := make([]float32, 64)
	for i := range w {
		w[i] = float32(i%8) / 8 // 0, 0.125, ... 0.875
		x[i] = 1
	}
	nb, err := quant.Q8_0.RowBytes(len(w))
	if err != nil {
		panic(err)
	}
	row := make([]byte, nb)
	if err := quant.Quantize(quant.Q8_0, w, row); err != nil {
		panic(err)
	}
	dot, err := quant.DotFunc(quant.Q8_0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d floats -> %d bytes\n", len(w), len(row))
	fmt.Printf("dot = %.2f (exact 28.00)\n", dot(row, x))
	// Output:
	// 64 floats -> 68 bytes
	// dot = 28.00 (exact 28.00)
}

// MatMul multiplies several rows by several vectors at once; out is
// indexed [vector][row].
func ExampleMatMul() {
	w := []float32{1, 2, 3, 4, 5, 6, 7, 8} // 2 rows × 4 columns
	x := []float32{1, 0, 0, 1, 0, 1, 1, 0} // 2 vectors of 4
	raw := make([]byte, 4*len(w))
	if err := quant.Quantize(quant.F32, w, raw); err != nil {
		panic(err)
	}
	out := make([]float32, 4)
	if err := quant.MatMul(quant.F32, raw, 2, 4, x, out); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: [5 13 5 13]
}
