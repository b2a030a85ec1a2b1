package gguf_test

import (
	"fmt"
	"os"
	"path/filepath"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
)

// Example writes a small GGUF file (metadata and one F32 tensor, a 64-wide
// embedding of 512 tokens, as stories260K's) and reads it back.
func Example() {
	dir, err := os.MkdirTemp("", "gguf-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiny.gguf")
	out, err := os.Create(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	kvs := []gguf.KV{gguf.NewKV("general.architecture", "llama"), gguf.NewKV("llama.block_count", uint32(5))}
	emb := gguf.WriteTensor{Name: "token_embd.weight", Dims: []uint64{64, 512}, Type: quant.F32, Data: make([]byte, 64*512*4)}
	if err := gguf.Write(out, kvs, []gguf.WriteTensor{emb}); err != nil {
		fmt.Println(err)
		return
	}
	if err := out.Close(); err != nil {
		fmt.Println(err)
		return
	}

	f, err := gguf.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	arch, _ := f.String("general.architecture")
	layers, _ := f.Uint(arch + ".block_count")
	t, _ := f.Tensor("token_embd.weight")
	fmt.Println(arch, layers, t.Dims, t.Type)
	// Output: llama 5 [64 512] F32
}
