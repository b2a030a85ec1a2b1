package backend

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// upload makes a Go buffer holding v.
func upload(t *testing.T, be Backend, v []float32) Buffer {
	t.Helper()
	b, err := be.NewBuffer(len(v))
	if err != nil {
		t.Fatal(err)
	}
	be.Write(b, 0, v)
	return b
}

func download(t *testing.T, be Backend, b Buffer) []float32 {
	t.Helper()
	v := make([]float32, b.Len())
	if err := be.Read(v, b, 0); err != nil {
		t.Fatal(err)
	}
	return v
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestOps checks each elementwise and row operation of the Go backend
// against its formula computed here in float64.
func TestOps(t *testing.T) {
	be := Go()
	rng := rand.New(rand.NewPCG(7, 7))
	const n, dim = 3, 40
	x, y, w := randVec(rng, n*dim), randVec(rng, n*dim), randVec(rng, dim)
	for _, tc := range []struct {
		name string
		run  func(xb, yb Buffer) []float32
		want func(i int) float64
		tol  float64
	}{
		{"Add", func(xb, yb Buffer) []float32 { be.Add(xb, yb, n*dim); return download(t, be, xb) },
			func(i int) float64 { return float64(x[i] + y[i]) }, 0},
		{"SwiGLU", func(xb, yb Buffer) []float32 { be.SwiGLU(xb, yb, n*dim); return download(t, be, xb) },
			func(i int) float64 { g := float64(x[i]); return g / (1 + math.Exp(-g)) * float64(y[i]) }, 1e-5},
		{"RMSNorm", func(xb, yb Buffer) []float32 {
			be.RMSNorm(yb, xb, upload(t, be, w), n, dim, 1e-5)
			return download(t, be, yb)
		}, func(i int) float64 {
			r := i / dim
			var ss float64
			for _, v := range x[r*dim : (r+1)*dim] {
				ss += float64(v) * float64(v)
			}
			return float64(x[i]) / math.Sqrt(ss/dim+1e-5) * float64(w[i%dim])
		}, 1e-5},
		{"Gather", func(xb, yb Buffer) []float32 {
			be.Gather(yb, xb, []int32{2, 0}, dim)
			return download(t, be, yb)[:2*dim]
		}, func(i int) float64 { return float64(x[[]int{2, 0}[i/dim]*dim+i%dim]) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(upload(t, be, x), upload(t, be, y))
			for i, g := range got {
				if want := tc.want(i); math.Abs(float64(g)-want) > tc.tol*max(1, math.Abs(want)) {
					t.Fatalf("value %d: %v, want %v", i, g, want)
				}
			}
		})
	}
}

// TestMatMul: products with and without bias, and embedding rows, match
// quant's row functions.
func TestMatMul(t *testing.T) {
	be := Go()
	rng := rand.New(rand.NewPCG(3, 3))
	const rows, cols, n = 5, 64, 3
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K} {
		for _, withBias := range []bool{false, true} {
			cols := cols
			if typ.BlockSize() > cols {
				cols = typ.BlockSize()
			}
			rb, _ := typ.RowBytes(cols)
			data := make([]byte, rows*rb)
			if err := quant.Quantize(typ, randVec(rng, rows*cols), data); err != nil {
				t.Fatal(err)
			}
			var bias []float32
			if withBias {
				bias = randVec(rng, rows)
			}
			w, err := be.Weight(typ, rows, cols, data, bias)
			if err != nil {
				t.Fatal(err)
			}
			x := randVec(rng, n*cols)
			out, _ := be.NewBuffer(n * rows)
			be.MatMul(out, w, upload(t, be, x), n)
			got := download(t, be, out)
			dot, _ := quant.DotFunc(typ)
			for i := range n {
				for r := range rows {
					want := dot(data[r*rb:(r+1)*rb], x[i*cols:(i+1)*cols])
					if bias != nil {
						want += bias[r]
					}
					if got[i*rows+r] != want {
						t.Fatalf("%s bias %v: out[%d][%d] = %v, want %v", typ, withBias, i, r, got[i*rows+r], want)
					}
				}
			}
			emb, _ := be.NewBuffer(2 * cols)
			be.Embed(emb, w, []int32{4, 1})
			got = download(t, be, emb)
			want := make([]float32, cols)
			for i, tok := range []int{4, 1} {
				if err := quant.Dequantize(typ, data[tok*rb:(tok+1)*rb], want); err != nil {
					t.Fatal(err)
				}
				for j := range want {
					if got[i*cols+j] != want[j] {
						t.Fatalf("%s: embedding of token %d, value %d = %v, want %v", typ, tok, j, got[i*cols+j], want[j])
					}
				}
			}
		}
	}
}

// TestRoPE: position 0 changes nothing, rotating by p then -p gives the
// input back, rotations keep each pair's length, and NeoX pairs differ
// from adjacent ones.
func TestRoPE(t *testing.T) {
	be := Go()
	rng := rand.New(rand.NewPCG(5, 5))
	const heads, hd = 3, 16
	x := randVec(rng, 2*heads*hd)
	for _, r := range []Rope{
		{HeadDim: hd, Dims: hd, Base: 10000, Scale: 1},
		{HeadDim: hd, Dims: hd, Base: 10000, Scale: 1, NeoX: true},
		{HeadDim: hd, Dims: 8, Base: 500000, Scale: 4, Freqs: []float32{1, 1, 2, 8}},
	} {
		b := upload(t, be, x)
		be.RoPE(b, heads, []int32{0, 37}, &r)
		rot := download(t, be, b)
		for i := range heads * hd {
			if rot[i] != x[i] {
				t.Fatalf("%+v: position 0 moved value %d from %v to %v", r, i, x[i], rot[i])
			}
		}
		row := x[heads*hd:]
		got := rot[heads*hd:]
		for h := range heads {
			for j := range r.Dims / 2 {
				a, c := h*hd+2*j, h*hd+2*j+1
				if r.NeoX {
					a, c = h*hd+j, h*hd+j+r.Dims/2
				}
				n0 := math.Hypot(float64(row[a]), float64(row[c]))
				n1 := math.Hypot(float64(got[a]), float64(got[c]))
				if math.Abs(n0-n1) > 1e-5*max(1, n0) {
					t.Fatalf("%+v: head %d pair %d length %v became %v", r, h, j, n0, n1)
				}
			}
			for d := r.Dims; d < hd; d++ {
				if got[h*hd+d] != row[h*hd+d] {
					t.Fatalf("%+v: value %d past the rotated dims changed", r, d)
				}
			}
		}
		be.RoPE(b, heads, []int32{0, -37}, &r)
		back := download(t, be, b)
		for i := range x {
			if math.Abs(float64(back[i]-x[i])) > 1e-5 {
				t.Fatalf("%+v: rotating by 37 and back moved value %d from %v to %v", r, i, x[i], back[i])
			}
		}
	}
	plain, neox := upload(t, be, x), upload(t, be, x)
	be.RoPE(plain, heads, []int32{1, 2}, &Rope{HeadDim: hd, Dims: hd, Base: 10000, Scale: 1})
	be.RoPE(neox, heads, []int32{1, 2}, &Rope{HeadDim: hd, Dims: hd, Base: 10000, Scale: 1, NeoX: true})
	if a, b := download(t, be, plain), download(t, be, neox); a[3] == b[3] {
		t.Error("NeoX and adjacent-pair rotations agree; they pair different values")
	}
}

// TestKV: ReadKV returns what WriteKV stored, for scattered slots.
func TestKV(t *testing.T) {
	be := Go()
	rng := rand.New(rand.NewPCG(9, 9))
	c, err := be.NewCache(kvstore.Config{Layers: 2, KVHeads: 2, HeadDim: 8, BlockSize: 4, Blocks: 6, K: kvstore.F32, V: kvstore.F32})
	if err != nil {
		t.Fatal(err)
	}
	slots := []int32{21, 5, 6, 7, 8, 0, 22}
	k, v := randVec(rng, len(slots)*16), randVec(rng, len(slots)*16)
	be.WriteKV(c, 1, upload(t, be, k), upload(t, be, v), slots)
	kb, _ := be.NewBuffer(len(k))
	vb, _ := be.NewBuffer(len(v))
	be.ReadKV(kb, vb, c, 1, slots)
	gk, gv := download(t, be, kb), download(t, be, vb)
	for i := range k {
		if gk[i] != k[i] || gv[i] != v[i] {
			t.Fatalf("value %d: read K %v V %v, wrote %v %v", i, gk[i], gv[i], k[i], v[i])
		}
	}
}

// TestErrors: bad weights, buffers and reads are refused with a reason.
func TestErrors(t *testing.T) {
	be := Go()
	data := make([]byte, 4*64*4)
	buf, _ := be.NewBuffer(4)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unsupported type", func() error { _, err := be.Weight(quant.Type(99), 4, 64, data, nil); return err }(), "not supported"},
		{"short data", func() error { _, err := be.Weight(quant.F32, 4, 64, data[:100], nil); return err }(), "take 1024 bytes"},
		{"bias", func() error { _, err := be.Weight(quant.F32, 4, 64, data, make([]float32, 3)); return err }(), "bias of 3"},
		{"empty", func() error { _, err := be.Weight(quant.F32, 0, 64, nil, nil); return err }(), "empty"},
		{"partial block", func() error { _, err := be.Weight(quant.Q8_0, 4, 40, data, nil); return err }(), "40"},
		{"negative buffer", func() error { _, err := be.NewBuffer(-1); return err }(), "impossible"},
		{"read past end", be.Read(make([]float32, 3), buf, 2), "outside a buffer of 4"},
		{"cache", func() error { _, err := be.NewCache(kvstore.Config{}); return err }(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", tc.err, tc.want)
			}
		})
	}
}
