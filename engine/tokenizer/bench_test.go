package tokenizer

import (
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

var benchText = strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park; naïve café — 1234567!\n", 90) // about 10 KB

func benchmarkEncode(b *testing.B, rel string) {
	tok := loadShared(b, rel)
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		tok.Encode(benchText, true, false)
	}
}

func BenchmarkEncodeLlamaSPM(b *testing.B) {
	benchmarkEncode(b, "models/llama-2-tiny-random.gguf")
}
func BenchmarkEncodeGPT2(b *testing.B) {
	benchmarkEncode(b, "testdata/tokenizer/ggml-vocab-gpt-2.gguf")
}
func BenchmarkEncodeQwen2Pre(b *testing.B) {
	benchmarkEncode(b, "testdata/tokenizer/gpt2-vocab-pre-qwen2.gguf")
}

func BenchmarkDecode(b *testing.B) {
	tok := loadShared(b, "testdata/tokenizer/ggml-vocab-gpt-2.gguf")
	ids := tok.Encode(benchText, false, false)
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		tok.Decode(ids)
	}
}

// Building the GPT-2 tokenizer (50,257 tokens, 50,000 merges) from an open file.
func BenchmarkFromGGUFGPT2(b *testing.B) {
	f, err := gguf.Open(testshared.Path(b, "testdata/tokenizer/ggml-vocab-gpt-2.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for b.Loop() {
		if _, err := FromGGUF(f); err != nil {
			b.Fatal(err)
		}
	}
}
