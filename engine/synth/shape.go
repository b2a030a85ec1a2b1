package synth

import (
	"fmt"
	"strings"

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

	// The zero values of the fields below make a Llama 2 style model, as
	// TinyLlama is; Llama 3 and Qwen 2.5 need some of them.
	Arch       string  // general.architecture: "llama" (when empty) or "qwen2"
	Pre        string  // "": the SPM vocabulary; else a GPT-2 byte-level BPE vocabulary with this tokenizer.ggml.pre ("llama-bpe", "qwen2")
	Biases     bool    // Q, K and V biases (qwen2 requires them)
	Tied       bool    // no output.weight: the output matrix is the embedding table
	RopeBase   float32 // RoPE frequency base; 0: 10000
	Llama3Rope float32 // Llama 3's RoPE scaling factor, written as rope_freqs.weight (low 1, high 4, original context 8192); 0: none
	NormEps    float32 // RMSNorm epsilon; 0: 1e-5
	// Medium, with Type Q4_K or Q5_K, makes llama-quantize's Q4_K_M or
	// Q5_K_M mix: Q6_K for the output matrix and for attn_v and ffn_down in
	// the layers llama.cpp's use_more_bits picks (the first and last eighth
	// and every third between).
	Medium bool
}

// Presets are the named shapes of real models that kvscope gen-model
// writes, by name: TinyLlama, Llama 3.2 1B and Qwen 2.5 0.5B (each with its
// architecture's vocabulary kind, RoPE, biases and tied output), and
// "small", a 2-million-weight Llama for tests. The weight type is Q4_0;
// set Type (and Medium) for another.
var Presets = map[string]Shape{
	"tinyllama-1.1b": TinyLlama,
	"llama-3.2-1b":   Llama32_1B,
	"qwen2.5-0.5b":   Qwen25_05B,
	"small":          Small,
}

// Llama32_1B has the shape of Llama 3.2 1B: 16 layers, dim 2048,
// feed-forward 8192, 32 heads over 8 KV heads, a 128,256-token byte-level
// BPE vocabulary (pre-tokenizer llama-bpe, 256 control tokens at the end),
// the output tied to the embeddings, RoPE base 500,000 with Llama 3's
// frequency factors (factor 32), context 131,072; 1.24 billion weights.
var Llama32_1B = Shape{
	Name: "synthetic Llama-3.2-1B shape (random weights)", Dim: 2048, Layers: 16,
	Heads: 32, KVHeads: 8, FFDim: 8192, Vocab: 128256, Context: 131072, Type: quant.Q4_0,
	Pre: "llama-bpe", Tied: true, RopeBase: 500000, Llama3Rope: 32,
}

// Qwen25_05B has the shape of Qwen 2.5 0.5B: architecture qwen2, 24
// layers, dim 896, feed-forward 4864, 14 heads over 2 KV heads, Q/K/V
// biases, a 151,936-token byte-level BPE vocabulary (pre-tokenizer qwen2),
// the output tied to the embeddings, RoPE base 1,000,000, RMSNorm epsilon
// 1e-6, context 32,768; 494 million weights. Its rows of 896 are not a
// multiple of the K-quants' 256: those matrices fall back as
// llama-quantize's do (Q4_K to Q5_0, Q6_K to Q8_0).
var Qwen25_05B = Shape{
	Name: "synthetic Qwen2.5-0.5B shape (random weights)", Dim: 896, Layers: 24,
	Heads: 14, KVHeads: 2, FFDim: 4864, Vocab: 151936, Context: 32768, Type: quant.Q4_0,
	Arch: "qwen2", Pre: "qwen2", Biases: true, Tied: true, RopeBase: 1e6, NormEps: 1e-6,
}

// Small is a quick Llama for tests: dim 256 (a multiple of the K-quants'
// block, so that every type applies), 2 layers, 4 heads over 2 KV heads,
// feed-forward 512, vocabulary 2048, context 2048, in Q4_0.
var Small = Shape{
	Name: "kvscope small test model (random weights)", Dim: 256, Layers: 2,
	Heads: 4, KVHeads: 2, FFDim: 512, Vocab: 2048, Context: 2048, Type: quant.Q4_0,
}

// TinyLlama has the shape of TinyLlama 1.1B (1.1 billion weights, 22
// layers, dim 2048, feed-forward 5632, 32 heads over 4 KV heads, vocabulary
// 32000, context 2048) in Q4_0: the model kvscope bench speed runs, beside
// llama.cpp on the same file. Its file is about 620 MB. (llama.cpp's
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
	var n int64
	for _, sp := range s.tensors() {
		n += int64(sp.info.Elements())
	}
	return n
}

// arch returns the architecture name, "llama" when Arch is empty.
func (s Shape) arch() string {
	if s.Arch == "" {
		return "llama"
	}
	return s.Arch
}

// fallback is llama-quantize's replacement for a K-quant when a row's
// length is not a multiple of its 256-value block.
var fallback = map[quant.Type]quant.Type{
	quant.Q2_K: quant.IQ4_NL, quant.Q3_K: quant.IQ4_NL, quant.Q4_K: quant.Q5_0,
	quant.Q5_K: quant.Q5_1, quant.Q6_K: quant.Q8_0,
}

// matrixType returns the type of matrix name (of layer l, -1 for none) with
// rows of cols values: Type, or Q6_K where Medium asks for more bits, then
// the fallback where the row does not hold whole blocks.
func (s Shape) matrixType(name string, l, cols int) quant.Type {
	t := s.Type
	if s.Medium {
		out := name == "output.weight" || s.Tied && name == "token_embd.weight"
		if out || (strings.HasSuffix(name, ".attn_v.weight") || strings.HasSuffix(name, ".ffn_down.weight")) && useMoreBits(l, s.Layers) {
			t = quant.Q6_K
		}
	}
	if bs := t.BlockSize(); bs > 0 && cols%bs != 0 {
		if fb, ok := fallback[t]; ok {
			t = fb
		}
	}
	return t
}

// useMoreBits is llama.cpp's choice of the layers that get more bits in
// the _M mixes.
func useMoreBits(l, n int) bool {
	return l >= 0 && (l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2)
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
	switch s.arch() {
	case "llama":
	case "qwen2":
		if !s.Biases {
			return fail("architecture qwen2 needs Biases")
		}
	default:
		return fail("architecture %q is not llama or qwen2", s.Arch)
	}
	if s.Pre != "" && s.Vocab < minBPEVocab {
		return fail("Vocab %d is less than %d (256 byte tokens, %d control tokens and one more)", s.Vocab, minBPEVocab, bpeSpecials)
	}
	if s.Medium && s.Type != quant.Q4_K && s.Type != quant.Q5_K {
		return fail("the _M mix is made of Q4_K or Q5_K, not %s", s.Type)
	}
	if s.Llama3Rope < 0 || s.RopeBase < 0 || s.NormEps < 0 {
		return fail("Llama3Rope %g, RopeBase %g and NormEps %g must not be negative", s.Llama3Rope, s.RopeBase, s.NormEps)
	}
	// Rows are no longer than FFDim, so the file's size is about the
	// weights' bytes.
	var b float64
	for _, sp := range s.tensors() {
		t := sp.info.Type
		if !quant.CanQuantize(t) {
			return fail("weight type %s (of %s) cannot be written by package quant", t, sp.info.Name)
		}
		if bs := t.BlockSize(); int(sp.info.Dims[0])%bs != 0 {
			return fail("Dim %d and FFDim %d must be multiples of the %s block size %d", s.Dim, s.FFDim, t, bs)
		}
		b += float64(sp.info.Elements()) * float64(t.TypeSize()) / float64(t.BlockSize())
	}
	if b > maxFileBytes {
		return fail("the file would take %.0f bytes, more than %d", b, int64(maxFileBytes))
	}
	return nil
}
