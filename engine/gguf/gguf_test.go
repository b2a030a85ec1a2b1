package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/engine/quant"
	"kvscope/internal/testshared"
)

// builder writes GGUF files for tests, field by field, so that tests can make
// both valid files and every kind of broken one.
type builder struct{ bytes.Buffer }

func (b *builder) u32(v uint32) *builder { binary.Write(b, binary.LittleEndian, v); return b }
func (b *builder) u64(v uint64) *builder { binary.Write(b, binary.LittleEndian, v); return b }
func (b *builder) str(s string) *builder { b.u64(uint64(len(s))); b.WriteString(s); return b }
func (b *builder) pad(align int) *builder {
	for b.Len()%align != 0 {
		b.WriteByte(0)
	}
	return b
}

// header writes the magic, version and counts.
func header(nTensors, nKV uint64) *builder {
	b := &builder{}
	b.WriteString(Magic)
	b.u32(3).u64(nTensors).u64(nKV)
	return b
}

// validFile returns a small, valid GGUF file with metadata of many types and
// two tensors.
func validFile() []byte {
	b := header(2, 6)
	b.str("general.architecture").u32(uint32(TypeString)).str("llama")
	b.str("llama.block_count").u32(uint32(TypeUint32)).u32(5)
	b.str("llama.rope.freq_base").u32(uint32(TypeFloat32)).u32(math.Float32bits(10000))
	b.str("tokenizer.ggml.tokens").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(3).str("<s>").str("a").str("b")
	b.str("tokenizer.ggml.token_type").u32(uint32(TypeArray)).u32(uint32(TypeInt32)).u64(3).u32(3).u32(1).u32(1)
	b.str("nested").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(2).
		u32(uint32(TypeUint8)).u64(2)
	b.WriteByte(7)
	b.WriteByte(8)
	b.u32(uint32(TypeBool)).u64(1)
	b.WriteByte(1)
	// Tensors: a 4x2 f32 matrix and a 32-element Q8_0 row.
	b.str("w").u32(2).u64(4).u64(2).u32(uint32(quant.F32)).u64(0)
	b.str("q").u32(1).u64(32).u32(uint32(quant.Q8_0)).u64(64)
	b.pad(DefaultAlignment)
	for i := range 8 {
		b.u32(math.Float32bits(float32(i)))
	}
	b.Write(make([]byte, 32)) // padding to offset 64
	b.Write(make([]byte, 34)) // the Q8_0 block
	return b.Bytes()
}

func TestParseValid(t *testing.T) {
	f, err := Parse(validFile())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || len(f.KVs) != 6 || len(f.Tensors) != 2 {
		t.Fatalf("version %d, %d kvs, %d tensors", f.Version, len(f.KVs), len(f.Tensors))
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("architecture %q", s)
	}
	if n, _ := f.Uint("llama.block_count"); n != 5 {
		t.Errorf("block_count %d", n)
	}
	if v, _ := f.Float("llama.rope.freq_base"); v != 10000 {
		t.Errorf("freq_base %v", v)
	}
	if toks, _ := f.Strings("tokenizer.ggml.tokens"); strings.Join(toks, ",") != "<s>,a,b" {
		t.Errorf("tokens %v", toks)
	}
	if tt, _ := f.Int32s("tokenizer.ggml.token_type"); len(tt) != 3 || tt[0] != 3 {
		t.Errorf("token types %v", tt)
	}
	nested, _ := f.Get("nested")
	arr, ok := nested.([]any)
	if !ok || len(arr) != 2 || !bytes.Equal(arr[0].([]uint8), []byte{7, 8}) || arr[1].([]bool)[0] != true {
		t.Errorf("nested %#v", nested)
	}
	w, ok := f.Tensor("w")
	if !ok || w.Elements() != 8 || w.Size != 32 {
		t.Fatalf("tensor w %+v", w)
	}
	d := f.TensorData(w)
	if got := math.Float32frombits(binary.LittleEndian.Uint32(d[4*7:])); got != 7 {
		t.Errorf("w[7] = %v", got)
	}
	q, _ := f.Tensor("q")
	if q.Size != 34 || len(f.TensorData(q)) != 34 {
		t.Errorf("q size %d", q.Size)
	}
}

func TestParseBroken(t *testing.T) {
	valid := validFile()
	tests := []struct {
		name string
		data []byte
		want string // a part of the error message
	}{
		{"empty", nil, "not a GGUF file"},
		{"wrong magic", []byte("GGML\x03\x00\x00\x00"), "not a GGUF file"},
		{"truncated header", valid[:10], "truncated"},
		{"version 1", append([]byte(Magic), 1, 0, 0, 0), "version 1"},
		{"version 9", append([]byte(Magic), 9, 0, 0, 0), "unsupported GGUF version 9"},
		{"huge tensor count", header(1<<62, 0).Bytes(), "count 4611686018427387904 is impossible"},
		{"huge metadata count", header(0, 1<<40).Bytes(), "is impossible"},
		{"string past end", func() []byte {
			b := header(0, 1)
			b.u64(1 << 30).WriteString("abcdefghijklmnop")
			return b.Bytes()
		}(), "runs past the end"},
		{"unknown value type", func() []byte {
			b := header(0, 1)
			b.str("k").u32(99).u64(0)
			return b.Bytes()
		}(), "unknown metadata value type 99"},
		{"unknown array type", func() []byte {
			b := header(0, 1)
			b.str("k").u32(uint32(TypeArray)).u32(77).u64(0)
			return b.Bytes()
		}(), "unknown array element type 77"},
		{"huge array", func() []byte {
			b := header(0, 1)
			b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 50)
			return b.Bytes()
		}(), "is impossible"},
		{"deep nesting", func() []byte {
			b := header(0, 1)
			b.str("k").u32(uint32(TypeArray))
			for range 20 {
				b.u32(uint32(TypeArray)).u64(1)
			}
			return b.Bytes()
		}(), "nested more than"},
		{"bad bool", func() []byte {
			b := header(0, 1)
			b.str("k").u32(uint32(TypeBool)).WriteByte(5)
			return b.Bytes()
		}(), "neither 0 nor 1"},
		{"duplicate key", func() []byte {
			b := header(0, 2)
			b.str("k").u32(uint32(TypeUint8)).WriteByte(1)
			b.str("k").u32(uint32(TypeUint8)).WriteByte(1)
			return b.Bytes()
		}(), "duplicate metadata key"},
		{"unknown tensor type", func() []byte {
			b := header(1, 0)
			b.str("t").u32(1).u64(4).u32(1000).u64(0).pad(32)
			return b.Bytes()
		}(), "unknown tensor type 1000"},
		{"too many dims", func() []byte {
			b := header(1, 0)
			b.str("t").u32(9)
			b.Write(make([]byte, 64))
			return b.Bytes()
		}(), "9 dimensions"},
		{"zero dim", func() []byte {
			b := header(1, 0)
			b.str("t").u32(1).u64(0).u32(0).u64(0)
			b.Write(make([]byte, 64))
			return b.Bytes()
		}(), "impossible"},
		{"huge shape", func() []byte {
			b := header(1, 0)
			b.str("t").u32(2).u64(1024).u64(1024).u32(0).u64(0)
			b.Write(make([]byte, 64))
			return b.Bytes()
		}(), "need more bytes"},
		{"row not whole blocks", func() []byte {
			b := header(1, 0)
			b.str("t").u32(1).u64(33).u32(uint32(quant.Q8_0)).u64(0)
			b.Write(make([]byte, 128))
			return b.Bytes()
		}(), "not a multiple"},
		{"offset outside data", func() []byte {
			b := header(1, 0)
			b.str("t").u32(1).u64(4).u32(0).u64(1 << 20).pad(32)
			b.Write(make([]byte, 16))
			return b.Bytes()
		}(), "outside the"},
		{"misaligned offset", func() []byte {
			b := header(1, 0)
			b.str("t").u32(1).u64(4).u32(0).u64(4).pad(32)
			b.Write(make([]byte, 64))
			return b.Bytes()
		}(), "not aligned"},
		{"bad alignment", func() []byte {
			b := header(0, 1)
			b.str("general.alignment").u32(uint32(TypeUint32)).u32(3)
			return b.Bytes()
		}(), "not a power of two"},
		{"truncated tensor data", valid[:len(valid)-1], "outside the"},
		{"tensors sharing bytes", func() []byte {
			b := header(2, 0)
			b.str("a").u32(1).u64(8).u32(uint32(quant.F32)).u64(0)
			b.str("b").u32(1).u64(8).u32(uint32(quant.F32)).u64(0)
			b.pad(DefaultAlignment)
			b.Write(make([]byte, 32))
			return b.Bytes()
		}(), "overlaps tensor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			if err == nil {
				t.Fatal("no error")
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FormatError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestEveryTruncation cuts a valid file at every length: each must fail
// cleanly.
func TestEveryTruncation(t *testing.T) {
	valid := validFile()
	for n := range len(valid) {
		if _, err := Parse(valid[:n]); err == nil {
			t.Fatalf("file cut to %d of %d bytes parsed without error", n, len(valid))
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, validFile()[:40], 0o644)
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("truncated file error should name the file: %v", err)
	}
}

func TestSharedModels(t *testing.T) {
	for _, tc := range []struct {
		file    string
		arch    string
		tensors int
		layers  uint64
	}{
		{"models/stories260K.gguf", "llama", 48, 5},
		{"models/llama-2-tiny-random.gguf", "llama", 0, 1},
		{"models/parity/parity-Q4_K_M.gguf", "llama", 0, 4},
		{"models/parity/parity-qwen2-Q8_0.gguf", "qwen2", 0, 2},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			f, err := Open(testshared.Path(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			arch, _ := f.String("general.architecture")
			if arch != tc.arch {
				t.Errorf("architecture %q, want %q", arch, tc.arch)
			}
			if n, _ := f.Uint(arch + ".block_count"); n != tc.layers {
				t.Errorf("block_count %d, want %d", n, tc.layers)
			}
			if tc.tensors > 0 && len(f.Tensors) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(f.Tensors), tc.tensors)
			}
			var total uint64
			for i := range f.Tensors {
				total += uint64(len(f.TensorData(&f.Tensors[i])))
			}
			t.Logf("%d tensors, %d bytes of tensor data, %d metadata keys", len(f.Tensors), total, len(f.KVs))
		})
	}
}
