package native

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// attnCase is one store shape for the attention tests.
type attnCase struct {
	k, v                 kvstore.Precision
	blockSize            int
	kvHeads, heads, dim  int
	keyGroup, valueGroup int
}

func attnCases() []attnCase {
	var cs []attnCase
	// KV heads, query heads, head dim: 16x64 and 4x128 are TinyLlama's and
	// Llama 3's groups (8 and 4 query heads a KV head), more heads than
	// one pass of the weighted sums holds in registers; 3x64 an odd group,
	// whose last head takes a pass alone; 2x6x96 Phi-3's head dim, three
	// query heads a KV head.
	shapes := [][3]int{{2, 4, 8}, {1, 3, 40}, {2, 2, 64}, {2, 16, 64}, {1, 4, 128}, {1, 3, 64}, {2, 6, 96}}
	i := 0
	for _, k := range kvstore.Precisions() {
		for _, v := range kvstore.Precisions() {
			for _, bs := range []int{1, 7, 32, 256} {
				sh := shapes[i%len(shapes)]
				c := attnCase{k: k, v: v, blockSize: bs, kvHeads: sh[0], heads: sh[1], dim: sh[2]}
				if i%2 == 1 {
					c.keyGroup, c.valueGroup = min(5, bs), 12
				}
				cs = append(cs, c)
				i++
			}
		}
	}
	return cs
}

// seqStore makes a store for c holding sequences of the given lengths,
// written token by token with Store.Write, in shuffled blocks; it returns the
// store and each sequence's block table.
func seqStore(t testing.TB, r *rand.Rand, c attnCase, lens []int) (*kvstore.Store, [][]int) {
	nb := 0
	for _, n := range lens {
		nb += (n + c.blockSize - 1) / c.blockSize
	}
	cfg := kvstore.Config{Layers: 2, KVHeads: c.kvHeads, HeadDim: c.dim, BlockSize: c.blockSize, Blocks: nb + 2,
		K: c.k, V: c.v, KeyGroup: c.keyGroup, ValueGroup: c.valueGroup}
	s, err := kvstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := rand.New(rand.NewPCG(uint64(cfg.Blocks), 0)).Perm(cfg.Blocks) // apart from r: the data stays the same whatever the block count
	row := c.kvHeads * c.dim
	tables := make([][]int, len(lens))
	for i, n := range lens {
		for p := range n {
			if p%c.blockSize == 0 {
				tables[i] = append(tables[i], ids[0])
				ids = ids[1:]
			}
			for l := range cfg.Layers {
				s.Write(l, tables[i][p/c.blockSize], p%c.blockSize, randVec(r, row), randVec(r, row))
			}
		}
	}
	return s, tables
}

// refAttention is the Go reference: float64 attention over the values
// Store.ReadK and ReadV decode. It also returns each output's error bound:
// the library's scores are float32 dot products, each off by at most
// e_s = (D/16+4)·2^-23·scale·Σ|q·k| (sixteen-lane sums of D products); a
// softmax input error e moves the output by at most 2·max(e_s)·Σp|v|, and
// the float32 weighted sum adds (npos+8)·2^-23·Σp|v|, which also covers
// the library's float exp (within 2 ulps: 2^-22·Σp|v|).
//
// A quantized Int8 or Int4 key group is scored with integer dot products
// (native/cpu/attention.c): the query times the group's channel scales s_d,
// rounded to 22-bit codes of step amax_d|q_d·s_d|/2097151, times the keys'
// codes c_d = (k_d-z_d)/s_d, plus the float dot product of the query with
// the zero points z_d (Int4). Its score is off by at most
// scale·(step/2·Σ|c_d| + (D/16+8)·2^-23·(Σ|q_d·s_d·c_d| + Σ|q_d·z_d|)).
//
// With window > 0 only the row's window latest positions take part.
func refAttention(s *kvstore.Store, layer, heads, window int, scale float32, q []float32, row AttnRow) (out, bound []float64) {
	c := s.Config()
	D, B := c.HeadDim, c.BlockSize
	group := heads / c.KVHeads
	ks := make([]float32, c.KVHeads*row.NPos*D)
	vs := make([]float32, c.KVHeads*row.NPos*D)
	buf := make([]float32, c.KVHeads*B*D)
	for j := 0; j*B < row.NPos; j++ {
		n := min(B, row.NPos-j*B)
		for pass, dst := range [][]float32{ks, vs} {
			if pass == 0 {
				s.ReadK(layer, row.Blocks[j], n, buf)
			} else {
				s.ReadV(layer, row.Blocks[j], n, buf)
			}
			for h := range c.KVHeads {
				copy(dst[(h*row.NPos+j*B)*D:(h*row.NPos+j*B+n)*D], buf[h*n*D:(h+1)*n*D])
			}
		}
	}
	out = make([]float64, heads*D)
	bound = make([]float64, heads*D)
	for h := range heads {
		g := h / group
		qh := q[h*D : (h+1)*D]
		sc := make([]float64, row.NPos)
		mx, es := math.Inf(-1), 0.0
		for p := range row.NPos {
			if window > 0 && p < row.NPos-window {
				sc[p] = math.Inf(-1)
				continue
			}
			k := ks[(g*row.NPos+p)*D:]
			var dot, abs float64
			for d, qv := range qh {
				dot += float64(qv) * float64(k[d])
				abs += math.Abs(float64(qv) * float64(k[d]))
			}
			sc[p] = dot * float64(scale)
			mx = max(mx, sc[p])
			e := float64(D/16+4) * 0x1p-23 * abs
			if s, z := keyGroupScales(s, layer, row.Blocks[p/B], g, p%B); s != nil {
				var amax, codes, terms float64
				for d, qv := range qh {
					cd := 0.0
					if s[d] != 0 {
						cd = (float64(k[d]) - z[d]) / s[d]
					}
					amax = max(amax, math.Abs(float64(qv)*s[d]))
					codes += math.Abs(cd)
					terms += math.Abs(float64(qv)*s[d]*cd) + math.Abs(float64(qv)*z[d])
				}
				e = amax/2097151/2*codes + float64(D/16+8)*0x1p-23*terms
			}
			es = max(es, e*float64(scale))
		}
		var sum float64
		for p := range sc {
			sc[p] = math.Exp(sc[p] - mx)
			sum += sc[p]
		}
		for d := range D {
			var o, abs float64
			for p := range sc {
				v := float64(vs[(g*row.NPos+p)*D+d])
				o += sc[p] / sum * v
				abs += sc[p] / sum * math.Abs(v)
			}
			out[h*D+d] = o
			bound[h*D+d] = (2*es+float64(row.NPos+8)*0x1p-23)*abs*1.01 + 1e-30
		}
		if c.V == kvstore.Int4 {
			// Int4 values are weighted rotated (v' = Hv, H orthonormal,
			// in blocks of R = D&-D) and each output rotated back:
			// output d takes every rotated sum j of its block's error
			// /sqrt(R), plus log2(R)+1 roundings of the transform.
			R := D & -D
			for b0 := 0; b0 < D; b0 += R {
				var tot float64
				for j := b0; j < b0+R; j++ {
					var a float64
					for p := range sc {
						a += sc[p] / sum * math.Abs(rotated(vs[(g*row.NPos+p)*D+b0:], R, j-b0))
					}
					tot += a
				}
				for d := b0; d < b0+R; d++ {
					bound[h*D+d] = ((2*es+float64(row.NPos+8)*0x1p-23)/math.Sqrt(float64(R))+float64(bits.Len(uint(R))+1)*0x1p-23)*tot*1.01 + 1e-30
				}
			}
		}
	}
	return out, bound
}

// rotated returns component j of the orthonormal Walsh-Hadamard transform
// of x[:R] (R a power of two), in float64.
func rotated(x []float32, R, j int) float64 {
	var o float64
	for i := range R {
		if bits.OnesCount(uint(i&j))%2 == 0 {
			o += float64(x[i])
		} else {
			o -= float64(x[i])
		}
	}
	return o / math.Sqrt(float64(R))
}

// keyGroupScales returns the channel scales and zero points (zero but for
// Int4) of KV head h in the key group of slot t of layer l, block b of an
// Int8 or Int4 key plane, decoded from the store's bytes as native/cpu/kv.h's
// kvs_key_group_scales does, or nil for other keys and for a group still in
// its f16 residual.
func keyGroupScales(s *kvstore.Store, l, b, h, t int) (sc, zp []float64) {
	c, r := s.Config(), s.RawK()
	if c.K != kvstore.Int8 && c.K != kvstore.Int4 {
		return nil, nil
	}
	g := t / r.Group
	if r.Resid(l, b, g) != nil {
		return nil, nil
	}
	D := c.HeadDim
	P := (D + 7) / 8
	per := 1 + (D+1)/2
	if c.K == kvstore.Int4 {
		per = 2*D + 3*P
	}
	i := (l*c.Blocks+b)*r.ScalesPerBlock + (h*r.Groups+g)*per
	s8 := func(code uint8) float64 { return float64(quant.F16ToF32(uint16(code) << 7)) }
	sc, zp = make([]float64, D), make([]float64, D)
	for d := range D {
		if c.K == kvstore.Int4 {
			// A 9-bit scale and a 10-bit zero code: low bytes, then
			// bit planes of their high bits (kvs_int4_key_sz).
			m := r.Scale8[i:]
			bit := func(plane int) uint16 { return uint16(m[2*D+plane*P+d/8]>>(d%8)) & 1 }
			scode := uint16(m[d]) | bit(0)<<8
			zcode := uint16(m[D+d]) | bit(1)<<8 | bit(2)<<9
			sc[d], zp[d] = float64(quant.F16ToF32(scode<<6)), float64(quant.F16ToF32(zcode<<6))
		} else {
			sc[d] = s8(r.Scale8[i]) * float64(r.Scale8[i+1+d/2]>>(4*(d%2))&15+1) / 16
		}
	}
	return sc, zp
}

// TestAttentionParity runs paged attention on every path, for every K and V
// precision pair, block sizes 1 to 256, several head shapes and key/value
// groups, over sequences written by kvstore itself (some with a partly
// filled key group, read from the f16 residual), and compares it with the
// Go reference within refAttention's bound. Every path's bits must equal
// the scalar path's, and a row's output must not depend on the other rows
// of the call.
func TestAttentionParity(t *testing.T) {
	l := loadLib(t)
	defer l.SetPath(-1)
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range attnCases() {
		name := fmt.Sprintf("K%v/V%v/bs%d/%dx%d/D%d/kg%d", c.k, c.v, c.blockSize, c.kvHeads, c.heads, c.dim, c.keyGroup)
		lens := []int{1, 45, 300}
		s, tables := seqStore(t, r, c, lens)
		rows := []AttnRow{{1, tables[0]}, {45, tables[1]}, {300, tables[2]}, {293, tables[2]}}
		qd := c.heads * c.dim
		q := randVec(r, len(rows)*qd)
		scale := float32(1 / math.Sqrt(float64(c.dim)))
		var scalar []float32
		for _, p := range l.Paths() {
			if err := l.SetPath(p); err != nil {
				t.Fatal(err)
			}
			// The other paths must give the scalar path's bits, so the
			// reference need only check that one.
			out := checkAttention(t, l, name+"/"+l.PathName(p), s, c.heads, scale, q, rows, scalar)
			if p == PathScalar {
				scalar = out
			}
		}
	}
}

// checkAttention runs attention on rows (layer 1) and returns its output,
// having checked it against the reference within its bound where want is
// nil, else bit for bit against want, and that each row alone gives its
// bits in the call.
func checkAttention(t *testing.T, l *Lib, name string, s *kvstore.Store, heads int, scale float32, q []float32, rows []AttnRow, want []float32) []float32 {
	t.Helper()
	qd := len(q) / len(rows)
	out := make([]float32, len(q))
	if err := l.Attention(s, 1, heads, scale, q, rows, out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if want == nil {
		for i, row := range rows {
			ref, bound := refAttention(s, 1, heads, 0, scale, q[i*qd:(i+1)*qd], row)
			for j, w := range ref {
				if e := math.Abs(float64(out[i*qd+j]) - w); !(e <= bound[j]) {
					t.Fatalf("%s: row %d output %d is %g, reference %g: error %.3g over the bound %.3g", name, i, j, out[i*qd+j], w, e, bound[j])
				}
			}
		}
	} else if i := sameBits(out, want); i >= 0 {
		t.Fatalf("%s: output %d is %g, the scalar path gave %g", name, i, out[i], want[i])
	}
	for i := range rows {
		one := make([]float32, qd)
		if err := l.Attention(s, 1, heads, scale, q[i*qd:(i+1)*qd], rows[i:i+1], one); err != nil {
			t.Fatal(err)
		}
		if j := sameBits(one, out[i*qd:(i+1)*qd]); j >= 0 {
			t.Fatalf("%s: row %d output %d alone is %g, with the other rows %g", name, i, j, one[j], out[i*qd+j])
		}
	}
	return out
}

// TestAttentionOneHeadAKVHead covers layers with one query head a KV head,
// which attention.c runs block by block across the KV heads a thread
// takes (with scores of its own; int8 keys head by head, as with larger
// groups), on one library thread and on two: rows
// ending mid-block, every path with the scalar path's bits, the scalar
// path within the reference's bound, each row alone with its bits in the
// call, and the same bits on one thread as on two.
func TestAttentionOneHeadAKVHead(t *testing.T) {
	l := loadLib(t)
	defer l.SetPath(-1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	r := rand.New(rand.NewPCG(51, 52))
	for _, c := range []attnCase{
		{k: kvstore.F16, v: kvstore.F16, blockSize: 16, kvHeads: 8, heads: 8, dim: 16},
		{k: kvstore.Q8_0, v: kvstore.Int4, blockSize: 16, kvHeads: 8, heads: 8, dim: 32},
		{k: kvstore.BF16, v: kvstore.Int8, blockSize: 7, kvHeads: 8, heads: 8, dim: 64},
		{k: kvstore.Int8, v: kvstore.F16, blockSize: 16, kvHeads: 8, heads: 8, dim: 32},
	} {
		n := 700
		s, tables := seqStore(t, r, c, []int{n})
		rows := []AttnRow{{n, tables[0]}, {n - 37, tables[0]}, {300, tables[0]}}
		qd := c.heads * c.dim
		q := randVec(r, len(rows)*qd)
		scale := float32(1 / math.Sqrt(float64(c.dim)))
		var scalar []float32 // the scalar path's on one thread
		for _, procs := range []int{1, 2} {
			runtime.GOMAXPROCS(procs)
			for _, p := range l.Paths() {
				if err := l.SetPath(p); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("K%v/V%v/%d threads/%s", c.k, c.v, procs, l.PathName(p))
				if out := checkAttention(t, l, name, s, c.heads, scale, q, rows, scalar); scalar == nil {
					scalar = out
				}
			}
		}
	}
}

// TestAttentionBlockSizeInvariance checks that the same sequence's
// attention is the same bits whatever the block size (f16 K/V, whose
// stored values do not depend on it).
func TestAttentionBlockSizeInvariance(t *testing.T) {
	l := loadLib(t)
	var ref []float32
	for _, bs := range []int{1, 2, 16, 33, 256} {
		c := attnCase{k: kvstore.F16, v: kvstore.F16, blockSize: bs, kvHeads: 2, heads: 4, dim: 40}
		s, tables := seqStore(t, rand.New(rand.NewPCG(11, 12)), c, []int{100})
		q := randVec(rand.New(rand.NewPCG(13, 14)), c.heads*c.dim)
		out := make([]float32, len(q))
		if err := l.Attention(s, 0, c.heads, 0.125, q, []AttnRow{{100, tables[0]}}, out); err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = out
		} else if i := sameBits(out, ref); i >= 0 {
			t.Fatalf("block size %d: output %d is %g, with block size 1 %g", bs, i, out[i], ref[i])
		}
	}
}

// TestAttentionRows checks that the flat-array form (engine/backend's Rows:
// sequences of consecutive rows sharing a table) gives Attention's bits,
// and refuses inconsistent arrays.
func TestAttentionRows(t *testing.T) {
	l := loadLib(t)
	c := attnCase{k: kvstore.Int4, v: kvstore.Q8_0, blockSize: 16, kvHeads: 2, heads: 6, dim: 24}
	r := rand.New(rand.NewPCG(31, 32))
	s, tables := seqStore(t, r, c, []int{40, 7})
	// Sequence 0: a chunk of prompt rows at positions 30..39; sequence 1:
	// one decode row at position 6. Sequence 0's table has a spare entry.
	pos := []int32{30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 6}
	seqs := []int32{0, 10, 11}
	flat := []int32{}
	for _, b := range tables[0] {
		flat = append(flat, int32(b))
	}
	flat = append(flat, 1<<30)
	start := []int32{0, int32(len(flat))}
	for _, b := range tables[1] {
		flat = append(flat, int32(b))
	}
	start = append(start, int32(len(flat)))
	qd := c.heads * c.dim
	q := randVec(r, len(pos)*qd)
	got := make([]float32, len(q))
	if err := l.AttentionRows(s, 1, c.heads, 0, 0.2, q, pos, seqs, start, flat, got); err != nil {
		t.Fatal(err)
	}
	rows := make([]AttnRow, len(pos))
	for i, p := range pos {
		rows[i] = AttnRow{int(p) + 1, tables[0]}
		if i == 10 {
			rows[i].Blocks = tables[1]
		}
	}
	want := make([]float32, len(q))
	if err := l.Attention(s, 1, c.heads, 0.2, q, rows, want); err != nil {
		t.Fatal(err)
	}
	if i := sameBits(got, want); i >= 0 {
		t.Fatalf("output %d is %g, Attention gives %g", i, got[i], want[i])
	}
	bad := []struct {
		name        string
		pos, seqs   []int32
		start, flat []int32
		want        string
	}{
		{"rows past the table", []int32{80}, []int32{0, 1}, []int32{0, 2}, flat[:2], "attends 81 positions"},
		{"seqs short of the rows", pos, []int32{0, 10}, []int32{0, 3}, flat, "do not describe"},
		{"table past the array", []int32{3}, []int32{0, 1}, []int32{0, 99}, flat, "table 0..99"},
	}
	for _, b := range bad {
		err := l.AttentionRows(s, 1, c.heads, 0, 0.2, q[:len(b.pos)*qd], b.pos, b.seqs, b.start, b.flat, got[:len(b.pos)*qd])
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: got %v, want an error containing %q", b.name, err, b.want)
		}
	}
}

// TestAttentionWindow checks sliding-window attention (Gemma 3's local
// layers): rows of a prompt chunk and a decode row with windows of 1, 5, a
// block, more than a block and longer than the context, against the
// reference over the window's positions only, within its bound, on every
// path with the scalar path's bits.
func TestAttentionWindow(t *testing.T) {
	l := loadLib(t)
	c := attnCase{k: kvstore.F16, v: kvstore.Q8_0, blockSize: 8, kvHeads: 2, heads: 4, dim: 16}
	r := rand.New(rand.NewPCG(41, 42))
	s, tables := seqStore(t, r, c, []int{37})
	pos := []int32{20, 21, 22, 36}
	var flat []int32
	for _, b := range tables[0] {
		flat = append(flat, int32(b))
	}
	qd := c.heads * c.dim
	q := randVec(r, len(pos)*qd)
	for _, w := range []int{1, 5, 8, 13, 100} {
		var scalar []float32
		eachPath(t, l, func(t *testing.T) {
			got := make([]float32, len(q))
			if err := l.AttentionRows(s, 1, c.heads, w, 0.3, q, pos, []int32{0, int32(len(pos))}, []int32{0, int32(len(flat))}, flat, got); err != nil {
				t.Fatal(err)
			}
			if scalar == nil {
				scalar = got
			} else if i := sameBits(got, scalar); i >= 0 {
				t.Fatalf("window %d: output %d is %g, the scalar path gives %g", w, i, got[i], scalar[i])
			}
			for i, p := range pos {
				want, bound := refAttention(s, 1, c.heads, w, 0.3, q[i*qd:(i+1)*qd], AttnRow{int(p) + 1, tables[0]})
				for j, v := range want {
					if d := math.Abs(float64(got[i*qd+j]) - v); d > bound[j] {
						t.Fatalf("window %d, row %d, output %d: %g, reference %g (bound %g)", w, i, j, got[i*qd+j], v, bound[j])
					}
				}
			}
		})
	}
	if err := l.AttentionRows(s, 1, c.heads, -1, 0.3, q, pos, []int32{0, int32(len(pos))}, []int32{0, int32(len(flat))}, flat, make([]float32, len(q))); err == nil {
		t.Error("a negative window was accepted")
	}
}

// TestWriteKV checks that WriteKV stores the bytes Store.Write stores, for
// every precision it implements, row by row in order (a slot written twice
// keeps the later row), and refuses Int8/Int4/FP8 keys (quantized per
// channel across tokens) and bad slots.
func TestWriteKV(t *testing.T) {
	l := loadLib(t)
	for _, kp := range kvstore.Precisions() {
		for _, vp := range kvstore.Precisions() {
			for _, shape := range [][4]int{{2, 8, 4, 0}, {3, 20, 7, 12}} {
				cfg := kvstore.Config{Layers: 2, KVHeads: shape[0], HeadDim: shape[1], BlockSize: shape[2], Blocks: 3, K: kp, V: vp, ValueGroup: shape[3]}
				a, err := kvstore.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := kvstore.New(cfg)
				r := rand.New(rand.NewPCG(15, 16))
				row := cfg.KVHeads * cfg.HeadDim
				// Every slot of block 2, then slot 1 of block 0 twice.
				var slots []int32
				for sl := range cfg.BlockSize {
					slots = append(slots, int32(2*cfg.BlockSize+sl))
				}
				slots = append(slots, 1, 1)
				k, v := randVec(r, len(slots)*row), randVec(r, len(slots)*row)
				clear(k[row : 2*row]) // an all-zero row: scale 0
				err = l.WriteKV(a, 1, k, v, slots)
				if kp == kvstore.Int8 || kp == kvstore.Int4 || kp == kvstore.FP8 {
					if !errors.Is(err, ErrUnsupported) {
						t.Fatalf("K %v: got %v, want ErrUnsupported", kp, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				for i, sl := range slots {
					b.Write(1, int(sl)/cfg.BlockSize, int(sl)%cfg.BlockSize, k[i*row:(i+1)*row], v[i*row:(i+1)*row])
				}
				for _, blk := range []int{0, 2} {
					if !bytes.Equal(a.Save(blk, nil), b.Save(blk, nil)) {
						t.Errorf("K %v V %v shape %v: block %d's bytes differ from Store.Write's", kp, vp, shape, blk)
					}
				}
			}
		}
	}
	s, _ := kvstore.New(kvstore.Config{Layers: 1, KVHeads: 1, HeadDim: 4, BlockSize: 2, Blocks: 2, K: kvstore.F16, V: kvstore.F16})
	for _, c := range []struct {
		name  string
		layer int
		slots []int32
		n     int
		want  string
	}{
		{"slot past the store", 0, []int32{4}, 4, "slot 4 is outside"},
		{"negative slot", 0, []int32{-1}, 4, "slot -1 is outside"},
		{"layer", 1, []int32{0}, 4, "layer 1 of 1"},
		{"short rows", 0, []int32{0, 1}, 4, "for 2 slots"},
	} {
		x := make([]float32, c.n)
		if err := l.WriteKV(s, c.layer, x, x, c.slots); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestAttentionErrors checks that bad tables and shapes are refused in Go.
func TestAttentionErrors(t *testing.T) {
	l := loadLib(t)
	c := attnCase{k: kvstore.F16, v: kvstore.F16, blockSize: 4, kvHeads: 2, heads: 4, dim: 8}
	s, tables := seqStore(t, rand.New(rand.NewPCG(1, 1)), c, []int{6})
	q := make([]float32, 4*8)
	out := make([]float32, 4*8)
	cases := []struct {
		name  string
		layer int
		heads int
		rows  []AttnRow
		q     []float32
		want  string
	}{
		{"block out of range", 0, 4, []AttnRow{{6, []int{tables[0][0], 99}}}, q, "names block 99"},
		{"negative block", 0, 4, []AttnRow{{6, []int{-1, tables[0][1]}}}, q, "names block -1"},
		{"table too short", 0, 4, []AttnRow{{9, tables[0]}}, q, "attends 9 positions"},
		{"no positions", 0, 4, []AttnRow{{0, tables[0]}}, q, "attends 0 positions"},
		{"layer", 2, 4, []AttnRow{{6, tables[0]}}, q, "layer 2"},
		{"heads", 0, 3, []AttnRow{{6, tables[0]}}, q, "3 query heads"},
		{"short queries", 0, 4, []AttnRow{{6, tables[0]}}, q[:31], "need 32 queries"},
	}
	for _, tc := range cases {
		err := l.Attention(s, tc.layer, tc.heads, 1, tc.q, tc.rows, out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
