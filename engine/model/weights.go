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
	FFNNorm  []float32 `gguf:"blk.%d.ffn_norm.weight" shape:"dim"`
	Gate     Matrix    `gguf:"blk.%d.ffn_gate.weight" shape:"ff,dim"`
	Up       Matrix    `gguf:"blk.%d.ffn_up.weight" shape:"ff,dim"`
	Down     Matrix    `gguf:"blk.%d.ffn_down.weight" shape:"dim,ff"`
}

// Weights holds all of a model's weights.
type Weights struct {
	Embed     Matrix    `gguf:"token_embd.weight" shape:"vocab,dim"`
	OutNorm   []float32 `gguf:"output_norm.weight" shape:"dim"`
	Out       Matrix    `gguf:"output.weight,optional" shape:"vocab,dim"` // absent: tied to Embed
	RopeFreqs []float32 `gguf:"rope_freqs.weight,optional" shape:"rope"`
	Layers    []Layer
}

// layerTensors is the number of tensors every layer must have.
var layerTensors = func() int {
	n := 0
	for f := range reflect.TypeFor[Layer]().Fields() {
		if tag, ok := f.Tag.Lookup("gguf"); ok && !strings.HasSuffix(tag, ",optional") {
			n++
		}
	}
	return n
}()

// sizes names the sizes that shape tags use.
func (c *Config) sizes() map[string]int {
	return map[string]int{
		"dim":   c.Dim,
		"q":     c.Heads * c.HeadDim,
		"kv":    c.KVHeads * c.HeadDim,
		"ff":    c.FFDim,
		"vocab": c.Vocab,
		"rope":  c.RopeDim / 2,
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
		if err := bind(f, sizes, &w.Layers[i], i); err != nil {
			return nil, err
		}
	}
	return w, nil
}
