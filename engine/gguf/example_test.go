package gguf_test

import (
	"fmt"
	"path/filepath"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

func Example() {
	f, err := gguf.Open(filepath.Join(testshared.Dir(), "models", "stories260K.gguf"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	arch, _ := f.String("general.architecture")
	layers, _ := f.Uint(arch + ".block_count")
	emb, _ := f.Tensor("token_embd.weight")
	fmt.Println(arch, layers, emb.Dims, emb.Type)
	// Output: llama 5 [64 512] F32
}
