package kvstore_test

import (
	"fmt"

	"kvscope/engine/kvstore"
)

// A store for stories260K's shape (5 layers, 4 KV heads, head dim 8) with
// 4-bit KIVI-style keys and values: the block's keys read back exactly (at
// f16) until its key group of 16 tokens is full.
func Example() {
	k, err := kvstore.ParsePrecision("int4")
	if err != nil {
		panic(err)
	}
	c := kvstore.Config{Layers: 5, KVHeads: 4, HeadDim: 8, BlockSize: 32, Blocks: 16, K: k, V: k}
	s, err := kvstore.New(c)
	if err != nil {
		panic(err)
	}
	row := make([]float32, 4*8) // one token's K (or V) row, head-major
	for t := range 3 {
		for i := range row {
			row[i] = float32(t) + float32(i)/4
		}
		s.Write(0, 7, t, row, row) // layer 0, block 7, slot t
	}
	keys := make([]float32, 4*3*8) // [head][token][dim]
	s.ReadK(0, 7, 3, keys)
	fmt.Println("head 1, token 2:", keys[(1*3+2)*8:(1*3+2)*8+8])
	inUse, _ := s.Residuals()
	fmt.Println("residual bytes held (layer 0's partial key group):", inUse)

	kb, vb := kvstore.BitsPerValue(c)
	fmt.Printf("block: %d bytes (K %.1f, V %.1f bits a value); residual of a partial key group: %d bytes\n",
		kvstore.BlockBytes(c), kb, vb, kvstore.ResidualBytes(c))
	// Output:
	// head 1, token 2: [4 4.25 4.5 4.75 5 5.25 5.5 5.75]
	// residual bytes held (layer 0's partial key group): 1024
	// block: 6200 bytes (K 5.2, V 4.5 bits a value); residual of a partial key group: 5120 bytes
}
