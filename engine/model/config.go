package model

import (
	"fmt"
	"math"

	"kvscope/engine/gguf"
)

// Config is a model's shape and hyper-parameters, read from GGUF metadata.
type Config struct {
	Arch      string  // "llama", "qwen2", "qwen3", "phi3" or "gemma3"
	Dim       int     // embedding length
	Layers    int     // transformer blocks
	Heads     int     // query heads
	KVHeads   int     // key/value heads (grouped-query attention when fewer than Heads)
	HeadDim   int     // dimension of one head
	FFDim     int     // feed-forward hidden size
	Vocab     int     // vocabulary size (rows of the output matrix)
	Context   int     // training context length
	NormEps   float32 // RMSNorm epsilon
	RopeDim   int     // dimensions of each head that RoPE rotates
	RopeBase  float32 // RoPE frequency base
	RopeScale float32 // linear RoPE scaling factor (positions are divided by it); 1 for none
	RopeNeoX  bool    // rotate the two halves of a head (NeoX) instead of adjacent pairs

	// Gemma 3.
	EmbedScale    float32 // input embeddings are multiplied by it (sqrt(Dim)); 0: not scaled
	GELU          bool    // the feed-forward is gelu(gate)·up, not silu(gate)·up
	Window        int     // sliding-window layers see their Window latest positions; 0: none
	WindowPeriod  int     // layer l has the window iff l%WindowPeriod < WindowPeriod-1
	RopeBaseLocal float32 // the sliding-window layers' RoPE base
}

// Local reports whether layer l is a sliding-window layer.
func (c *Config) Local(l int) bool {
	return c.Window > 0 && l%c.WindowPeriod < c.WindowPeriod-1
}

// Supported lists the architectures this package runs.
var Supported = []string{"llama", "qwen2", "qwen3", "phi3", "gemma3"}

// ReadConfig reads a model's Config from GGUF metadata, with clear errors for
// missing or impossible values and unsupported architectures.
func ReadConfig(f *gguf.File) (Config, error) {
	var c Config
	arch, ok := f.String("general.architecture")
	if !ok {
		return c, fmt.Errorf("no general.architecture in the file: not a model GGUF")
	}
	c.Arch = arch
	switch arch {
	case "llama":
	case "qwen2", "qwen3", "phi3":
		c.RopeNeoX = true
	case "gemma3":
		c.RopeNeoX, c.GELU = true, true
	default:
		return c, fmt.Errorf("architecture %q is not supported (supported: %v)", arch, Supported)
	}
	need := func(key string, dst *int) error {
		v, ok := f.Uint(arch + "." + key)
		if !ok || v == 0 || v > 1<<24 {
			return fmt.Errorf("metadata %s.%s is missing or out of range", arch, key)
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"embedding_length", &c.Dim},
		{"block_count", &c.Layers},
		{"attention.head_count", &c.Heads},
		{"feed_forward_length", &c.FFDim},
		{"context_length", &c.Context},
	} {
		if err := need(k.key, k.dst); err != nil {
			return c, err
		}
	}
	// Each size is bounded here only so that products of sizes cannot
	// overflow; the weights' shapes, checked against the tensors the file
	// holds, bound them by the file's size.
	optional := func(key string, dst *int) error {
		if v, ok := f.Uint(arch + "." + key); ok {
			if v > 1<<24 {
				return fmt.Errorf("metadata %s.%s is %d, out of range", arch, key, v)
			}
			*dst = int(v)
		}
		return nil
	}
	c.KVHeads = c.Heads
	if err := optional("attention.head_count_kv", &c.KVHeads); err != nil {
		return c, err
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
		return c, fmt.Errorf("%d query heads cannot be grouped over %d key/value heads", c.Heads, c.KVHeads)
	}
	if c.Dim%c.Heads != 0 {
		return c, fmt.Errorf("embedding length %d is not divisible by %d heads", c.Dim, c.Heads)
	}
	c.HeadDim = c.Dim / c.Heads
	if err := optional("attention.key_length", &c.HeadDim); err != nil {
		return c, err
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	c.RopeDim = c.HeadDim
	if err := optional("rope.dimension_count", &c.RopeDim); err != nil {
		return c, err
	}
	if c.RopeDim == 0 {
		c.RopeDim = c.HeadDim
	}
	if c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
		return c, fmt.Errorf("RoPE dimension %d does not fit head dimension %d", c.RopeDim, c.HeadDim)
	}
	c.NormEps = 1e-5
	if v, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	c.RopeBase = 10000
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	c.RopeScale = 1
	if typ, _ := f.String(arch + ".rope.scaling.type"); typ == "linear" {
		if v, ok := f.Float(arch + ".rope.scaling.factor"); ok && v > 0 {
			c.RopeScale = float32(v)
		}
	} else if typ != "" && typ != "none" {
		return c, fmt.Errorf("RoPE scaling %q is not supported (only linear)", typ)
	}
	if arch == "gemma3" {
		c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
		if err := optional("attention.sliding_window", &c.Window); err != nil {
			return c, err
		}
		// Converted Gemma 3 files carry no pattern: llama.cpp's default,
		// five local layers then a global one.
		c.WindowPeriod = 6
		c.RopeBaseLocal = 10000
		if v, ok := f.Float(arch + ".rope.freq_base_swa"); ok {
			c.RopeBaseLocal = float32(v)
		}
	}
	if emb, ok := f.Tensor("token_embd.weight"); ok && len(emb.Dims) == 2 {
		c.Vocab = int(emb.Dims[1])
	} else {
		return c, fmt.Errorf("no 2-D tensor token_embd.weight in the file")
	}
	return c, nil
}
