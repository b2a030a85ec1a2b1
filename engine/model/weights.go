package model

import (
	"fmt"
	"reflect"
	"strings"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
)

// Matrix is a 2-D weight kept in its stored type: Rows rows of Cols
// elements each, in the file's bytes (not copied).
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// Layer holds one transformer block's weights. The gguf tags name the GGUF
// tensors (%d is the layer index); the shape tags give each tensor's shape,
// rows then columns, in the sizes of the model's configuration (see
// Config.sizes).
type Layer struct {
	AttnNorm []float32 `gguf:"blk.%d.attn_norm.weight" shape:"dim"`
	Q        Matrix    `gguf:"blk.%d.attn_q.weight" shape:"q,dim"`
	K        Matrix    `gguf:"blk.%d.attn_k.weight" shape:"kv,dim"`
	V        Matrix    `gguf:"blk.%d.attn_v.weight" shape:"kv,dim"`
	O        Matrix    `gguf:"blk.%d.attn_output.weight" shape:"dim,q"`
	QBias    []float32 `gguf:"blk.%d.attn_q.bias,optional" shape:"q"`
	KBias    []float32 `gguf:"blk.%d.attn_k.bias,optional" shape:"kv"`
	VBias    []float32 `gguf:"blk.%d.attn_v.bias,optional" shape:"kv"`
	QNorm    []float32 `gguf:"blk.%d.attn_q_norm.weight,optional" shape:"head"` // qwen3: RMSNorm of each query head
	KNorm    []float32 `gguf:"blk.%d.attn_k_norm.weight,optional" shape:"head"` // and of each key head, before RoPE
	FFNNorm  []float32 `gguf:"blk.%d.ffn_norm.weight" shape:"dim"`
	// Gemma 3 normalizes the attention's and the feed-forward's outputs
	// before each residual add.
	PostAttnNorm []float32 `gguf:"blk.%d.post_attention_norm.weight,optional" shape:"dim"`
	PostFFNNorm  []float32 `gguf:"blk.%d.post_ffw_norm.weight,optional" shape:"dim"`
	Gate         Matrix    `gguf:"blk.%d.ffn_gate.weight" shape:"ff,dim"`
	Up           Matrix    `gguf:"blk.%d.ffn_up.weight" shape:"ff,dim"`
	Down         Matrix    `gguf:"blk.%d.ffn_down.weight" shape:"dim,ff"`
}

// Weights holds all of a model's weights.
type Weights struct {
	Embed     Matrix    `gguf:"token_embd.weight" shape:"vocab,dim"`
	OutNorm   []float32 `gguf:"output_norm.weight" shape:"dim"`
	Out       Matrix    `gguf:"output.weight,optional" shape:"vocab,dim"` // absent: tied to Embed
	RopeFreqs []float32 `gguf:"rope_freqs.weight,optional" shape:"rope"`
	Layers    []Layer
}

// fusedLayer is a phi3 layer as stored: q, k and v in one matrix, and the
// gate and up projections in another (gate first). Loading cuts them into a
// Layer's matrices, sharing the file's bytes (a matrix's rows are
// consecutive).
type fusedLayer struct {
	AttnNorm []float32 `gguf:"blk.%d.attn_norm.weight" shape:"dim"`
	QKV      Matrix    `gguf:"blk.%d.attn_qkv.weight" shape:"qkv,dim"`
	O        Matrix    `gguf:"blk.%d.attn_output.weight" shape:"dim,q"`
	FFNNorm  []float32 `gguf:"blk.%d.ffn_norm.weight" shape:"dim"`
	GateUp   Matrix    `gguf:"blk.%d.ffn_up.weight" shape:"ff2,dim"`
	Down     Matrix    `gguf:"blk.%d.ffn_down.weight" shape:"dim,ff"`
}

// layer cuts a fused layer into a Layer.
func (fl *fusedLayer) layer(c *Config) Layer {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	return Layer{AttnNorm: fl.AttnNorm, FFNNorm: fl.FFNNorm, O: fl.O, Down: fl.Down,
		Q: fl.QKV.rows(0, q), K: fl.QKV.rows(q, q+kv), V: fl.QKV.rows(q+kv, q+2*kv),
		Gate: fl.GateUp.rows(0, c.FFDim), Up: fl.GateUp.rows(c.FFDim, 2*c.FFDim)}
}

// rows returns rows [from, to) of m, sharing its bytes.
func (m Matrix) rows(from, to int) Matrix {
	rb := len(m.Data) / m.Rows
	return Matrix{Type: m.Type, Rows: to - from, Cols: m.Cols, Data: m.Data[from*rb : to*rb : to*rb]}
}

// tensorsOf is the number of tensors every layer of struct type T must
// have.
func tensorsOf[T any]() int {
	n := 0
	for f := range reflect.TypeFor[T]().Fields() {
		if tag, ok := f.Tag.Lookup("gguf"); ok && !strings.HasSuffix(tag, ",optional") {
			n++
		}
	}
	return n
}

// sizes names the sizes that shape tags use.
func (c *Config) sizes() map[string]int {
	return map[string]int{
		"dim":   c.Dim,
		"q":     c.Heads * c.HeadDim,
		"kv":    c.KVHeads * c.HeadDim,
		"ff":    c.FFDim,
		"vocab": c.Vocab,
		"rope":  c.RopeDim / 2,
		"head":  c.HeadDim,
		"qkv":   (c.Heads + 2*c.KVHeads) * c.HeadDim,
		"ff2":   2 * c.FFDim,
	}
}

var (
	matrixType = reflect.TypeFor[Matrix]()
	vectorType = reflect.TypeFor[[]float32]()
)

// bind fills the tagged fields of the struct pointed to by dst from f,
// formatting each name with args (the layer index) and checking each
// tensor's shape against its shape tag before using it. Matrices keep the
// file's bytes; vectors are dequantized to float32.
func bind(f *gguf.File, sizes map[string]int, dst any, args ...any) error {
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		tag, ok := field.Tag.Lookup("gguf")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		name = fmt.Sprintf(name, args...)
		t, ok := f.Tensor(name)
		if !ok {
			if opts == "optional" {
				continue
			}
			return fmt.Errorf("tensor %s is missing", name)
		}
		if !quant.Supported(t.Type) {
			return fmt.Errorf("tensor %s has type %s, which is not supported", name, t.Type)
		}
		var want []int // ggml order: row length first
		for _, s := range strings.Split(field.Tag.Get("shape"), ",") {
			n, ok := sizes[s]
			if !ok {
				return fmt.Errorf("field %s has an unknown size %q in its shape tag", field.Name, s)
			}
			want = append([]int{n}, want...)
		}
		if !sameShape(t.Dims, want) {
			return fmt.Errorf("tensor %s has shape %v, want %v (row length first) for this model's configuration", name, t.Dims, want)
		}
		switch field.Type {
		case matrixType:
			v.Field(i).Set(reflect.ValueOf(Matrix{Type: t.Type, Cols: want[0], Rows: want[1], Data: f.TensorData(t)}))
		case vectorType:
			vec := make([]float32, want[0])
			if err := quant.Dequantize(t.Type, f.TensorData(t), vec); err != nil {
				return fmt.Errorf("tensor %s: %w", name, err)
			}
			v.Field(i).Set(reflect.ValueOf(vec))
		default:
			return fmt.Errorf("field %s has no binding for type %s", field.Name, field.Type)
		}
	}
	return nil
}

func sameShape(dims []uint64, want []int) bool {
	if len(dims) != len(want) {
		return false
	}
	for i, d := range dims {
		if d != uint64(want[i]) {
			return false
		}
	}
	return true
}

// loadWeights binds every weight of a model with configuration c. Before it
// makes the layers it checks that the file holds enough tensors for them,
// so that a count in the metadata never sizes an allocation by itself.
func loadWeights(f *gguf.File, c Config) (*Weights, error) {
	fused := c.Arch == "phi3"
	layerTensors := tensorsOf[Layer]()
	if fused {
		layerTensors = tensorsOf[fusedLayer]()
	}
	if c.Layers > len(f.Tensors)/layerTensors {
		return nil, fmt.Errorf("metadata %s.block_count is %d, but the file's %d tensors hold at most %d blocks of %d tensors",
			c.Arch, c.Layers, len(f.Tensors), len(f.Tensors)/layerTensors, layerTensors)
	}
	sizes := c.sizes()
	w := &Weights{}
	if err := bind(f, sizes, w); err != nil {
		return nil, err
	}
	if w.Out.Data == nil {
		w.Out = w.Embed
	}
	w.Layers = make([]Layer, c.Layers)
	for i := range w.Layers {
		if fused {
			var fl fusedLayer
			if err := bind(f, sizes, &fl, i); err != nil {
				return nil, err
			}
			w.Layers[i] = fl.layer(&c)
			continue
		}
		if err := bind(f, sizes, &w.Layers[i], i); err != nil {
			return nil, err
		}
	}
	return w, nil
}
