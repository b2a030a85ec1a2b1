package synth_test

import (
	"fmt"

	"kvscope/engine/model"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// Make the demo model in memory and load it like any GGUF model.
func Example() {
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := model.New(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d layers, dim %d, %d heads over %d KV heads, vocabulary %d, %.1fM weights in %s\n",
		m.Arch, m.Layers, m.Dim, m.Heads, m.KVHeads, m.Vocab, float64(m.Params())/1e6, synth.Demo.Type)
	for _, id := range tok.Encode("The cat saw water.", true, false) {
		fmt.Printf("%q ", tok.Token(id))
	}
	fmt.Println()
	// Output:
	// llama: 4 layers, dim 256, 8 heads over 4 KV heads, vocabulary 4096, 5.2M weights in Q8_0
	// "<s>" "▁The" "▁cat" "▁saw" "▁water" "."
}

// Shapes of any size can be made; tests use small ones.
func ExampleGenerate() {
	s := synth.Shape{Name: "tiny", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFDim: 128, Vocab: 512, Context: 256, Type: synth.Demo.Type}
	a, err := synth.Generate(s, 42)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := synth.Generate(s, 42)
	fmt.Println(len(a), string(a[:4]), string(a) == string(b))
	// Output: 162528 GGUF true
}
