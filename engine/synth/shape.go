package synth

import (
	"fmt"

	"kvscope/engine/quant"
)

// Shape is the size of a Llama model to make.
type Shape struct {
	Name    string     // general.name of the file
	Dim     int        // embedding length
	Layers  int        // transformer blocks
	Heads   int        // query heads; the head dimension is Dim/Heads
	KVHeads int        // key/value heads (fewer than Heads: grouped-query attention)
	FFDim   int        // feed-forward hidden size
	Vocab   int        // vocabulary size, at least 260 (3 special tokens, 256 byte tokens and ▁)
	Context int        // context length (llama.context_length)
	Type    quant.Type // type of the embedding, output and layer matrices, e.g. Q4_0, Q8_0, F16
}

// TinyLlama has the shape of TinyLlama 1.1B (1.1 billion weights, 22
// layers, dim 2048, feed-forward 5632, 32 heads over 4 KV heads, vocabulary
// 32000, context 2048) in Q4_0: the model of the benchmark figures for
// llama.cpp in the shared data's README. Its file is about 620 MB. (llama.cpp's
// quantizer would store output.weight in Q6_K; here every matrix is Q4_0.)
var TinyLlama = Shape{
	Name: "synthetic TinyLlama-1.1B shape (random weights)", Dim: 2048, Layers: 22,
	Heads: 32, KVHeads: 4, FFDim: 5632, Vocab: 32000, Context: 2048, Type: quant.Q4_0,
}

// Demo is the app's built-in demo model: dim 256, 4 layers, 8 heads of 32
// over 4 KV heads, feed-forward 768, vocabulary 4096, context 4096, in
// Q8_0: 5.2 million weights, a 5.7 MB file.
//
// Why this size: it is the shape of the shared parity models, whose forward
// pass is checked against llama.cpp, so the engine is known to run it right.
// Its K/V cache takes 2 KiB per token in f16 (4 layers × K and V × 128
// values × 2 bytes), so a budget of 64 MiB holds 2048 blocks of 16 tokens
// and 128 MiB holds 4096: a heatmap of a few thousand blocks at a modest
// memory cost, which a few long sequences (256 blocks each at the full
// context) fill. A token costs 5.2 million multiply-adds in the matrices, a
// few milliseconds in pure Go (about 170 tokens/s for one sequence on the
// 2-core development machine), so it runs at interactive speed, and the
// whole file is made in about 10 ms. Q8_0 is among the fastest types of
// package quant and keeps the weights close to the random values drawn.
var Demo = Shape{
	Name: "kvscope demo (random weights)", Dim: 256, Layers: 4,
	Heads: 8, KVHeads: 4, FFDim: 768, Vocab: 4096, Context: 4096, Type: quant.Q8_0,
}

// Limits on a Shape.
const (
	maxSize      = 1 << 20 // any one size
	maxContext   = 1 << 24 // the context length (as model.ReadConfig allows)
	maxFileBytes = 1 << 36 // the whole file, 64 GiB
)

// HeadDim returns the dimension of one attention head, Dim/Heads.
func (s Shape) HeadDim() int {
	if s.Heads <= 0 {
		return 0
	}
	return s.Dim / s.Heads
}

// Params returns the number of weights of a model of this shape.
func (s Shape) Params() int64 {
	d, ff, kv := int64(s.Dim), int64(s.FFDim), int64(s.KVHeads*s.HeadDim())
	perLayer := 2*d*d + 2*d*kv + 3*d*ff + 2*d
	return int64(s.Layers)*perLayer + 2*int64(s.Vocab)*d + d
}

// Validate reports the first thing that keeps s from being a model, naming
// the field.
func (s Shape) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("synth: shape %q: %s", s.Name, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Dim", s.Dim}, {"Layers", s.Layers}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads}, {"FFDim", s.FFDim}, {"Vocab", s.Vocab}} {
		if f.v <= 0 || f.v > maxSize {
			return fail("%s %d is outside 1..%d", f.name, f.v, maxSize)
		}
	}
	if s.Context <= 0 || s.Context > maxContext {
		return fail("Context %d is outside 1..%d", s.Context, maxContext)
	}
	if s.Vocab < minVocab+1 {
		return fail("Vocab %d is less than %d (3 special tokens, 256 byte tokens and ▁)", s.Vocab, minVocab+1)
	}
	if s.Dim%s.Heads != 0 {
		return fail("Dim %d is not divisible by %d Heads", s.Dim, s.Heads)
	}
	if s.HeadDim()%2 != 0 {
		return fail("the head dimension %d (Dim/Heads) is odd; RoPE rotates pairs", s.HeadDim())
	}
	if s.Heads%s.KVHeads != 0 {
		return fail("%d Heads cannot be grouped over %d KVHeads", s.Heads, s.KVHeads)
	}
	if !quant.CanQuantize(s.Type) {
		return fail("weight type %s cannot be written by package quant", s.Type)
	}
	bs := s.Type.BlockSize()
	if s.Dim%bs != 0 || s.FFDim%bs != 0 {
		return fail("Dim %d and FFDim %d must be multiples of the %s block size %d", s.Dim, s.FFDim, s.Type, bs)
	}
	// Rows are no longer than FFDim, so the file's size is about the
	// weights' bytes.
	if b := float64(s.Params()) * float64(s.Type.TypeSize()) / float64(bs); b > maxFileBytes {
		return fail("the file would take %.0f bytes, more than %d", b, int64(maxFileBytes))
	}
	return nil
}
