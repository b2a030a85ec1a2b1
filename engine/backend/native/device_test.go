package native

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// hostDevice returns the device backend over the CPU library, skipping when
// the library is not built; with KVSCOPE_BACKEND=cuda (native/cuda/check.sh
// on a machine with a GPU) the CUDA library instead, and under
// TestEmulatedCUDA the CUDA library emulated on the CPU.
func hostDevice(t *testing.T) *Device {
	t.Helper()
	if onEmulated {
		return emulated(t)
	}
	if k := os.Getenv(BackendEnv); k == "cuda" || k == "metal" {
		d, err := OpenDevice(k)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := NewHostDevice(loadLib(t))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// toDevice copies vals into a new buffer of be.
func toDevice(t *testing.T, be backend.Backend, vals []float32) backend.Buffer {
	t.Helper()
	b, err := be.NewBuffer(len(vals))
	if err != nil {
		t.Fatal(err)
	}
	be.Write(b, 0, vals)
	return b
}

// download reads n values of b.
func download(t *testing.T, be backend.Backend, b backend.Buffer, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := be.Read(out, b, 0); err != nil {
		t.Fatal(err)
	}
	return out
}

// relRMS returns the RMS of got-want relative to want's RMS.
func relRMS(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / math.Max(w, 1e-30))
}

// TestDeviceOps runs each operation on the device backend (over the CPU
// library) and on the Go backend with the same inputs. Bounds: quantized
// products within 5% RMS of Go's float products (activations rounded to 8
// bits, as TestMatMulParity measures: 2-8%), float products and the
// element-wise steps within 1e-5 (summation order and libm), K/V reads
// equal to the Go store's bits, attention within 1e-4.
func TestDeviceOps(t *testing.T) {
	d := hostDevice(t)
	g := backend.Go()
	r := rand.New(rand.NewPCG(9, 9))

	t.Run("MatMul", func(t *testing.T) {
		for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.Q5_K} {
			rows, cols := 37, 512
			w, _ := randWeights(t, r, typ, rows, cols)
			bias := randVec(r, rows)
			for _, n := range []int{1, 3, 9} {
				x := randVec(r, n*cols)
				var outs [2][]float32
				for i, be := range []backend.Backend{d, g} {
					h, err := be.Weight(typ, rows, cols, w, bias)
					if err != nil {
						t.Fatal(err)
					}
					xb, ob := toDevice(t, be, x), toDevice(t, be, make([]float32, n*rows))
					be.MatMul(ob, h, xb, n)
					outs[i] = download(t, be, ob, n*rows)
				}
				bound := 1e-5
				if typ != quant.F32 && typ != quant.F16 {
					bound = 0.05
				}
				if e := relRMS(outs[0], outs[1]); e > bound {
					t.Errorf("%s, %d vectors: RMS difference %.3g of the Go product's, want ≤ %g", typ, n, e, bound)
				}
			}
		}
	})

	t.Run("Elementwise", func(t *testing.T) {
		const n, heads, hd = 5, 4, 16
		x, y, wt := randVec(r, n*heads*hd), randVec(r, n*heads*hd), randVec(r, hd)
		pos := []int32{0, 3, 7, 100, 4095}
		freqs := make([]float32, 6)
		for i := range freqs {
			freqs[i] = 1 + float32(i)/3
		}
		for _, tc := range []struct {
			name string
			f    func(be backend.Backend, a, b, w backend.Buffer)
		}{
			{"rmsnorm", func(be backend.Backend, a, b, w backend.Buffer) { be.RMSNorm(a, b, w, n*heads, hd, 1e-5) }},
			{"rope", func(be backend.Backend, a, _, _ backend.Buffer) {
				be.RoPE(a, heads, pos, &backend.Rope{HeadDim: hd, Dims: 12, Base: 10000, Scale: 2, NeoX: true, Freqs: freqs})
			}},
			{"swiglu", func(be backend.Backend, a, b, _ backend.Buffer) { be.SwiGLU(a, b, n*heads*hd-3) }},
			{"geglu", func(be backend.Backend, a, b, _ backend.Buffer) { be.GeGLU(a, b, n*heads*hd-3) }},
			{"add", func(be backend.Backend, a, b, _ backend.Buffer) { be.Add(a, b, 17) }},
			{"scale", func(be backend.Backend, a, _, _ backend.Buffer) { be.Scale(a, 33, -0.37) }},
			{"gather", func(be backend.Backend, a, b, _ backend.Buffer) { be.Gather(a, b, []int32{19, 0, 3, 3}, hd) }},
		} {
			var outs [2][]float32
			for i, be := range []backend.Backend{d, g} {
				a, b, w := toDevice(t, be, x), toDevice(t, be, y), toDevice(t, be, wt)
				tc.f(be, a, b, w)
				outs[i] = download(t, be, a, len(x))
			}
			if e := relRMS(outs[0], outs[1]); e > 1e-5 {
				t.Errorf("%s: RMS difference %.3g, want ≤ 1e-5", tc.name, e)
			}
		}
	})

	t.Run("Embed", func(t *testing.T) {
		w, _ := randWeights(t, r, quant.Q4_K, 10, 256)
		tokens := []int32{9, 0, 4, 4}
		var outs [2][]float32
		for i, be := range []backend.Backend{d, g} {
			h, err := be.Weight(quant.Q4_K, 10, 256, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := toDevice(t, be, make([]float32, 4*256))
			be.Embed(o, h, tokens)
			outs[i] = download(t, be, o, 4*256)
		}
		if i := sameBits(outs[0], outs[1]); i >= 0 && (d.host() || relRMS(outs[0], outs[1]) > 1e-6) {
			t.Errorf("embedding value %d: %v, Go %v", i, outs[0][i], outs[1][i])
		}
	})

	t.Run("KV", func(t *testing.T) {
		for _, pc := range [][2]kvstore.Precision{{kvstore.F16, kvstore.F16}, {kvstore.Q8_0, kvstore.Q8_0}, {kvstore.F16, kvstore.Int8},
			{kvstore.Q8_0, kvstore.Int4}, {kvstore.F32, kvstore.BF16}, {kvstore.FP8, kvstore.FP8},
			{kvstore.Int8, kvstore.Int8}, {kvstore.Int8, kvstore.Int4}, {kvstore.Int4, kvstore.Int4}, {kvstore.Int4, kvstore.F16}} {
			cfg := kvstore.Config{Layers: 2, KVHeads: 2, HeadDim: 24, BlockSize: 5, Blocks: 6, K: pc[0], V: pc[1], ValueGroup: 20}
			const heads, seqLen = 6, 23
			row := cfg.KVHeads * cfg.HeadDim
			k, v, q := randVec(r, seqLen*row), randVec(r, seqLen*row), randVec(r, seqLen*heads*cfg.HeadDim)
			table := []int32{4, 1, 5, 0, 2}
			slots, pos := make([]int32, seqLen), make([]int32, seqLen)
			for p := range seqLen {
				slots[p], pos[p] = table[p/cfg.BlockSize]*int32(cfg.BlockSize)+int32(p%cfg.BlockSize), int32(p)
			}
			rows := &backend.Rows{Pos: pos, Seqs: []int32{0, seqLen}, TableStart: []int32{0, int32(len(table))}, Tables: table}
			var reads, atts, windowed [2][]float32
			for i, be := range []backend.Backend{d, g} {
				c, err := be.NewCache(cfg)
				if err != nil && be == d && !d.host() && strings.Contains(err.Error(), "refused") {
					t.Logf("%v: %v", pc, err) // the GPU library stores f16, q8_0, int8 and int4
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				kb, vb, qb := toDevice(t, be, k), toDevice(t, be, v), toDevice(t, be, q)
				be.WriteKV(c, 1, kb, vb, slots)
				c.Copy(3, 0) // block 0 holds positions 15..19: copy it and read the copy
				cs := append([]int32(nil), slots...)
				for p := 15; p < 20; p++ {
					cs[p] = 3*int32(cfg.BlockSize) + int32(p%cfg.BlockSize)
				}
				rk, rv := toDevice(t, be, make([]float32, len(k))), toDevice(t, be, make([]float32, len(v)))
				be.ReadKV(rk, rv, c, 1, cs)
				reads[i] = append(download(t, be, rk, len(k)), download(t, be, rv, len(v))...)
				ob := toDevice(t, be, make([]float32, len(q)))
				be.Attention(ob, c, 1, qb, heads, rows)
				atts[i] = download(t, be, ob, len(q))
				rows.Window = 7
				be.Attention(ob, c, 1, qb, heads, rows)
				rows.Window = 0
				windowed[i] = download(t, be, ob, len(q))
			}
			if reads[1] == nil {
				continue
			}
			if i := sameBits(reads[0], reads[1]); i >= 0 {
				t.Errorf("%v: read value %d: %v, the Go store's %v", pc, i, reads[0][i], reads[1][i])
			}
			if e := relRMS(atts[0], atts[1]); e > 1e-4 {
				t.Errorf("%v: attention differs by %.3g RMS", pc, e)
			}
			if e := relRMS(windowed[0], windowed[1]); e > 1e-4 {
				t.Errorf("%v: windowed attention differs by %.3g RMS", pc, e)
			}
		}
	})
}

// TestDeviceErrors: bad arguments give errors at the next Read or Sync
// (never a panic, never a call into the library with bad pointers), and
// refused precisions say why.
func TestDeviceErrors(t *testing.T) {
	d := hostDevice(t)
	cfg := kvstore.Config{Layers: 1, KVHeads: 1, HeadDim: 8, BlockSize: 4, Blocks: 2, K: kvstore.F16, V: kvstore.F16}
	c, err := d.NewCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := d.NewBuffer(4)
	big, _ := d.NewBuffer(64)
	goBuf, _ := backend.Go().NewBuffer(64)
	goCache, _ := backend.Go().NewCache(cfg)
	w, err := d.Weight(quant.F32, 8, 8, make([]byte, 8*8*4), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"foreign buffer", "not one of this backend's", func() { d.Add(goBuf, big, 4) }},
		{"short buffer", "a buffer of 4 values used for 64", func() { d.MatMul(small, w, big, 8) }},
		{"token", "outside the 8 rows", func() { d.Embed(big, w, []int32{8}) }},
		{"gather", "outside a buffer", func() { d.Gather(big, small, []int32{1}, 4) }},
		{"slot", "outside the 2 blocks", func() { d.WriteKV(c, 0, big, big, []int32{8}) }},
		{"layer", "layer 1 of 1", func() { d.ReadKV(big, big, c, 1, []int32{0}) }},
		{"foreign cache", "not one made by this backend's NewCache", func() { d.WriteKV(goCache, 0, big, big, []int32{0}) }},
		{"copy", "outside the pool's 2", func() { c.Copy(2, 0) }},
		{"table", "block table holds 1 blocks", func() {
			d.Attention(big, c, 0, big, 1, &backend.Rows{Pos: []int32{4}, Seqs: []int32{0, 1}, TableStart: []int32{0, 1}, Tables: []int32{0}})
		}},
		{"heads", "query heads", func() {
			d.Attention(big, c, 0, big, 0, &backend.Rows{Pos: []int32{0}, Seqs: []int32{0, 1}, TableStart: []int32{0, 1}, Tables: []int32{0}})
		}},
	} {
		tc.f()
		err := d.Sync()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if err := d.Sync(); err != nil {
		t.Errorf("Sync after the errors were taken: %v", err)
	}
	if err := c.Load(0, []byte("KVB1 not ours")); err == nil {
		t.Error("a block saved by another store loaded")
	}
	saved := c.Save(1, nil)
	if err := c.Load(0, saved); err != nil {
		t.Errorf("loading a saved block: %v", err)
	}
	if _, err := d.Weight(quant.Q4_0, 3, 33, make([]byte, 100), nil); err == nil {
		t.Error("a Q4_0 weight of 33 columns was taken")
	}
}

// TestDeviceAttentionInvariance: a row's attention output has the same bits
// alone (the decode path) and among the 40 rows of a prompt chunk plus a
// decode row of another sequence (on CUDA: the prefill kernel, tiles of
// rows sharing their K/V reads), across partition boundaries (contexts over
// 256 positions: partial results and their reduction), with and without a
// sliding window, and bounded against the Go backend; for q8_0 and int4
// values.
func TestDeviceAttentionInvariance(t *testing.T) {
	// q8_0 values, and int4 values, which are weighted rotated (the
	// output rotated back once on CUDA)
	for _, vp := range []kvstore.Precision{kvstore.Q8_0, kvstore.Int4} {
		t.Run(vp.String(), func(t *testing.T) { attentionInvariance(t, vp) })
	}
}

func attentionInvariance(t *testing.T, vp kvstore.Precision) {
	d := hostDevice(t)
	r := rand.New(rand.NewPCG(4, 4))
	cfg := kvstore.Config{Layers: 1, KVHeads: 2, HeadDim: 64, BlockSize: 16, Blocks: 48, K: kvstore.F16, V: vp}
	const heads = 8
	row, qd := cfg.KVHeads*cfg.HeadDim, heads*cfg.HeadDim
	c, err := d.NewCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gc, _ := backend.Go().NewCache(cfg)
	// Sequence A: positions 0..579 in blocks 0..36 (scattered); B: 0..19 in 40, 41.
	tabA := make([]int32, 37)
	for i := range tabA {
		tabA[i] = int32((i * 7) % 37)
	}
	tabB := []int32{40, 41}
	var slots []int32
	for p := range 580 {
		slots = append(slots, tabA[p/16]*16+int32(p%16))
	}
	for p := range 20 {
		slots = append(slots, tabB[p/16]*16+int32(p%16))
	}
	k, v := randVec(r, len(slots)*row), randVec(r, len(slots)*row)
	for _, be := range []backend.Backend{d, backend.Go()} {
		cc := c
		if be != backend.Backend(d) {
			cc = gc
		}
		be.WriteKV(cc, 0, toDevice(t, be, k), toDevice(t, be, v), slots)
	}
	// The batch: 40 prompt rows of A (positions 540..579), then B's row 19.
	var pos []int32
	for p := 540; p < 580; p++ {
		pos = append(pos, int32(p))
	}
	pos = append(pos, 19)
	rows := &backend.Rows{Pos: pos, Seqs: []int32{0, 40, 41}, TableStart: []int32{0, 37, 39}, Tables: append(append([]int32(nil), tabA...), tabB...)}
	q := randVec(r, len(pos)*qd)
	for _, window := range []int32{0, 300} {
		rows.Window = window
		qb, ob := toDevice(t, d, q), toDevice(t, d, make([]float32, len(q)))
		d.Attention(ob, c, 0, qb, heads, rows)
		batch := download(t, d, ob, len(q))
		g := backend.Go()
		gq, gob := toDevice(t, g, q), toDevice(t, g, make([]float32, len(q)))
		g.Attention(gob, gc, 0, gq, heads, rows)
		if e := relRMS(batch, download(t, g, gob, len(q))); e > 1e-4 {
			t.Errorf("window %d: the batch differs from the Go backend's by %.3g RMS", window, e)
		}
		for i := range pos {
			s := 0
			if i == 40 {
				s = 1
			}
			alone := &backend.Rows{Pos: []int32{pos[i]}, Seqs: []int32{0, 1}, TableStart: []int32{0, rows.TableStart[s+1] - rows.TableStart[s]},
				Tables: rows.Tables[rows.TableStart[s]:rows.TableStart[s+1]], Window: window}
			qa, oa := toDevice(t, d, q[i*qd:(i+1)*qd]), toDevice(t, d, make([]float32, qd))
			d.Attention(oa, c, 0, qa, heads, alone)
			got := download(t, d, oa, qd)
			if j := sameBits(got, batch[i*qd:(i+1)*qd]); j >= 0 {
				t.Fatalf("window %d, row %d (position %d): value %d alone %v, in the batch %v", window, i, pos[i], j, got[j], batch[i*qd+j])
			}
		}
	}
}
