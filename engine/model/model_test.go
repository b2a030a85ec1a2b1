package model

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
	"kvscope/internal/testshared"
)

// load opens a shared model, skipping the test when the data is missing.
func load(t testing.TB, rel string) *Model {
	t.Helper()
	m, err := Load(testshared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if testBackend != nil {
		if err := m.Use(testBackend); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// testBackend, when set, is the backend load moves models onto: the tests
// that run on every backend set it for their run (see TestNativeBackend).
var testBackend backend.Backend

// seq is one sequence with a contiguous block table, for tests.
type seq struct {
	kv     *kvstore.Store
	blocks []int
}

func newSeq(t testing.TB, m *Model, blockSize, maxTokens int, p kvstore.Precision) *seq {
	t.Helper()
	n := (maxTokens + blockSize - 1) / blockSize
	kv, err := kvstore.New(m.CacheConfig(blockSize, n, p, p))
	if err != nil {
		t.Fatal(err)
	}
	s := &seq{kv: kv}
	for i := range n {
		s.blocks = append(s.blocks, i)
	}
	return s
}

// forward runs tokens at positions start.. and returns every row's logits.
func (s *seq) forward(t testing.TB, m *Model, tokens []int, start int) [][]float32 {
	t.Helper()
	var b Batch
	for i, tok := range tokens {
		b.Add(tok, start+i, s.blocks, true)
	}
	logits, err := m.Forward(s.kv, &b)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

func perplexity(logits [][]float32, ids []int) float64 {
	var nll float64
	for i := 1; i < len(ids); i++ {
		lp := sample.LogSoftmax(nil, logits[i-1])
		nll -= float64(lp[ids[i]])
	}
	return math.Exp(nll / float64(len(ids)-1))
}

func TestStoriesGreedy(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	for _, c := range testshared.Greedy(t, testshared.Path(t, "reference/stories260K-greedy.txt")) {
		t.Run(c.Prompt, func(t *testing.T) {
			s := newSeq(t, m, 16, 256, kvstore.F16)
			logits := s.forward(t, m, c.PromptIDs, 0)
			next := sample.Greedy(logits[len(logits)-1])
			var got []int
			for pos := len(c.PromptIDs); len(got) < len(c.OutputIDs); pos++ {
				got = append(got, next)
				next = sample.Greedy(s.forward(t, m, []int{next}, pos)[0])
			}
			for i := range got {
				if got[i] != c.OutputIDs[i] {
					t.Fatalf("token %d: got %d, want %d\ngot  %v\nwant %v", i, got[i], c.OutputIDs[i], got, c.OutputIDs)
				}
			}
		})
	}
}

func TestStoriesTeacherForced(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))
	want := testshared.Logits(t, testshared.Path(t, "reference/stories260K-textA.logits.f32"), m.Vocab)
	s := newSeq(t, m, 16, len(ids), kvstore.F16)
	got := s.forward(t, m, ids, 0)
	rms, kl, err := testshared.Compare(got, want)
	if err != nil {
		t.Fatal(err)
	}
	ppl := perplexity(got, ids)
	t.Logf("textA: RMS %.3g of std, KL %.3g, perplexity %.4f", rms, kl, ppl)
	if rms > 1e-3 {
		t.Errorf("RMS difference %.3g of the reference's std, want ≤ 1e-3", rms)
	}
	if math.Abs(ppl-3.6615) > 0.001 {
		t.Errorf("perplexity %.4f, want 3.6615 ± 0.001", ppl)
	}
}

func TestParity(t *testing.T) {
	dir := filepath.Join(testshared.Dir(), "models", "parity")
	ids := testshared.IDs(t, testshared.Path(t, "models/parity/parity.ids"))
	gpt2 := testshared.IDs(t, testshared.Path(t, "models/parity/parity-gpt2.ids"))
	for _, typ := range []string{"f32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "qwen2-Q8_0"} {
		t.Run(typ, func(t *testing.T) {
			m := load(t, "models/parity/parity-"+typ+".gguf")
			in := ids
			if strings.HasPrefix(typ, "qwen2") {
				in = gpt2
			}
			want := testshared.Logits(t, filepath.Join(dir, "parity-"+typ+".logits.f32"), m.Vocab)
			s := newSeq(t, m, 16, len(in), kvstore.F16)
			rms, kl, err := testshared.Compare(s.forward(t, m, in, 0), want)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("parity-%-10s RMS %6.3f%% of std, mean KL %.2e", typ, 100*rms, kl)
			if rms > 0.03 {
				t.Errorf("RMS difference %.3g%% of std, want ≤ 3%%", 100*rms)
			}
			if kl > 1e-4 {
				t.Errorf("mean KL %.3g, want ≤ 1e-4", kl)
			}
		})
	}
}

// TestBatchInvariance checks that a row's logits are bit-identical whether
// its sequence runs alone or batched with another sequence.
func TestBatchInvariance(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	a := []int{1, 403, 407, 261, 378, 432, 383}
	b := []int{1, 274, 287, 269, 345}
	alone := newSeq(t, m, 4, 16, kvstore.F32).forward(t, m, a, 0)

	kv, err := kvstore.New(m.CacheConfig(4, 8, kvstore.F32, kvstore.F32))
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := []int{5, 2, 7, 0}, []int{1, 3, 6, 4} // scattered blocks
	var batch Batch
	for i := range max(len(a), len(b)) {
		if i < len(b) {
			batch.Add(b[i], i, tb, true)
		}
		if i < len(a) {
			batch.Add(a[i], i, ta, true)
		}
	}
	logits, err := m.Forward(kv, &batch)
	if err != nil {
		t.Fatal(err)
	}
	j := 0
	for i := range batch.Len() {
		if batch.Blocks[i][0] != ta[0] {
			continue
		}
		pos := batch.Pos[i]
		for v := range logits[i] {
			if logits[i][v] != alone[pos][v] {
				t.Fatalf("position %d: batched logit %d = %v, alone %v", pos, v, logits[i][v], alone[pos][v])
			}
		}
		j++
	}
	if j != len(a) {
		t.Fatalf("checked %d rows, want %d", j, len(a))
	}
}

func TestForwardErrors(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	kv, err := kvstore.New(m.CacheConfig(4, 2, kvstore.F16, kvstore.F16))
	if err != nil {
		t.Fatal(err)
	}
	other, err := kvstore.New(kvstore.Config{Layers: 1, KVHeads: 4, HeadDim: 8, BlockSize: 4, Blocks: 2, K: kvstore.F16, V: kvstore.F16})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kv   *kvstore.Store
		b    Batch
		want string
	}{
		{"empty", kv, Batch{}, "empty batch"},
		{"bad token", kv, Batch{Tokens: []int{9999}, Pos: []int{0}, Blocks: [][]int{{0}}, Logits: []bool{true}}, "outside the vocabulary"},
		{"no block", kv, Batch{Tokens: []int{1}, Pos: []int{8}, Blocks: [][]int{{0, 1}}, Logits: []bool{true}}, "has no block"},
		{"block outside store", kv, Batch{Tokens: []int{1}, Pos: []int{0}, Blocks: [][]int{{7}}, Logits: []bool{true}}, "outside the store"},
		{"ragged", kv, Batch{Tokens: []int{1}, Pos: []int{0, 1}}, "different lengths"},
		{"wrong store shape", other, Batch{Tokens: []int{1}, Pos: []int{0}, Blocks: [][]int{{0}}, Logits: []bool{true}}, "the model needs"},
		{"no cache", nil, Batch{Tokens: []int{1}, Pos: []int{0}, Blocks: [][]int{{0}}, Logits: []bool{true}}, "needs a K/V cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kv backend.Cache
			if tc.kv != nil {
				kv = tc.kv
			}
			_, err := m.Forward(kv, &tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// ropeAt rotates the heads of x for position pos with the Go backend.
func ropeAt(t *testing.T, m *Model, x []float32, pos int) {
	t.Helper()
	be := backend.Go()
	b, err := be.NewBuffer(len(x))
	if err != nil {
		t.Fatal(err)
	}
	be.Write(b, 0, x)
	r := m.rope()
	be.RoPE(b, len(x)/m.HeadDim, []int32{int32(pos)}, &r)
	if err := be.Read(x, b, 0); err != nil {
		t.Fatal(err)
	}
}

// TestShiftKeys checks that re-positioning cached keys by -s equals writing
// them at position p-s in the first place.
func TestShiftKeys(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	kvDim := m.KVHeads * m.HeadDim
	kv, err := kvstore.New(m.CacheConfig(4, 8, kvstore.F32, kvstore.F32))
	if err != nil {
		t.Fatal(err)
	}
	blocks := []int{3, 1, 7, 0, 5}
	raw := make([][]float32, 20)
	for p := range raw {
		raw[p] = make([]float32, kvDim)
		for i := range raw[p] {
			raw[p][i] = float32((p*31+i*7)%17)/8 - 1
		}
		k := append([]float32(nil), raw[p]...)
		ropeAt(t, m, k, p)
		for l := range m.Layers {
			kv.Write(l, blocks[p/4], p%4, k, raw[p])
		}
	}
	const shift = 8
	m.ShiftKeys(kv, blocks, 10, 20, -shift)
	got := make([]float32, m.KVHeads*4*m.HeadDim)
	for p := 10; p < 20; p++ {
		want := append([]float32(nil), raw[p]...)
		ropeAt(t, m, want, p-shift)
		kv.ReadK(m.Layers-1, blocks[p/4], 4, got)
		for h := range m.KVHeads {
			for d := range m.HeadDim {
				g, w := got[(h*4+p%4)*m.HeadDim+d], want[h*m.HeadDim+d]
				if math.Abs(float64(g-w)) > 1e-5 {
					t.Fatalf("position %d head %d dim %d: %v, want %v", p, h, d, g, w)
				}
			}
		}
	}
	// Keys before the range are untouched.
	kv.ReadK(0, blocks[0], 4, got)
	k0 := append([]float32(nil), raw[1]...)
	ropeAt(t, m, k0, 1)
	if got[1*m.HeadDim] != k0[0] {
		t.Errorf("key at position 1 changed: %v, want %v", got[1*m.HeadDim], k0[0])
	}
}

// TestForwardReusesBuffers: once a batch size has run, Forward allocates
// only the logits it returns (their values and the slice of rows), however
// many layers and rows, for a prefill chunk and for a batch of decodes.
func TestForwardReusesBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops objects at random)")
	}
	m := load(t, "models/stories260K.gguf")
	kv, err := kvstore.New(m.CacheConfig(4, 16, kvstore.F16, kvstore.F16))
	if err != nil {
		t.Fatal(err)
	}
	tables := [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}}
	prefill, decode := Batch{}, Batch{}
	for i := range 12 {
		prefill.Add(1+i, i, tables[0], i == 11)
	}
	for s, table := range tables {
		decode.Add(5+s, 12, table, true)
	}
	for _, tc := range []struct {
		name string
		b    *Batch
	}{{"prefill of 12 rows", &prefill}, {"3 decodes", &decode}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Forward(kv, tc.b); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(10, func() {
				if _, err := m.Forward(kv, tc.b); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%v allocations", allocs)
			if allocs > 2 {
				t.Errorf("a second Forward allocates %v times, want at most 2 (the logits)", allocs)
			}
		})
	}
}

// TestUse: moving the model to another backend (here a second Go backend)
// rebinds its weights and keeps its logits, on a cache made by NewCache.
func TestUse(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	ids := []int{1, 403, 407, 261, 378}
	run := func() [][]float32 {
		kv, err := m.NewCache(m.CacheConfig(4, 4, kvstore.F16, kvstore.F16))
		if err != nil {
			t.Fatal(err)
		}
		var b Batch
		for i, id := range ids {
			b.Add(id, i, []int{0, 1, 2, 3}, true)
		}
		logits, err := m.Forward(kv, &b)
		if err != nil {
			t.Fatal(err)
		}
		return logits
	}
	before := run()
	if err := m.Use(backend.Go()); err != nil {
		t.Fatal(err)
	}
	if got := m.Backend().Name(); got != "go" {
		t.Errorf("backend %q, want go", got)
	}
	after := run()
	for i := range before {
		for v := range before[i] {
			if before[i][v] != after[i][v] {
				t.Fatalf("row %d logit %d: %v before Use, %v after", i, v, before[i][v], after[i][v])
			}
		}
	}
}
