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

// Layer holds one transformer block's weights. Tags name the GGUF tensors;
// %d is the layer index.
type Layer struct {
	AttnNorm []float32 `gguf:"blk.%d.attn_norm.weight"`
	Q        Matrix    `gguf:"blk.%d.attn_q.weight"`
	K        Matrix    `gguf:"blk.%d.attn_k.weight"`
	V        Matrix    `gguf:"blk.%d.attn_v.weight"`
	O        Matrix    `gguf:"blk.%d.attn_output.weight"`
	QBias    []float32 `gguf:"blk.%d.attn_q.bias,optional"`
	KBias    []float32 `gguf:"blk.%d.attn_k.bias,optional"`
	VBias    []float32 `gguf:"blk.%d.attn_v.bias,optional"`
	FFNNorm  []float32 `gguf:"blk.%d.ffn_norm.weight"`
	Gate     Matrix    `gguf:"blk.%d.ffn_gate.weight"`
	Up       Matrix    `gguf:"blk.%d.ffn_up.weight"`
	Down     Matrix    `gguf:"blk.%d.ffn_down.weight"`
}

// Weights holds all of a model's weights.
type Weights struct {
	Embed     Matrix    `gguf:"token_embd.weight"`
	OutNorm   []float32 `gguf:"output_norm.weight"`
	Out       Matrix    `gguf:"output.weight,optional"` // absent: tied to Embed
	RopeFreqs []float32 `gguf:"rope_freqs.weight,optional"`
	Layers    []Layer
}

var (
	matrixType = reflect.TypeFor[Matrix]()
	vectorType = reflect.TypeFor[[]float32]()
)

// bind fills the tagged fields of the struct pointed to by dst from f,
// formatting each tag with args (the layer index). Matrices keep the file's
// bytes; vectors are dequantized to float32.
func bind(f *gguf.File, dst any, args ...any) error {
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
		switch field.Type {
		case matrixType:
			if len(t.Dims) != 2 {
				return fmt.Errorf("tensor %s has shape %v, want 2 dimensions", name, t.Dims)
			}
			v.Field(i).Set(reflect.ValueOf(Matrix{Type: t.Type, Cols: int(t.Dims[0]), Rows: int(t.Dims[1]), Data: f.TensorData(t)}))
		case vectorType:
			if len(t.Dims) != 1 {
				return fmt.Errorf("tensor %s has shape %v, want 1 dimension", name, t.Dims)
			}
			vec := make([]float32, t.Dims[0])
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

// loadWeights binds every weight of a model with configuration c and checks
// each shape against it.
func loadWeights(f *gguf.File, c Config) (*Weights, error) {
	w := &Weights{Layers: make([]Layer, c.Layers)}
	if err := bind(f, w); err != nil {
		return nil, err
	}
	if w.Out.Data == nil {
		w.Out = w.Embed
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	checks := []shapeCheck{
		{"token_embd.weight", w.Embed, c.Vocab, c.Dim},
		{"output.weight", w.Out, c.Vocab, c.Dim},
	}
	vecs := []vecCheck{{"output_norm.weight", w.OutNorm, c.Dim, false}}
	if w.RopeFreqs != nil {
		vecs = append(vecs, vecCheck{"rope_freqs.weight", w.RopeFreqs, c.RopeDim / 2, false})
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		if err := bind(f, l, i); err != nil {
			return nil, err
		}
		p := fmt.Sprintf("blk.%d.", i)
		checks = append(checks,
			shapeCheck{p + "attn_q.weight", l.Q, q, c.Dim},
			shapeCheck{p + "attn_k.weight", l.K, kv, c.Dim},
			shapeCheck{p + "attn_v.weight", l.V, kv, c.Dim},
			shapeCheck{p + "attn_output.weight", l.O, c.Dim, q},
			shapeCheck{p + "ffn_gate.weight", l.Gate, c.FFDim, c.Dim},
			shapeCheck{p + "ffn_up.weight", l.Up, c.FFDim, c.Dim},
			shapeCheck{p + "ffn_down.weight", l.Down, c.Dim, c.FFDim},
		)
		vecs = append(vecs,
			vecCheck{p + "attn_norm.weight", l.AttnNorm, c.Dim, false},
			vecCheck{p + "ffn_norm.weight", l.FFNNorm, c.Dim, false},
			vecCheck{p + "attn_q.bias", l.QBias, q, true},
			vecCheck{p + "attn_k.bias", l.KBias, kv, true},
			vecCheck{p + "attn_v.bias", l.VBias, kv, true},
		)
	}
	for _, s := range checks {
		if s.m.Rows != s.rows || s.m.Cols != s.cols {
			return nil, fmt.Errorf("tensor %s is %d×%d, want %d×%d for this model's configuration", s.name, s.m.Rows, s.m.Cols, s.rows, s.cols)
		}
	}
	for _, s := range vecs {
		if (s.v != nil || !s.optional) && len(s.v) != s.n {
			return nil, fmt.Errorf("tensor %s has %d elements, want %d", s.name, len(s.v), s.n)
		}
	}
	return w, nil
}

type shapeCheck struct {
	name       string
	m          Matrix
	rows, cols int
}

type vecCheck struct {
	name     string
	v        []float32
	n        int
	optional bool
}
