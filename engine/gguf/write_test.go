package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"kvscope/engine/quant"
	"kvscope/internal/testshared"
)

// writeParse writes kvs and tensors and parses the result.
func writeParse(t *testing.T, kvs []KV, tensors []WriteTensor) (*File, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatalf("the written file does not parse: %v", err)
	}
	return f, buf.Bytes()
}

func TestWriteValues(t *testing.T) {
	tests := []struct {
		name  string
		value any
	}{
		{"uint8", uint8(200)},
		{"int8", int8(-100)},
		{"uint16", uint16(60000)},
		{"int16", int16(-30000)},
		{"uint32", uint32(4000000000)},
		{"int32", int32(-2000000000)},
		{"float32", float32(-1.5e-7)},
		{"float32 inf", float32(math.Inf(-1))},
		{"bool true", true},
		{"bool false", false},
		{"string", "llama ▁ünïcode"},
		{"empty string", ""},
		{"uint64", uint64(math.MaxUint64)},
		{"int64", int64(math.MinInt64)},
		{"float64", math.Pi},
		{"[]uint8", []uint8{0, 1, 255}},
		{"[]int8", []int8{-128, 0, 127}},
		{"[]uint16", []uint16{0, 65535}},
		{"[]int16", []int16{-32768, 32767}},
		{"[]uint32", []uint32{1, 2, 3}},
		{"[]int32", []int32{-1, 0, 1}},
		{"[]float32", []float32{0.5, -2, float32(math.Inf(1))}},
		{"[]bool", []bool{true, false, true}},
		{"[]string", []string{"<s>", "", "▁the"}},
		{"[]uint64", []uint64{math.MaxUint64, 0}},
		{"[]int64", []int64{math.MinInt64, math.MaxInt64}},
		{"[]float64", []float64{1e300, -1e-300}},
		{"empty []int32", []int32{}},
		{"empty []string", []string{}},
		{"[]any", []any{[]uint8{7, 8}, []bool{true}, []string{"a"}, []any{}}},
		{"empty []any", []any{}},
		{"nested 3 deep", []any{[]any{[]float32{1}, []int64{-5}}, []any{}}},
		{"nested 8 deep", []any{[]any{[]any{[]any{[]any{[]any{[]any{[]uint8{1}}}}}}}}},
	}
	var kvs []KV
	for _, tc := range tests {
		kvs = append(kvs, NewKV("test."+tc.name, tc.value))
	}
	// With and without tensors: a file without tensors has no data section.
	for _, tensors := range [][]WriteTensor{nil, {{Name: "w", Dims: []uint64{4}, Type: quant.F32, Data: make([]byte, 16)}}} {
		f, _ := writeParse(t, kvs, tensors)
		if f.Version != 3 {
			t.Errorf("version %d, want 3", f.Version)
		}
		if !reflect.DeepEqual(f.KVs, kvs) {
			t.Errorf("metadata changed in the round trip")
		}
		for _, tc := range tests {
			got, ok := f.Get("test." + tc.name)
			if !ok || !reflect.DeepEqual(got, tc.value) {
				t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.value)
			}
		}
		if len(f.Tensors) != len(tensors) {
			t.Errorf("%d tensors, want %d", len(f.Tensors), len(tensors))
		}
	}
}

// randomTensor returns a tensor of the given shape and type with random
// bytes.
func randomTensor(r *rand.Rand, name string, typ quant.Type, dims ...uint64) WriteTensor {
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	data := make([]byte, n/uint64(typ.BlockSize())*uint64(typ.TypeSize()))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	return WriteTensor{Name: name, Dims: dims, Type: typ, Data: data}
}

func TestWriteTensors(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tensors := []WriteTensor{
		randomTensor(r, "f32", quant.F32, 3, 5),
		randomTensor(r, "f16", quant.F16, 7),
		randomTensor(r, "bf16", quant.BF16, 2, 3, 4),
		randomTensor(r, "q8_0", quant.Q8_0, 64, 3),
		randomTensor(r, "q4_0", quant.Q4_0, 32, 1, 2, 2),
		randomTensor(r, "q4_k", quant.Q4_K, 256, 2),
		randomTensor(r, "q6_k", quant.Q6_K, 512),
		randomTensor(r, "i32", quant.I32, 1),
	}
	tests := []struct {
		name  string
		align KV
		want  uint64
	}{
		{"default", KV{}, DefaultAlignment},
		{"uint32 64", NewKV("general.alignment", uint32(64)), 64},
		{"uint64 1", NewKV("general.alignment", uint64(1)), 1},
		{"int32 4096", NewKV("general.alignment", int32(4096)), 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kvs := []KV{NewKV("general.architecture", "test")}
			if tc.align.Key != "" {
				kvs = append(kvs, tc.align)
			}
			f, b := writeParse(t, kvs, tensors)
			if f.Alignment != tc.want || f.DataOffset%tc.want != 0 {
				t.Errorf("alignment %d, data at %d; want alignment %d", f.Alignment, f.DataOffset, tc.want)
			}
			if uint64(len(b))%tc.want != 0 {
				t.Errorf("file length %d is not a multiple of the alignment %d", len(b), tc.want)
			}
			if len(f.Tensors) != len(tensors) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(tensors))
			}
			for i, w := range tensors {
				g := &f.Tensors[i]
				if g.Name != w.Name || g.Type != w.Type || !reflect.DeepEqual(g.Dims, w.Dims) {
					t.Errorf("tensor %d is %s %s %v, want %s %s %v", i, g.Name, g.Type, g.Dims, w.Name, w.Type, w.Dims)
				}
				if g.Offset%tc.want != 0 {
					t.Errorf("%s at offset %d, not aligned to %d", g.Name, g.Offset, tc.want)
				}
				if !bytes.Equal(f.TensorData(g), w.Data) {
					t.Errorf("%s: data changed in the round trip", w.Name)
				}
			}
			l, err := Plan(kvs, f.Tensors)
			if err != nil {
				t.Fatal(err)
			}
			if l.Size != uint64(len(b)) || !bytes.Equal(l.Header, b[:f.DataOffset]) || !reflect.DeepEqual(l.Tensors, f.Tensors) {
				t.Errorf("Plan's layout (size %d, header %d bytes) differs from the written file (size %d, data at %d)", l.Size, len(l.Header), len(b), f.DataOffset)
			}
		})
	}
}

// TestWriteShared rewrites a real model and checks that nothing changes: the
// same metadata, the same tensors and, since llama.cpp lays out files the
// same way, the same bytes.
func TestWriteShared(t *testing.T) {
	for _, rel := range []string{"models/stories260K.gguf", "models/parity/parity-Q4_K_M.gguf", "models/llama-2-tiny-random.gguf"} {
		t.Run(rel, func(t *testing.T) {
			src, err := Open(testshared.Path(t, rel))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			f, b := writeParse(t, src.KVs, src.WriteTensors())
			if !reflect.DeepEqual(f.KVs, src.KVs) {
				t.Errorf("metadata changed")
			}
			if !reflect.DeepEqual(f.Tensors, src.Tensors) {
				t.Errorf("tensor infos changed")
			}
			for i := range f.Tensors {
				if !bytes.Equal(f.TensorData(&f.Tensors[i]), src.TensorData(&src.Tensors[i])) {
					t.Errorf("tensor %s: data changed", f.Tensors[i].Name)
				}
			}
			if !bytes.Equal(b, src.data) {
				t.Errorf("the rewritten file (%d bytes) differs from the original (%d bytes)", len(b), len(src.data))
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	arch := NewKV("general.architecture", "llama")
	ok := WriteTensor{Name: "w", Dims: []uint64{32}, Type: quant.Q8_0, Data: make([]byte, 34)}
	deep := any([]uint8{1})
	for range 8 {
		deep = []any{deep}
	}
	tests := []struct {
		name    string
		kvs     []KV
		tensors []WriteTensor
		want    string
	}{
		{"Go int value", []KV{NewKV("n", 5)}, nil, `"n": a value of Go type int has no GGUF value type`},
		{"nil value", []KV{NewKV("n", nil)}, nil, `"n": a value of Go type <nil>`},
		{"unknown value type", []KV{{Key: "n", Type: 13, Value: uint8(1)}}, nil, "unknown value type 13"},
		{"type mismatch", []KV{{Key: "n", Type: TypeUint32, Value: int32(1)}}, nil, "value type is uint32 but the value is a Go int32"},
		{"array type on scalar", []KV{{Key: "n", Type: TypeArray, Value: "x"}}, nil, "value type is array"},
		{"Go []int", []KV{{Key: "n", Type: TypeArray, Value: []int{1}}}, nil, "Go type []int cannot be stored as array"},
		{"scalar in []any", []KV{NewKV("n", []any{[]uint8{1}, uint8(2)})}, nil, "element 1 of an array of arrays is a Go uint8"},
		{"too deep", []KV{NewKV("n", deep)}, nil, "nested more than 8 deep"},
		{"duplicate key", []KV{arch, arch}, nil, `duplicate metadata key "general.architecture"`},
		{"alignment 3", []KV{NewKV("general.alignment", uint32(3))}, nil, "general.alignment: 3 (uint32) is not a power of two"},
		{"alignment 0", []KV{NewKV("general.alignment", uint64(0))}, nil, "not a power of two"},
		{"alignment 2 MiB", []KV{NewKV("general.alignment", uint32(2<<20))}, nil, "not a power of two up to 1 MiB"},
		{"alignment negative", []KV{NewKV("general.alignment", int32(-32))}, nil, "not a power of two"},
		{"alignment string", []KV{NewKV("general.alignment", "32")}, nil, "not a power of two"},
		{"short data", nil, []WriteTensor{{Name: "w", Dims: []uint64{32}, Type: quant.Q8_0, Data: make([]byte, 33)}}, `tensor "w": 33 bytes of data, but 32 Q8_0 elements of shape [32] take 34`},
		{"long data", nil, []WriteTensor{{Name: "w", Dims: []uint64{2, 2}, Type: quant.F32, Data: make([]byte, 20)}}, "20 bytes of data, but 4 F32 elements"},
		{"partial block", nil, []WriteTensor{{Name: "w", Dims: []uint64{16, 2}, Type: quant.Q4_0, Data: make([]byte, 18)}}, "row length 16 is not a multiple of the Q4_0 block size 32"},
		{"unknown type", nil, []WriteTensor{{Name: "w", Dims: []uint64{1}, Type: 99, Data: make([]byte, 4)}}, `tensor "w" has unknown type type(99)`},
		{"no dims", nil, []WriteTensor{{Name: "w", Type: quant.F32}}, "0 dimensions (want 1 to 4)"},
		{"5 dims", nil, []WriteTensor{{Name: "w", Dims: []uint64{1, 1, 1, 1, 1}, Type: quant.F32, Data: make([]byte, 4)}}, "5 dimensions"},
		{"zero dim", nil, []WriteTensor{{Name: "w", Dims: []uint64{4, 0}, Type: quant.F32}}, "dimension 1 is 0"},
		{"huge shape", nil, []WriteTensor{{Name: "w", Dims: []uint64{1 << 32, 1 << 32, 2}, Type: quant.F32}}, "more than 2^64 elements"},
		{"huge data", nil, []WriteTensor{{Name: "w", Dims: []uint64{1 << 31, 1 << 30}, Type: quant.F32}}, "exceed 2^62 bytes"},
		{"duplicate tensor", nil, []WriteTensor{ok, ok}, `duplicate tensor name "w"`},
		{"empty name", nil, []WriteTensor{{Dims: []uint64{32}, Type: quant.Q8_0, Data: make([]byte, 34)}}, "empty name"},
		{"long name", nil, []WriteTensor{{Name: strings.Repeat("x", 64), Dims: []uint64{1}, Type: quant.F32, Data: make([]byte, 4)}}, "is 64 bytes long; ggml allows at most 63"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tc.kvs, tc.tensors)
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Errorf("%d bytes written before the error", buf.Len())
			}
		})
	}
}

// failWriter accepts n bytes, then fails.
type failWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

func TestWriteWriterError(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tensors := []WriteTensor{randomTensor(r, "big", quant.F32, 1<<16), randomTensor(r, "small", quant.F16, 8)}
	for _, n := range []int{0, 100, 1 << 16, 1 << 18} {
		if err := Write(&failWriter{n: n}, []KV{NewKV("a", "b")}, tensors); !errors.Is(err, errDiskFull) {
			t.Errorf("after %d bytes: error %v, want %v", n, err, errDiskFull)
		}
	}
}

func TestValueTypeOf(t *testing.T) {
	tests := []struct {
		v    any
		want ValueType
		ok   bool
	}{
		{uint8(1), TypeUint8, true},
		{float64(1), TypeFloat64, true},
		{"s", TypeString, true},
		{[]string{}, TypeArray, true},
		{[]any{}, TypeArray, true},
		{1, invalidType, false},
		{[]int{}, invalidType, false},
		{nil, invalidType, false},
	}
	for _, tc := range tests {
		got, ok := ValueTypeOf(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ValueTypeOf(%#v) = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// Write a file with metadata and one tensor, then read it back.
func ExampleWrite() {
	kvs := []KV{
		NewKV("general.architecture", "llama"),
		NewKV("llama.block_count", uint32(2)),
		NewKV("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>"}),
	}
	data := make([]byte, 2*4*4) // a 2×4 F32 matrix of zeros
	tensors := []WriteTensor{{Name: "w", Dims: []uint64{4, 2}, Type: quant.F32, Data: data}}
	var buf bytes.Buffer
	if err := Write(&buf, kvs, tensors); err != nil {
		fmt.Println(err)
		return
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		fmt.Println(err)
		return
	}
	n, _ := f.Uint("llama.block_count")
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	w, _ := f.Tensor("w")
	fmt.Println(buf.Len(), n, tokens, w.Dims, w.Type, f.DataOffset, w.Offset)
	// Output: 256 2 [<unk> <s> </s>] [4 2] F32 224 0
}

// rewrite writes what f holds (its metadata and tensors) with Write.
func rewrite(f *File) ([]byte, error) {
	var buf bytes.Buffer
	err := Write(&buf, f.KVs, f.WriteTensors())
	return buf.Bytes(), err
}

// FuzzWriteParsed checks that whatever the reader accepts, the writer writes
// back (unless a tensor name breaks ggml's rules), that the result parses to
// the same metadata and tensors, and that writing it again gives the same
// bytes.
func FuzzWriteParsed(f *testing.F) {
	f.Add(validFile())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		b, err := rewrite(g)
		if err != nil {
			if strings.Contains(err.Error(), "empty name") || strings.Contains(err.Error(), "ggml allows at most") {
				return
			}
			t.Fatalf("the reader accepts the file, the writer does not: %v", err)
		}
		h, err := Parse(b)
		if err != nil {
			t.Fatalf("the rewritten file does not parse: %v", err)
		}
		if len(h.KVs) != len(g.KVs) || len(h.Tensors) != len(g.Tensors) {
			t.Fatalf("%d pairs and %d tensors, want %d and %d", len(h.KVs), len(h.Tensors), len(g.KVs), len(g.Tensors))
		}
		// %#v tells values, types, -0 and NaN apart (NaN != NaN for DeepEqual).
		if a, b := fmt.Sprintf("%#v", g.KVs), fmt.Sprintf("%#v", h.KVs); a != b {
			t.Fatalf("metadata changed:\n%s\nnow\n%s", a, b)
		}
		for i := range h.Tensors {
			a, b := &g.Tensors[i], &h.Tensors[i]
			if a.Name != b.Name || a.Type != b.Type || !reflect.DeepEqual(a.Dims, b.Dims) || !bytes.Equal(g.TensorData(a), h.TensorData(b)) {
				t.Fatalf("tensor %d changed: %s %s %v, now %s %s %v", i, a.Name, a.Type, a.Dims, b.Name, b.Type, b.Dims)
			}
		}
		again, err := rewrite(h)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("writing the rewritten file again gives different bytes (error %v)", err)
		}
	})
}
