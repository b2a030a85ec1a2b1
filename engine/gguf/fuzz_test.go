package gguf_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvscope/engine/gguf"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// Loading a file of S bytes (gguf.Parse, model.New and tokenizer.FromGGUF
// together) may allocate at most allocPerByte×S + allocSlack bytes. The
// largest honest multiples: a Q2_K vector dequantizes to 12 times its
// bytes, and a BPE token of code points outside the byte alphabet renders
// as 15 bytes ([UNK_BYTE_0x20]) per byte; the rest is a few words per item.
const (
	allocPerByte = 32
	allocSlack   = 1 << 20
)

// loaded is what load made of a file.
type loaded struct {
	file     *gguf.File
	model    *model.Model
	tok      *tokenizer.Tokenizer
	parseErr error
	modelErr error
	tokErr   error
	alloc    uint64 // bytes allocated
}

// load parses data and, if it parses, builds a model and a tokenizer from
// it, counting the bytes allocated.
func load(data []byte) loaded {
	var l loaded
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l.file, l.parseErr = gguf.Parse(data)
	if l.parseErr == nil {
		l.model, l.modelErr = model.New(l.file)
		l.tok, l.tokErr = tokenizer.FromGGUF(l.file)
	}
	runtime.ReadMemStats(&after)
	l.alloc = after.TotalAlloc - before.TotalAlloc
	return l
}

// check fails t if loading data broke a promise: an error that is not one
// clear line, tensor data of the wrong size, allocation beyond the bound,
// or, when both a model and a tokenizer were built, a forward pass of one
// token that fails or gives the wrong number of logits. It reports whether
// the forward pass ran.
func check(t *testing.T, data []byte, l loaded) (forward bool) {
	t.Helper()
	for _, err := range []error{l.parseErr, l.modelErr, l.tokErr} {
		if err != nil && (err.Error() == "" || strings.Contains(err.Error(), "\n")) {
			t.Fatalf("error %q is not one line", err)
		}
	}
	if limit := allocPerByte*uint64(len(data)) + allocSlack; l.alloc > limit {
		t.Fatalf("loading a %d-byte file allocated %d bytes, more than %d×size+%d = %d", len(data), l.alloc, allocPerByte, allocSlack, limit)
	}
	if l.parseErr != nil {
		return false
	}
	for i := range l.file.Tensors {
		if d := l.file.TensorData(&l.file.Tensors[i]); uint64(len(d)) != l.file.Tensors[i].Size {
			t.Fatalf("tensor %q: %d bytes, want %d", l.file.Tensors[i].Name, len(d), l.file.Tensors[i].Size)
		}
	}
	if l.model == nil || l.tok == nil {
		return false
	}
	// The forward pass's activations and K/V store are sized by the model,
	// whose weights the file holds, so they are not counted in the bound.
	m := l.model
	kv, err := kvstore.New(m.CacheConfig(1, 1, kvstore.F32, kvstore.F32))
	if err != nil {
		return false // a cache too large for one store is the store's to refuse
	}
	id := 0
	if ids := l.tok.Encode("Hi", true, false); len(ids) > 0 && ids[0] < m.Vocab {
		id = ids[0]
	}
	var b model.Batch
	b.Add(id, 0, []int{0}, true)
	logits, err := m.Forward(kv, &b)
	if err != nil {
		t.Fatalf("forward pass of token %d: %v", id, err)
	}
	if len(logits) != 1 || len(logits[0]) != m.Vocab {
		t.Fatalf("forward pass gave %d rows of logits, want 1 of %d", len(logits), m.Vocab)
	}
	return true
}

// tinyModel is a complete llama small enough to fuzz (about 8 KB): dim 8,
// two layers, 2 heads over 1 KV head, feed-forward 16, and an 8-token SPM
// vocabulary, with f32 weights of small, varied values.
func tinyModel(t testing.TB) []byte {
	kvs := []gguf.KV{
		gguf.NewKV("general.architecture", "llama"),
		gguf.NewKV("llama.embedding_length", uint32(8)),
		gguf.NewKV("llama.block_count", uint32(2)),
		gguf.NewKV("llama.attention.head_count", uint32(2)),
		gguf.NewKV("llama.attention.head_count_kv", uint32(1)),
		gguf.NewKV("llama.feed_forward_length", uint32(16)),
		gguf.NewKV("llama.context_length", uint32(32)),
		gguf.NewKV("tokenizer.ggml.model", "llama"),
		gguf.NewKV("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "▁", "H", "i", "▁H", "Hi"}),
		gguf.NewKV("tokenizer.ggml.scores", []float32{0, 0, 0, -1, -2, -2, -1, -1}),
		gguf.NewKV("tokenizer.ggml.token_type", []int32{2, 3, 3, 1, 1, 1, 1, 1}),
	}
	shapes := []struct {
		name string
		dims []uint64
	}{{"token_embd.weight", []uint64{8, 8}}, {"output_norm.weight", []uint64{8}}}
	for l := range 2 {
		p := fmt.Sprintf("blk.%d.", l)
		shapes = append(shapes, []struct {
			name string
			dims []uint64
		}{
			{p + "attn_norm.weight", []uint64{8}}, {p + "attn_q.weight", []uint64{8, 8}}, {p + "attn_k.weight", []uint64{8, 4}},
			{p + "attn_v.weight", []uint64{8, 4}}, {p + "attn_output.weight", []uint64{8, 8}}, {p + "ffn_norm.weight", []uint64{8}},
			{p + "ffn_gate.weight", []uint64{8, 16}}, {p + "ffn_up.weight", []uint64{8, 16}}, {p + "ffn_down.weight", []uint64{16, 8}},
		}...)
	}
	var tensors []gguf.WriteTensor
	x := uint32(1)
	for _, s := range shapes {
		n := 1
		for _, d := range s.dims {
			n *= int(d)
		}
		data := make([]byte, 0, 4*n)
		for range n {
			x = x*1664525 + 1013904223
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(int32(x>>8)%1000)/4000))
		}
		tensors = append(tensors, gguf.WriteTensor{Name: s.name, Dims: s.dims, Type: quant.F32, Data: data})
	}
	return write(t, kvs, tensors)
}

// hugeBlockCount is the first reported case: a file of a few hundred bytes
// whose block_count asked for 7.3 GiB of layers before any tensor was
// looked up.
func hugeBlockCount(t testing.TB) []byte {
	kvs := []gguf.KV{
		gguf.NewKV("general.architecture", "llama"),
		gguf.NewKV("llama.embedding_length", uint32(8)),
		gguf.NewKV("llama.block_count", uint32(1<<24)),
		gguf.NewKV("llama.attention.head_count", uint32(2)),
		gguf.NewKV("llama.feed_forward_length", uint32(16)),
		gguf.NewKV("llama.context_length", uint32(32)),
	}
	return write(t, kvs, []gguf.WriteTensor{{Name: "token_embd.weight", Dims: []uint64{8, 4}, Type: quant.F32, Data: make([]byte, 8*4*4)}})
}

// hostileVocabulary is the second reported case: a 62 KB byte-level BPE
// vocabulary whose token of 31,744 spaces (outside GPT-2's byte alphabet)
// rendered in time and memory quadratic in its length.
func hostileVocabulary(t testing.TB) []byte {
	tokens := []string{strings.Repeat(" ", 31<<10)}
	for i := range 256 {
		tokens = append(tokens, string(rune(0x100+i)))
	}
	for len(tokens) < 2300 {
		tokens = append(tokens, strings.Repeat("\x01", len(tokens)%9+1)+string(rune(len(tokens))))
	}
	kvs := []gguf.KV{
		gguf.NewKV("tokenizer.ggml.model", "gpt2"),
		gguf.NewKV("tokenizer.ggml.pre", "deepseek-llm"),
		gguf.NewKV("tokenizer.ggml.tokens", tokens),
		gguf.NewKV("tokenizer.ggml.merges", []string{"Ġ Ġ", "ĠĠ ĠĠ"}),
	}
	return write(t, kvs, nil)
}

func write(t testing.TB, kvs []gguf.KV, tensors []gguf.WriteTensor) []byte {
	var b bytes.Buffer
	if err := gguf.Write(&b, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The two reported cases load in bounded time and memory: the huge
// block_count is refused with an error naming it, the hostile vocabulary
// loads.
func TestReportedCases(t *testing.T) {
	tiny := tinyModel(t)
	for _, tc := range []struct {
		name      string
		data      []byte
		modelErr  string // "" for a model that loads
		tokLoads  bool
		maxMillis int64
	}{
		{"tiny model", tiny, "", true, 1000},
		{"huge block_count", hugeBlockCount(t), "block_count is 16777216", false, 100},
		{"hostile vocabulary", hostileVocabulary(t), "general.architecture", true, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			l := load(tc.data)
			elapsed := time.Since(start)
			if l.parseErr != nil {
				t.Fatal(l.parseErr)
			}
			if tc.modelErr == "" && l.modelErr != nil || tc.modelErr != "" && (l.modelErr == nil || !strings.Contains(l.modelErr.Error(), tc.modelErr)) {
				t.Errorf("model: %v, want an error containing %q", l.modelErr, tc.modelErr)
			}
			if (l.tokErr == nil) != tc.tokLoads {
				t.Errorf("tokenizer: %v", l.tokErr)
			}
			if elapsed.Milliseconds() > tc.maxMillis {
				t.Errorf("loading took %v, more than %d ms", elapsed, tc.maxMillis)
			}
			t.Logf("%d bytes: %d bytes allocated (%.1f×) in %v", len(tc.data), l.alloc, float64(l.alloc)/float64(len(tc.data)), elapsed)
			if ran := check(t, tc.data, l); ran != (tc.modelErr == "" && tc.tokLoads) {
				t.Errorf("forward pass ran: %v", ran)
			}
		})
	}
}

// FuzzParse checks that no input makes Parse, model.New or
// tokenizer.FromGGUF panic, hang or allocate more than allocPerByte times
// its size (plus allocSlack), that Parse never accepts a file whose tensor
// data lies outside it, and that when a model and a tokenizer both load,
// one token runs through the model.
func FuzzParse(f *testing.F) {
	f.Add(gguf.ValidFile())
	f.Add(tinyModel(f))
	f.Add(hugeBlockCount(f))
	f.Add(hostileVocabulary(f))
	for _, name := range []string{"models/stories260K.gguf", "testdata/tokenizer/ggml-vocab-gpt-2.gguf"} {
		if b, err := os.ReadFile(filepath.Join(testshared.Dir(), name)); err == nil {
			if len(b) > 1<<20 {
				b = b[:1<<20] // large seeds slow the fuzzer down; their head is what matters
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data, load(data))
	})
}

// The densest files for the allocator stay within the bound FuzzParse
// enforces: many tiny metadata pairs, nested empty arrays, many tiny
// tensors, a vocabulary of empty tokens, and one of unrenderable bytes
// (each about 12 times their size).
func TestLoadAllocationBound(t *testing.T) {
	const n = 20000
	name := func(i int) string { return fmt.Sprintf("%x", i) }
	for _, tc := range []struct {
		name string
		data func() []byte
	}{
		{"tiny metadata pairs", func() []byte {
			var kvs []gguf.KV
			for i := range n {
				kvs = append(kvs, gguf.NewKV(name(i), uint8(i)))
			}
			return write(t, kvs, nil)
		}},
		{"nested empty arrays", func() []byte {
			inner := make([]any, n)
			for i := range inner {
				inner[i] = []uint8{}
			}
			return write(t, []gguf.KV{gguf.NewKV("a", inner)}, nil)
		}},
		{"tiny tensors", func() []byte {
			var ts []gguf.WriteTensor
			for i := range n {
				ts = append(ts, gguf.WriteTensor{Name: name(i), Dims: []uint64{1}, Type: quant.I8, Data: []byte{1}})
			}
			return write(t, []gguf.KV{gguf.NewKV("general.alignment", uint32(1))}, ts)
		}},
		{"empty tokens", func() []byte {
			return write(t, []gguf.KV{
				gguf.NewKV("tokenizer.ggml.model", "gpt2"),
				gguf.NewKV("tokenizer.ggml.tokens", make([]string, n)),
				gguf.NewKV("tokenizer.ggml.token_type", make([]uint8, n)),
				gguf.NewKV("tokenizer.ggml.scores", make([]uint8, n)),
				gguf.NewKV("tokenizer.ggml.merges", make([]string, n)),
			}, nil)
		}},
		{"unrenderable tokens", func() []byte {
			tokens := make([]string, n)
			for i := range tokens {
				tokens[i] = strings.Repeat("\x00", 8) + name(i)
			}
			return write(t, []gguf.KV{gguf.NewKV("tokenizer.ggml.model", "gpt2"), gguf.NewKV("tokenizer.ggml.tokens", tokens), gguf.NewKV("tokenizer.ggml.merges", []string{})}, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data()
			l := load(data)
			t.Logf("%d bytes: %d allocated (%.1f×); errors: %v; %v; %v", len(data), l.alloc, float64(l.alloc)/float64(len(data)), l.parseErr, l.modelErr, l.tokErr)
			check(t, data, l)
		})
	}
}
