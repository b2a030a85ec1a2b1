package synth_test

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvscope/engine/gguf"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// small is a quick shape for tests that need a whole model.
var small = synth.Shape{Name: "small", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFDim: 128, Vocab: 600, Context: 256, Type: quant.Q8_0}

// shapes are models of every kind of weight type and head grouping, all
// quick to make and run.
var shapes = []synth.Shape{
	small,
	{Name: "f32", Dim: 48, Layers: 2, Heads: 6, KVHeads: 3, FFDim: 100, Vocab: 300, Context: 64, Type: quant.F32},
	{Name: "f16 minimal vocabulary", Dim: 32, Layers: 1, Heads: 2, KVHeads: 2, FFDim: 64, Vocab: 260, Context: 32, Type: quant.F16},
	{Name: "q4_0", Dim: 64, Layers: 3, Heads: 8, KVHeads: 1, FFDim: 192, Vocab: 1000, Context: 128, Type: quant.Q4_0},
	{Name: "q4_k", Dim: 256, Layers: 1, Heads: 4, KVHeads: 2, FFDim: 512, Vocab: 400, Context: 64, Type: quant.Q4_K},
	synth.Demo,
}

// forward runs tokens from position 0 through m and returns every row's
// logits.
func forward(t *testing.T, m *model.Model, tokens []int) [][]float32 {
	t.Helper()
	const blockSize = 16
	n := (len(tokens) + blockSize - 1) / blockSize
	kv, err := kvstore.New(m.CacheConfig(blockSize, n, kvstore.F32, kvstore.F32))
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int, n)
	for i := range blocks {
		blocks[i] = i
	}
	var b model.Batch
	for i, tok := range tokens {
		b.Add(tok, i, blocks, true)
	}
	logits, err := m.Forward(kv, &b)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

func meanStd(x []float32) (mean, std float64) {
	var s, s2 float64
	for _, v := range x {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	mean = s / float64(len(x))
	return mean, math.Sqrt(max(0, s2/float64(len(x))-mean*mean))
}

func TestGenerateLoads(t *testing.T) {
	const text = "Once upon a time, the little cat saw water — ünïcode 日本, 42!"
	for _, s := range shapes {
		t.Run(s.Name, func(t *testing.T) {
			f, err := synth.Open(s, 1)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.New(f)
			if err != nil {
				t.Fatal(err)
			}
			c := m.Config
			if c.Arch != "llama" || c.Dim != s.Dim || c.Layers != s.Layers || c.Heads != s.Heads || c.KVHeads != s.KVHeads ||
				c.HeadDim != s.HeadDim() || c.FFDim != s.FFDim || c.Vocab != s.Vocab || c.Context != s.Context {
				t.Errorf("model config %+v does not match shape %+v", c, s)
			}
			if got := m.Params(); got != s.Params() {
				t.Errorf("model has %d weights, Shape.Params says %d", got, s.Params())
			}
			if name, _ := f.String("general.name"); name != s.Name {
				t.Errorf("general.name %q, want %q", name, s.Name)
			}

			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if tok.Size() != s.Vocab || tok.BOS() != 1 || tok.EOS() != 2 || tok.UNK() != 0 || !tok.AddBOS() {
				t.Errorf("tokenizer: %d tokens, BOS %d, EOS %d, UNK %d, add BOS %v", tok.Size(), tok.BOS(), tok.EOS(), tok.UNK(), tok.AddBOS())
			}
			ids := tok.Encode(text, true, false)
			if got := tok.Decode(ids); got != text {
				t.Errorf("decode(encode(text)) = %q, want %q", got, text)
			}

			logits := forward(t, m, ids[:min(len(ids), 12)])
			for i, row := range logits {
				for j, v := range row {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("row %d: logit %d is %v", i, j, v)
					}
				}
				if _, std := meanStd(row); std < 0.05 {
					t.Errorf("row %d: logits have standard deviation %.3f, want a spread", i, std)
				}
				// Word pieces' logits spread with a standard deviation near 1.
				if pieces := row[259:]; len(pieces) >= 100 {
					if _, std := meanStd(pieces); std < 0.3 || std > 3 {
						t.Errorf("row %d: logits of the pieces have standard deviation %.3f, want about 1", i, std)
					}
				}
			}
			if slicesEqual(logits[0], logits[len(logits)-1]) {
				t.Errorf("the first and last positions have the same logits")
			}
		})
	}
}

func slicesEqual(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestDeterministic(t *testing.T) {
	a, err := synth.Generate(small, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := synth.Generate(small, 7)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different files")
	}
	// The bytes do not depend on how many goroutines fill them.
	prev := runtime.GOMAXPROCS(1)
	one, _ := synth.Generate(small, 7)
	runtime.GOMAXPROCS(prev)
	if !bytes.Equal(a, one) {
		t.Fatal("GOMAXPROCS=1 gave a different file")
	}

	c, _ := synth.Generate(small, 8)
	fa, err := gguf.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := gguf.Parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[:fa.DataOffset], c[:fc.DataOffset]) {
		t.Error("different seeds gave different metadata")
	}
	for i := range fa.Tensors {
		ti := &fa.Tensors[i]
		same := bytes.Equal(fa.TensorData(ti), fc.TensorData(&fc.Tensors[i]))
		isNorm := strings.HasSuffix(ti.Name, "norm.weight")
		if same != isNorm {
			t.Errorf("%s: same bytes for seeds 7 and 8 is %v, want %v", ti.Name, same, isNorm)
		}
	}
}

// dequant returns a tensor's values.
func dequant(t *testing.T, f *gguf.File, name string) []float32 {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	x := make([]float32, ti.Elements())
	if err := quant.Dequantize(ti.Type, f.TensorData(ti), x); err != nil {
		t.Fatal(err)
	}
	return x
}

func TestWeightScale(t *testing.T) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_K, quant.Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			s := synth.Shape{Name: typ.String(), Dim: 256, Layers: 1, Heads: 4, KVHeads: 2, FFDim: 1024, Vocab: 512, Context: 64, Type: typ}
			f, err := synth.Open(s, 3)
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				name string
				std  float64
			}{
				{"token_embd.weight", 1},
				{"blk.0.attn_q.weight", 1 / math.Sqrt(256)},
				{"blk.0.attn_v.weight", 1 / math.Sqrt(256)},
				{"blk.0.ffn_down.weight", 1 / math.Sqrt(1024)},
			}
			for _, tc := range tests {
				mean, std := meanStd(dequant(t, f, tc.name))
				if math.Abs(std/tc.std-1) > 0.05 || math.Abs(mean) > 0.02*tc.std {
					t.Errorf("%s: mean %.4g, standard deviation %.4g; want 0 and %.4g", tc.name, mean, std, tc.std)
				}
			}
			// The output rows of the special and byte tokens are 10 times
			// smaller than the others.
			out := dequant(t, f, "output.weight")
			_, quiet := meanStd(out[:259*256])
			_, loud := meanStd(out[259*256:])
			if r := quiet / loud; r < 0.08 || r > 0.12 {
				t.Errorf("output rows of special and byte tokens are %.3f times the others, want 0.1", r)
			}
			for _, name := range []string{"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"} {
				for i, v := range dequant(t, f, name) {
					if v != 1 {
						t.Fatalf("%s[%d] = %v, want 1", name, i, v)
					}
				}
			}
		})
	}
}

func TestVocabulary(t *testing.T) {
	for _, n := range []int{260, 300, 4096, 32000, 100000} {
		s := synth.Shape{Name: "vocab", Dim: 2, Layers: 1, Heads: 1, KVHeads: 1, FFDim: 2, Vocab: n, Context: 16, Type: quant.F32}
		f, err := synth.Open(s, 1)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.FromGGUF(f) // fails on duplicate tokens
		if err != nil {
			t.Fatalf("vocabulary of %d: %v", n, err)
		}
		if tok.Size() != n {
			t.Fatalf("vocabulary of %d has %d tokens", n, tok.Size())
		}
		for id, want := range []string{"<unk>", "<s>", "</s>", "<0x00>", "<0x01>"} {
			if tok.Token(id) != want {
				t.Errorf("vocabulary of %d: token %d is %q, want %q", n, id, tok.Token(id), want)
			}
		}
		if tok.Token(258) != "<0xFF>" || tok.Type(258) != tokenizer.TypeByte || tok.Type(1) != tokenizer.TypeControl || tok.Type(0) != tokenizer.TypeUnknown {
			t.Errorf("vocabulary of %d: token 258 is %q of type %d", n, tok.Token(258), tok.Type(258))
		}
		for id := 259; id < n; id++ {
			if tok.Type(id) != tokenizer.TypeNormal {
				t.Fatalf("vocabulary of %d: token %d (%q) has type %d", n, id, tok.Token(id), tok.Type(id))
			}
		}
	}
}

func TestTokenizeWords(t *testing.T) {
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		text string
		want []string // the pieces, without BOS
	}{
		{"the water", []string{"▁the", "▁water"}},
		{"The people", []string{"▁The", "▁people"}},
		{"Once upon a time", []string{"▁On", "c", "e", "▁up", "o", "n", "▁a", "▁time"}},
		{"cats", []string{"▁cats"}},
		{"xyzzy", []string{"▁", "x", "y", "z", "z", "y"}},
		{"é!", []string{"▁", "<0xC3>", "<0xA9>", "!"}},
	}
	for _, tc := range tests {
		var got []string
		for _, id := range tok.Encode(tc.text, false, false) {
			got = append(got, tok.Token(id))
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%q: pieces %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestShapeErrors(t *testing.T) {
	tests := []struct {
		change func(*synth.Shape)
		want   string
	}{
		{func(s *synth.Shape) { s.Dim = 0 }, "Dim 0 is outside"},
		{func(s *synth.Shape) { s.Layers = -1 }, "Layers -1 is outside"},
		{func(s *synth.Shape) { s.FFDim = 1 << 21 }, "FFDim 2097152 is outside"},
		{func(s *synth.Shape) { s.Context = 0 }, "Context 0 is outside"},
		{func(s *synth.Shape) { s.Vocab = 259 }, "Vocab 259 is less than 260"},
		{func(s *synth.Shape) { s.Heads = 3 }, "Dim 64 is not divisible by 3 Heads"},
		{func(s *synth.Shape) { s.Heads, s.Dim = 4, 36 }, "head dimension 9 (Dim/Heads) is odd"},
		{func(s *synth.Shape) { s.KVHeads = 3 }, "4 Heads cannot be grouped over 3 KVHeads"},
		{func(s *synth.Shape) { s.Type = quant.Q8_1 }, "weight type Q8_1 cannot be written"},
		{func(s *synth.Shape) { s.Type, s.Dim, s.Heads = quant.Q4_K, 48, 4 }, "must be multiples of the Q5_0 block size 32"}, // Q4_K falls back to Q5_0
		{func(s *synth.Shape) { s.Type, s.FFDim = quant.Q6_K, 200 }, "must be multiples of the Q8_0 block size 32"},
		{func(s *synth.Shape) { s.Medium = true }, "the _M mix is made of Q4_K or Q5_K, not Q8_0"},
		{func(s *synth.Shape) { s.Arch = "gpt2" }, `architecture "gpt2" is not llama or qwen2`},
		{func(s *synth.Shape) { s.Arch = "qwen2" }, "architecture qwen2 needs Biases"},
		{func(s *synth.Shape) { s.Pre, s.Vocab = "qwen2", 512 }, "Vocab 512 is less than 513"},
		{func(s *synth.Shape) { s.RopeBase = -1 }, "must not be negative"},
		{func(s *synth.Shape) { s.FFDim = 100 }, "must be multiples of the Q8_0 block size 32"},
		{func(s *synth.Shape) { s.Dim, s.FFDim, s.Layers, s.Heads = 1<<14, 1<<16, 40, 128 }, "the file would take"},
	}
	for _, tc := range tests {
		s := small
		tc.change(&s)
		for _, err := range []error{s.Validate(), func() error { _, err := synth.Generate(s, 1); return err }()} {
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `shape "small"`) {
				t.Errorf("%+v: error %v, want one naming the shape and containing %q", s, err, tc.want)
			}
		}
	}
	for _, s := range []synth.Shape{synth.Demo, synth.TinyLlama, small, synth.Llama32_1B, synth.Qwen25_05B, synth.Small} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

// TestPresets checks the two named shapes' sizes without building
// TinyLlama (BenchmarkGenerateTinyLlama does).
func TestPresets(t *testing.T) {
	tests := []struct {
		s              synth.Shape
		params         int64
		headDim, kvDim int
	}{
		{synth.TinyLlama, 1_100_048_384, 64, 256},
		{synth.Llama32_1B, 1_235_814_432, 64, 512}, // Meta's count, with the 32 RoPE factors
		{synth.Qwen25_05B, 494_032_768, 64, 128},   // Qwen's count
		{synth.Demo, 5_245_184, 32, 128},
	}
	for _, tc := range tests {
		if got := tc.s.Params(); got != tc.params {
			t.Errorf("%s: %d weights, want %d", tc.s.Name, got, tc.params)
		}
		if tc.s.HeadDim() != tc.headDim || tc.s.KVHeads*tc.s.HeadDim() != tc.kvDim {
			t.Errorf("%s: head dim %d, K/V dim %d", tc.s.Name, tc.s.HeadDim(), tc.s.KVHeads*tc.s.HeadDim())
		}
	}
}

// TestDemoTime checks that the demo model is made in well under a second.
func TestDemoTime(t *testing.T) {
	start := time.Now()
	b, err := synth.Generate(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("demo model: %d bytes in %v", len(b), d)
	if d > time.Second {
		t.Errorf("making the demo model took %v, want under 1 s", d)
	}
}

// TestPooledModel makes a model large enough for pooled blocks (see
// Generate) and checks that it loads, runs and has the right scale.
func TestPooledModel(t *testing.T) {
	s := synth.Shape{Name: "pooled", Dim: 1024, Layers: 4, Heads: 8, KVHeads: 4, FFDim: 2816, Vocab: 20000, Context: 256, Type: quant.Q4_K}
	start := time.Now()
	f, err := synth.Open(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0fM weights in %s made in %v", float64(s.Params())/1e6, s.Type, time.Since(start))
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, std := meanStd(dequant(t, f, "blk.3.ffn_down.weight")); math.Abs(std*math.Sqrt(2816)-1) > 0.05 {
		t.Errorf("ffn_down has standard deviation %.4g, want %.4g", std, 1/math.Sqrt(2816))
	}
	logits := forward(t, m, []int{1, 500})
	if _, std := meanStd(logits[1][259:]); std < 0.3 || std > 3 {
		t.Errorf("logits of the pieces have standard deviation %.3f, want about 1", std)
	}
}

// TestArchitectures makes small models of each architecture feature the
// presets use (qwen2 biases, byte-level BPE vocabularies, tied output,
// Llama 3 RoPE factors, the _M mix) and checks what model and tokenizer
// read from them.
func TestArchitectures(t *testing.T) {
	base := synth.Shape{Name: "arch", Dim: 256, Layers: 8, Heads: 4, KVHeads: 2, FFDim: 512, Vocab: 1500, Context: 256, Type: quant.Q8_0}
	tests := []struct {
		name   string
		change func(*synth.Shape)
		arch   string
		vocab  string // tokenizer model, and pre-tokenizer for BPE
		tied   bool
		freqs  bool
		biases bool
		types  map[string]quant.Type // some tensors' types
	}{
		{"llama spm", func(*synth.Shape) {}, "llama", "llama", false, false, false,
			map[string]quant.Type{"output.weight": quant.Q8_0, "blk.0.ffn_down.weight": quant.Q8_0}},
		{"llama 3", func(s *synth.Shape) { s.Pre, s.Tied, s.RopeBase, s.Llama3Rope = "llama-bpe", true, 500000, 32 }, "llama", "gpt2 llama-bpe", true, true, false,
			map[string]quant.Type{"token_embd.weight": quant.Q8_0}},
		{"qwen2", func(s *synth.Shape) {
			s.Arch, s.Pre, s.Biases, s.Tied, s.RopeBase, s.NormEps = "qwen2", "qwen2", true, true, 1e6, 1e-6
		}, "qwen2", "gpt2 qwen2", true, false, true, nil},
		{"Q4_K_M", func(s *synth.Shape) { s.Type, s.Medium = quant.Q4_K, true }, "llama", "llama", false, false, false,
			// use_more_bits over 8 layers: 0, 3, 6, 7.
			map[string]quant.Type{"output.weight": quant.Q6_K, "token_embd.weight": quant.Q4_K, "blk.0.attn_v.weight": quant.Q6_K,
				"blk.1.attn_v.weight": quant.Q4_K, "blk.3.ffn_down.weight": quant.Q6_K, "blk.6.ffn_down.weight": quant.Q6_K,
				"blk.5.ffn_down.weight": quant.Q4_K, "blk.7.attn_v.weight": quant.Q6_K, "blk.7.attn_q.weight": quant.Q4_K}},
		{"Q4_K_M tied, rows of 320", func(s *synth.Shape) {
			s.Type, s.Medium, s.Tied, s.Dim, s.Heads, s.KVHeads = quant.Q4_K, true, true, 320, 5, 1
		}, "llama", "llama", true, false, false,
			// rows of 320 fall back: Q6_K to Q8_0, Q4_K to Q5_0; rows of FFDim 512 keep their type.
			map[string]quant.Type{"token_embd.weight": quant.Q8_0, "blk.0.attn_q.weight": quant.Q5_0, "blk.0.ffn_down.weight": quant.Q6_K, "blk.1.ffn_down.weight": quant.Q4_K}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.change(&s)
			f, err := synth.Open(s, 1)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.New(f)
			if err != nil {
				t.Fatal(err)
			}
			c := m.Config
			if c.Arch != tc.arch || c.Dim != s.Dim || c.Layers != s.Layers || c.Vocab != s.Vocab || c.HeadDim != s.HeadDim() {
				t.Errorf("config %+v does not match shape %+v", c, s)
			}
			if s.RopeBase != 0 && c.RopeBase != s.RopeBase || s.NormEps != 0 && c.NormEps != s.NormEps {
				t.Errorf("RoPE base %g, epsilon %g; want %g, %g", c.RopeBase, c.NormEps, s.RopeBase, s.NormEps)
			}
			if got := m.Params(); got != s.Params() {
				t.Errorf("model has %d weights, Shape.Params says %d", got, s.Params())
			}
			_, hasOut := f.Tensor("output.weight")
			_, hasFreqs := f.Tensor("rope_freqs.weight")
			_, hasBias := f.Tensor("blk.0.attn_q.bias")
			if hasOut == tc.tied || hasFreqs != tc.freqs || hasBias != tc.biases {
				t.Errorf("output.weight %v, rope_freqs %v, biases %v; want %v, %v, %v", hasOut, hasFreqs, hasBias, !tc.tied, tc.freqs, tc.biases)
			}
			if tc.freqs {
				fr := dequant(t, f, "rope_freqs.weight")
				if len(fr) != s.HeadDim()/2 || fr[0] != 1 || fr[len(fr)-1] != s.Llama3Rope {
					t.Errorf("rope_freqs %v: want %d factors from 1 to %g", fr, s.HeadDim()/2, s.Llama3Rope)
				}
			}
			for name, want := range tc.types {
				if ti, ok := f.Tensor(name); !ok || ti.Type != want {
					t.Errorf("%s: type %v, want %v", name, ti.Type, want)
				}
			}
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			kind := tok.Model()
			if kind == "gpt2" {
				kind += " " + tok.Pre()
			}
			if kind != tc.vocab || tok.Size() != s.Vocab {
				t.Errorf("vocabulary %q of %d tokens, want %q of %d", kind, tok.Size(), tc.vocab, s.Vocab)
			}
			const text = "the water was there and the people came, 42 ünïcode"
			ids := tok.Encode(text, false, false)
			if got := tok.Decode(ids); got != text {
				t.Errorf("decode(encode(text)) = %q, want %q", got, text)
			}
			words := "the water was there" // SPM adds the first word's space itself
			if tok.Model() == "gpt2" {
				words = " " + words
			}
			if words := tok.Encode(words, false, false); len(words) != 4 {
				t.Errorf("%d tokens for 4 common words, want one each", len(words))
			}
			logits := forward(t, m, ids[:8])
			for i, row := range logits {
				if _, std := meanStd(row); math.IsNaN(std) || std < 0.05 {
					t.Errorf("row %d: logits have standard deviation %.3f", i, std)
				}
			}
		})
	}
}
