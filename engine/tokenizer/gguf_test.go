package tokenizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"kvscope/engine/gguf"
)

// *gguf.File is what FromGGUF is given in kvscope.
var _ Metadata = (*gguf.File)(nil)

// ggufKV is one metadata pair for writeGGUF: value is a string, bool,
// uint32, int32, float32, []string, []float32 or []int32.
type ggufKV struct {
	key   string
	value any
}

// writeGGUF writes a GGUF v3 file with no tensors and the given metadata.
func writeGGUF(t *testing.T, kvs []ggufKV) []byte {
	t.Helper()
	var b bytes.Buffer
	le := binary.LittleEndian
	str := func(s string) {
		b.Write(le.AppendUint64(nil, uint64(len(s))))
		b.WriteString(s)
	}
	u32 := func(x uint32) { b.Write(le.AppendUint32(nil, x)) }
	b.WriteString("GGUF")
	u32(3)
	b.Write(le.AppendUint64(nil, 0))
	b.Write(le.AppendUint64(nil, uint64(len(kvs))))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.value.(type) {
		case string:
			u32(8)
			str(v)
		case bool:
			u32(7)
			if v {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		case uint32:
			u32(4)
			u32(v)
		case int32:
			u32(5)
			u32(uint32(v))
		case []string:
			u32(9)
			u32(8)
			b.Write(le.AppendUint64(nil, uint64(len(v))))
			for _, s := range v {
				str(s)
			}
		case []float32:
			u32(9)
			u32(6)
			b.Write(le.AppendUint64(nil, uint64(len(v))))
			for _, x := range v {
				u32(math.Float32bits(x))
			}
		case []int32:
			u32(9)
			u32(5)
			b.Write(le.AppendUint64(nil, uint64(len(v))))
			for _, x := range v {
				u32(uint32(x))
			}
		default:
			t.Fatalf("writeGGUF: unsupported value %T", v)
		}
	}
	return b.Bytes()
}

// spmMetadata is a small SPM vocabulary as GGUF metadata.
func spmMetadata() []ggufKV {
	v := spmVocab([]string{"▁", "a", "▁a"}, []float32{-2, -2, -1})
	return []ggufKV{
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.scores", v.Scores},
		{"tokenizer.ggml.token_type", v.Types},
	}
}

func parseGGUF(t *testing.T, kvs []ggufKV) *gguf.File {
	t.Helper()
	f, err := gguf.Parse(writeGGUF(t, kvs))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFromGGUFDefaults(t *testing.T) {
	tests := []struct {
		name     string
		extra    []ggufKV
		wantIDs  string // Encode("a", true, false)
		bos, eos int
	}{
		{"llama defaults: BOS 1, add BOS", nil, "[1 261]", 1, 2},
		{"add_bos_token false", []ggufKV{{"tokenizer.ggml.add_bos_token", false}}, "[261]", 1, 2},
		{"add_eos_token true", []ggufKV{{"tokenizer.ggml.add_eos_token", true}}, "[1 261 2]", 1, 2},
		{"add_space_prefix false", []ggufKV{{"tokenizer.ggml.add_space_prefix", false}}, "[1 260]", 1, 2},
		{"ids from metadata", []ggufKV{{"tokenizer.ggml.bos_token_id", uint32(2)}, {"tokenizer.ggml.eos_token_id", uint32(1)}}, "[2 261]", 2, 1},
		{"id outside the vocabulary is ignored", []ggufKV{{"tokenizer.ggml.bos_token_id", uint32(4294967295)}}, "[1 261]", 1, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := FromGGUF(parseGGUF(t, append(spmMetadata(), tc.extra...)))
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(tok.Encode("a", true, false)); got != tc.wantIDs {
				t.Errorf("Encode(a) = %s, want %s", got, tc.wantIDs)
			}
			if tok.BOS() != tc.bos || tok.EOS() != tc.eos {
				t.Errorf("BOS, EOS = %d, %d, want %d, %d", tok.BOS(), tok.EOS(), tc.bos, tc.eos)
			}
		})
	}
}

func TestFromGGUFErrors(t *testing.T) {
	without := func(key string) []ggufKV {
		var out []ggufKV
		for _, kv := range spmMetadata() {
			if kv.key != key {
				out = append(out, kv)
			}
		}
		return out
	}
	replace := func(key string, value any) []ggufKV {
		return append(without(key), ggufKV{key, value})
	}
	tests := []struct {
		name string
		kvs  []ggufKV
		want string
	}{
		{"no model", without("tokenizer.ggml.model"), "no tokenizer.ggml.model"},
		{"no tokens", without("tokenizer.ggml.tokens"), "no tokenizer.ggml.tokens"},
		{"tokens of the wrong type", replace("tokenizer.ggml.tokens", []int32{1, 2}), "tokenizer.ggml.tokens is []int32"},
		{"scores of the wrong type", replace("tokenizer.ggml.scores", "high"), "tokenizer.ggml.scores is string"},
		{"too few types", replace("tokenizer.ggml.token_type", []int32{1}), "1 token types for 262 tokens"},
		{"unsupported model", replace("tokenizer.ggml.model", "t5"), `"t5"`},
		{"BPE without merges", replace("tokenizer.ggml.model", "gpt2"), "no tokenizer.ggml.merges"},
		{"add_bos_token not a bool", append(spmMetadata(), ggufKV{"tokenizer.ggml.add_bos_token", uint32(1)}), "add_bos_token is uint32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromGGUF(parseGGUF(t, tc.kvs))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromGGUF: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The full 32,000-token Llama 2 vocabulary and the GPT-2 vocabulary build
// and encode quickly.
func TestLargeVocabularies(t *testing.T) {
	for _, rel := range []string{"models/llama-2-tiny-random.gguf", "testdata/tokenizer/ggml-vocab-gpt-2.gguf"} {
		tok := loadShared(t, rel)
		text := strings.Repeat("The quick brown fox jumps over the lazy dog; naïve café, 1234567 — ok?\n", 200)
		ids := tok.Encode(text, true, false)
		if len(ids) < 1000 {
			t.Errorf("%s: only %d tokens for %d bytes", rel, len(ids), len(text))
		}
		if got := tok.Decode(ids); got != text {
			t.Errorf("%s: round trip differs", rel)
		}
	}
}
