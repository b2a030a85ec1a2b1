package tokenizer

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvscope/engine/gguf"
)

// hostileVocab builds a byte-level BPE vocabulary of about size bytes made
// to be expensive: a token of size/2 spaces (a code point outside GPT-2's
// byte alphabet, so each one renders as [UNK_BYTE_0x20]), control tokens
// that are prefixes of one another, and merges that double a run of "a"
// into tokens up to 4096 long.
func hostileVocab(size int) *Vocab {
	v := bpeVocab("default", nil, nil, nil)
	v.Tokens = append(v.Tokens, strings.Repeat(" ", size/2))
	v.Types = append(v.Types, TypeNormal)
	for w := 1; w < 4096 && w*4 < size/4; w *= 2 {
		a := strings.Repeat("a", w)
		v.Merges = append(v.Merges, a+" "+a)
		v.Tokens = append(v.Tokens, a+a)
		v.Types = append(v.Types, TypeNormal)
	}
	used := len(v.Tokens[len(v.Tokens)-1]) * 2
	for i := 0; used < size/2; i++ {
		s := fmt.Sprintf("<|%s%d|>", strings.Repeat("x", i%8), i)
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, TypeControl)
		used += len(s)
	}
	v.EOS = len(v.Tokens) - 1
	return v
}

// Building a tokenizer takes time linear in the vocabulary's size.
func TestHostileVocabularyLoadLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	checkLinear(t, 8*scalingN, func(n int) func() {
		v := hostileVocab(n)
		return func() {
			if _, err := New(v); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Encode and Decode with a hostile vocabulary take time linear in their
// input.
func TestHostileEncodeDecodeLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	tok := mustNew(t, hostileVocab(62<<10))
	long, _ := tok.ID(strings.Repeat(" ", 31<<10))
	for _, tc := range []struct {
		name  string
		parse bool
		text  func(n int) string
	}{
		{"run of a", false, func(n int) string { return strings.Repeat("a", n) }},
		{"spaces", false, func(n int) string { return strings.Repeat(" ", n) }},
		{"control tokens as text", false, func(n int) string { return strings.Repeat("<|x1|>", n/6) }},
		{"control tokens parsed", true, func(n int) string { return strings.Repeat("<|x1|>a<|xx2|>", n/14) }},
		{"mixed", true, func(n int) string { return strings.Repeat("aaaa <|3|>\n\xff1234 aaa", n/22) }},
	} {
		t.Run("encode "+tc.name, func(t *testing.T) {
			checkLinear(t, scalingN, func(n int) func() {
				text := tc.text(n)
				return func() { tok.Encode(text, true, tc.parse) }
			})
		})
	}
	// SPM: pieces that double runs of ▁ and of "a" up to 4096 long, so that
	// merges look up ever longer texts.
	var spmPieces []string
	var spmScores []float32
	for w := 1; w <= 4096; w *= 2 {
		spmPieces = append(spmPieces, strings.Repeat("▁", w), strings.Repeat("a", w))
		spmScores = append(spmScores, float32(w), float32(w))
	}
	spm := mustNew(t, spmVocab(spmPieces, spmScores))
	for _, tc := range []struct {
		name string
		text func(n int) string
	}{
		{"spaces", func(n int) string { return strings.Repeat(" ", n) }},
		{"run of a", func(n int) string { return strings.Repeat("a", n) }},
		{"unknown characters", func(n int) string { return strings.Repeat("é\xff", n/3) }},
	} {
		t.Run("spm encode "+tc.name, func(t *testing.T) {
			checkLinear(t, scalingN, func(n int) func() {
				text := tc.text(n)
				return func() { spm.Encode(text, true, false) }
			})
		})
	}
	t.Run("decode", func(t *testing.T) {
		checkLinear(t, scalingN/64, func(n int) func() {
			ids := make([]int, n)
			for i := range ids {
				ids[i] = []int{long, 'a', int(tok.byteTokens[' ']), tok.EOS()}[i%4]
			}
			return func() {
				d := tok.NewDecoder()
				for _, id := range ids {
					d.Add(id)
				}
				tok.Decode(ids)
			}
		})
	})
}

// The reported case: a 62 KB byte-level vocabulary whose pieces rendered
// in time and memory quadratic in a token's length (2.6 GB, 20 s). Loaded
// from a GGUF file, it now costs a small multiple of the file's size.
func TestHostileVocabularyBounded(t *testing.T) {
	v := hostileVocab(62 << 10)
	data := writeGGUF(t, []ggufKV{
		{"tokenizer.ggml.model", v.Model},
		{"tokenizer.ggml.pre", v.Pre},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.token_type", v.Types},
		{"tokenizer.ggml.merges", v.Merges},
		{"tokenizer.ggml.eos_token_id", uint32(v.EOS)},
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	long, _ := tok.ID(strings.Repeat(" ", 31<<10))
	text := tok.Decode([]int{long, long})
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if want := strings.Repeat("[UNK_BYTE_0x20]", 62<<10); text != want {
		t.Errorf("the long token decodes to %d bytes, want %d", len(text), len(want))
	}
	// Rendering writes up to 15 bytes per byte of a token; the decoded
	// text is 30 times the long token; maps and slices add a few times more.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte file: %d bytes allocated, %v", len(data), alloc, elapsed)
	if limit := 64 * uint64(len(data)); alloc > limit {
		t.Errorf("loading a %d-byte vocabulary and decoding allocated %d bytes, more than 64 times its size (%d)", len(data), alloc, limit)
	}
	if elapsed > 2*time.Second {
		t.Errorf("loading a %d-byte vocabulary and decoding took %v", len(data), elapsed)
	}
}
