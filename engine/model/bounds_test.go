package model

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
)

// tinyFile writes a valid two-layer llama GGUF (dim 8, 2 heads over 1 KV
// head, feed-forward 16, vocabulary 8) in f32, after edit has changed its
// metadata and tensors.
func tinyFile(t *testing.T, edit func(kvs map[string]any, tensors map[string][]uint64)) []byte {
	t.Helper()
	kvs := map[string]any{
		"general.architecture":          "llama",
		"llama.embedding_length":        uint32(8),
		"llama.block_count":             uint32(2),
		"llama.attention.head_count":    uint32(2),
		"llama.attention.head_count_kv": uint32(1),
		"llama.feed_forward_length":     uint32(16),
		"llama.context_length":          uint32(64),
	}
	tensors := map[string][]uint64{"token_embd.weight": {8, 8}, "output_norm.weight": {8}}
	for l := range 2 {
		p := fmt.Sprintf("blk.%d.", l)
		for name, dims := range map[string][]uint64{
			"attn_norm.weight": {8}, "ffn_norm.weight": {8},
			"attn_q.weight": {8, 8}, "attn_k.weight": {8, 4}, "attn_v.weight": {8, 4}, "attn_output.weight": {8, 8},
			"ffn_gate.weight": {8, 16}, "ffn_up.weight": {8, 16}, "ffn_down.weight": {16, 8},
		} {
			tensors[p+name] = dims
		}
	}
	if edit != nil {
		edit(kvs, tensors)
	}
	var kvList []gguf.KV
	for k, v := range kvs {
		kvList = append(kvList, gguf.NewKV(k, v))
	}
	var ts []gguf.WriteTensor
	for name, dims := range tensors {
		typ := quant.F32
		if dims[0]%256 == 0 && dims[0] > 1024 {
			typ = quant.Q2_K // a long vector stored small
		}
		rows := uint64(1)
		for _, d := range dims[1:] {
			rows *= d
		}
		rb, err := typ.RowBytes(int(dims[0]))
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, gguf.WriteTensor{Name: name, Dims: dims, Type: typ, Data: make([]byte, uint64(rb)*rows)})
	}
	var b bytes.Buffer
	if err := gguf.Write(&b, kvList, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A model file whose metadata or tensors do not fit together gives an error
// naming the key or tensor, and New allocates little more than the file's
// size while finding out (the allocation bound catches a count that sizes
// an allocation before it is checked, and a vector dequantized before its
// length is).
func TestNewBoundedByFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(kvs map[string]any, tensors map[string][]uint64)
		want string // "" for a file that loads
	}{
		{"valid", nil, ""},
		{"huge block_count", func(kvs map[string]any, _ map[string][]uint64) { kvs["llama.block_count"] = uint32(1 << 24) }, "block_count is 16777216"},
		{"block_count past the tensors", func(kvs map[string]any, _ map[string][]uint64) { kvs["llama.block_count"] = uint32(3) }, "block_count is 3"},
		{"block_count only", func(kvs map[string]any, tensors map[string][]uint64) {
			kvs["llama.block_count"] = uint32(1 << 24)
			for name := range tensors {
				if name != "token_embd.weight" {
					delete(tensors, name)
				}
			}
		}, "block_count"},
		{"long norm vector", func(_ map[string]any, tensors map[string][]uint64) {
			tensors["blk.1.attn_norm.weight"] = []uint64{1 << 21}
		}, "blk.1.attn_norm.weight has shape [2097152]"},
		{"long output norm", func(_ map[string]any, tensors map[string][]uint64) { tensors["output_norm.weight"] = []uint64{1 << 21} }, "output_norm.weight"},
		{"long bias", func(_ map[string]any, tensors map[string][]uint64) { tensors["blk.0.attn_k.bias"] = []uint64{1 << 21} }, "attn_k.bias"},
		{"norm as a matrix", func(_ map[string]any, tensors map[string][]uint64) { tensors["blk.0.ffn_norm.weight"] = []uint64{8, 1} }, "ffn_norm.weight"},
		{"wrong matrix", func(_ map[string]any, tensors map[string][]uint64) {
			tensors["blk.1.ffn_down.weight"] = []uint64{8, 16}
		}, "ffn_down.weight has shape [8 16], want [16 8]"},
		{"huge head_count_kv", func(kvs map[string]any, _ map[string][]uint64) {
			kvs["llama.attention.head_count_kv"] = uint64(1 << 62)
		}, "head_count_kv"},
		{"huge key_length", func(kvs map[string]any, _ map[string][]uint64) { kvs["llama.attention.key_length"] = uint64(1<<63 + 4) }, "key_length"},
		{"huge rope dimension", func(kvs map[string]any, _ map[string][]uint64) { kvs["llama.rope.dimension_count"] = uint64(1 << 40) }, "rope.dimension_count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := tinyFile(t, tc.edit)
			var err error
			n := allocated(func() {
				var f *gguf.File
				if f, err = gguf.Parse(data); err == nil {
					_, err = New(f)
				}
			})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid file: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if limit := 4*uint64(len(data)) + 64<<10; n > limit {
				t.Errorf("a %d-byte file allocated %d bytes, more than 4×size+64 KiB = %d", len(data), n, limit)
			}
		})
	}
}
