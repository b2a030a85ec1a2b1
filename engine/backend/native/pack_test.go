package native

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/quant"
)

// TestPackedRandomShapes multiplies every packed type's weights in random
// shapes (rows rarely a multiple of 16, one to nine blocks a row, one to
// twelve vectors; and K-quant rows long enough to be stored in panels, up
// to ten super-groups of them) on every SIMD path: on the scalar path within
// TestMatMulParity's bound of the exact product of quant.Dequantize's
// weights, and on every path with the scalar path's bits, packed or not.
func TestPackedRandomShapes(t *testing.T) {
	l := loadLib(t)
	type shape struct {
		typ           quant.Type
		rows, cols, n int
		seed          uint64
	}
	r := rand.New(rand.NewPCG(11, 12))
	var shapes []shape
	for _, typ := range packTypes {
		bs := max(32, typ.BlockSize())
		for range 6 {
			blocks := 1 + r.IntN(9)
			if bs == 32 {
				blocks = 1 + r.IntN(40)
			}
			shapes = append(shapes, shape{typ, 1 + r.IntN(70), blocks * bs, 1 + r.IntN(12), r.Uint64()})
		}
		wide := panelBlocks(l, typ)
		for range 3 * (bs / 256) {
			shapes = append(shapes, shape{typ, 1 + r.IntN(640), (wide + r.IntN(wide)) * bs, 1 + r.IntN(12), r.Uint64()})
		}
	}
	scalar := map[string][]float32{}
	eachPath(t, l, func(t *testing.T) {
		for _, s := range shapes {
			name := fmt.Sprintf("%s/%dx%d/n%d", s.typ, s.rows, s.cols, s.n)
			rs := rand.New(rand.NewPCG(s.seed, 1))
			w, wf := randWeights(t, rs, s.typ, s.rows, s.cols)
			x := randVec(rs, s.n*s.cols)
			p, err := l.Pack(s.typ, w, s.rows, s.cols)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := make([]float32, s.n*s.rows)
			if err := l.MatMulPacked(p, x, s.n, got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			file := make([]float32, s.n*s.rows)
			if err := l.MatMul(s.typ, w, s.rows, s.cols, x, s.n, file); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i := sameBits(file, got); i >= 0 {
				t.Errorf("%s: MatMul's output %d is %g, the packed product's %g", name, i, file[i], got[i])
			}
			if ref, ok := scalar[name]; !ok {
				scalar[name] = got
				checkMatMul(t, name, s.typ, wf, s.rows, s.cols, x, s.n, got)
			} else if i := sameBits(got, ref); i >= 0 {
				t.Errorf("%s: output %d is %g, the scalar path gave %g", name, i, got[i], ref[i])
			}
		}
	})
}

// panelBlocks is the fewest blocks a row of K-quant typ that the library
// stores in panels (packed_layout.h: a 16-row group longer than 40 KB).
func panelBlocks(l *Lib, typ quant.Type) int {
	bs := max(32, typ.BlockSize())
	b := 1
	for l.packedBytes(uint32(typ), 16, int64(b*bs)) <= 40<<10 {
		b++
	}
	return b
}

// TestPackErrors checks Pack's refusals: a type without a packed form,
// and weights of the wrong length.
func TestPackErrors(t *testing.T) {
	l := loadLib(t)
	cases := []struct {
		name string
		typ  quant.Type
		w    []byte
		rows int
		cols int
		want string
	}{
		{"unpacked type", quant.Q4_1, make([]byte, 20), 1, 32, "not implemented"},
		{"short weights", quant.Q4_K, make([]byte, 143), 1, 256, "weights have 143"},
		{"partial block", quant.Q6_K, make([]byte, 210), 1, 200, "do not make"},
	}
	for _, c := range cases {
		if p, err := l.Pack(c.typ, c.w, c.rows, c.cols); p != nil || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, %v; want an error containing %q", c.name, p, err, c.want)
		}
	}
}

// TestPackedExtremeCodes multiplies K-quant blocks whose codes are all
// the largest (Q4_K 15, Q5_K 31, Q6_K 63, with the largest scales and
// mins) by activations at ±127, the case that comes nearest the int16
// partial sums the AVX2 kernels keep: on every path the product must have
// the scalar path's bits and lie within TestMatMulParity's bound of the
// exact product. An overflowed sum would be off by 2^16 steps.
func TestPackedExtremeCodes(t *testing.T) {
	l := loadLib(t)
	const rows, cols, n = 19, 512, 3
	signs := [][]float32{{1}, {-1}, {1, -1}, {1, 1, -1, -1}}
	scalar := map[string][]float32{}
	eachPath(t, l, func(t *testing.T) {
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K} {
			rb, err := typ.RowBytes(cols)
			if err != nil {
				t.Fatal(err)
			}
			w := bytes.Repeat([]byte{0xff}, rows*rb)
			for b := 0; b < len(w); b += rb / (cols / 256) {
				blk := w[b : b+rb/(cols/256)]
				switch typ {
				case quant.Q6_K: // ql, qh, 16 int8 scales, d
					for s := range 16 {
						blk[192+s] = []byte{0x7f, 0x80}[s%2]
					}
					binary.LittleEndian.PutUint16(blk[208:], 0x3c00)
				default: // d, dmin, 12 bytes of 6-bit scales and mins (all 63), codes
					binary.LittleEndian.PutUint16(blk[0:], 0x3c00)
					binary.LittleEndian.PutUint16(blk[2:], 0x3800)
				}
			}
			wf := make([]float32, rows*cols)
			if err := quant.Dequantize(typ, w, wf); err != nil {
				t.Fatal(err)
			}
			p, err := l.Pack(typ, w, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			for si, sg := range signs {
				name := fmt.Sprintf("%s/signs%d", typ, si)
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = sg[i%len(sg)]
				}
				got := make([]float32, n*rows)
				if err := l.MatMulPacked(p, x, n, got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if ref, ok := scalar[name]; !ok {
					scalar[name] = got
					checkMatMul(t, name, typ, wf, rows, cols, x, n, got)
				} else if i := sameBits(got, ref); i >= 0 {
					t.Errorf("%s: output %d is %g, the scalar path gave %g", name, i, got[i], ref[i])
				}
			}
		}
	})
}

// TestMatMulPackedN multiplies groups of matrices of random shapes (rows
// rarely a multiple of 16, types mixed within one way of rounding the
// activations) by the same vectors in one call, on every SIMD path and on
// one and several threads: each product must have the bits of its own
// MatMulPacked.
func TestMatMulPackedN(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(13, 14))
	sets := [][]quant.Type{
		{quant.Q4_K, quant.Q4_K, quant.Q6_K}, // a Q4_K_M layer's query, key and value
		{quant.Q5_0, quant.Q5_0, quant.Q8_0}, // a Qwen Q4_K_M layer's
		{quant.Q4_0, quant.Q4_0},
		{quant.Q5_K, quant.Q6_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q4_K, quant.Q5_K, quant.Q6_K},
		{quant.Q6_K, quant.Q4_K, quant.Q6_K}, // rows stored in panels
	}
	eachPath(t, l, func(t *testing.T) {
		for si, types := range sets {
			bs := max(32, types[0].BlockSize())
			cols := bs * (1 + r.IntN(4))
			if si == len(sets)-1 {
				cols = bs * (panelBlocks(l, quant.Q4_K) + r.IntN(4))
			}
			var ps []*Packed
			for _, typ := range types {
				rows := 1 + r.IntN(300)
				w, _ := randWeights(t, r, typ, rows, cols)
				p, err := l.Pack(typ, w, rows, cols)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			for _, n := range []int{1, 2, 5} {
				for _, threads := range []int{1, 2, 3} {
					name := fmt.Sprintf("set%d/n%d/threads%d", si, n, threads)
					x := randVec(r, n*cols)
					outs := make([][]float32, len(ps))
					for i, p := range ps {
						outs[i] = make([]float32, n*p.rows)
					}
					prev := runtime.GOMAXPROCS(threads)
					err := l.MatMulPackedN(ps, x, n, outs)
					runtime.GOMAXPROCS(prev)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for i, p := range ps {
						want := make([]float32, n*p.rows)
						if err := l.MatMulPacked(p, x, n, want); err != nil {
							t.Fatal(err)
						}
						if k := sameBits(outs[i], want); k >= 0 {
							t.Errorf("%s: matrix %d (%s, %d rows): output %d is %g, MatMulPacked's %g", name, i, p.typ, p.rows, k, outs[i][k], want[k])
						}
					}
				}
			}
		}
	})
}

// TestMatMulPackedNErrors checks MatMulPackedN's refusals: matrices that
// round activations differently, of other widths, too many or too few,
// outputs of the wrong length.
func TestMatMulPackedNErrors(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(15, 16))
	pack := func(typ quant.Type, rows, cols int) *Packed {
		w, _ := randWeights(t, r, typ, rows, cols)
		p, err := l.Pack(typ, w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	q4k, q6k, q8, q8wide := pack(quant.Q4_K, 20, 256), pack(quant.Q6_K, 16, 256), pack(quant.Q8_0, 20, 256), pack(quant.Q8_0, 20, 512)
	x := randVec(r, 256)
	outs := func(ps ...*Packed) [][]float32 {
		o := make([][]float32, len(ps))
		for i, p := range ps {
			o[i] = make([]float32, p.rows)
		}
		return o
	}
	nine := make([]*Packed, 9)
	for i := range nine {
		nine[i] = q4k
	}
	cases := []struct {
		name string
		ps   []*Packed
		outs [][]float32
	}{
		{"K-quant with Q8_0", []*Packed{q4k, q8}, outs(q4k, q8)},
		{"other widths", []*Packed{q8, q8wide}, outs(q8, q8wide)},
		{"one matrix", []*Packed{q4k}, outs(q4k)},
		{"nine matrices", nine, outs(nine...)},
		{"fewer outputs", []*Packed{q4k, q6k}, outs(q4k)},
		{"short output", []*Packed{q4k, q6k}, [][]float32{make([]float32, 20), make([]float32, 15)}},
	}
	for _, c := range cases {
		if err := l.MatMulPackedN(c.ps, x, 1, c.outs); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestBackendMatMuls checks the backend's MatMuls against one MatMul
// each, bit for bit, biases added: for weights it multiplies in one call
// (query, key and value of Q4_K, Q4_K and Q6_K with biases; Q5_0 and Q8_0)
// and for ones it cannot (Q4_1 has no packed form; K-quants with Q8_0
// round activations differently), with 1 and 3 rows.
func TestBackendMatMuls(t *testing.T) {
	be := NewBackend(loadLib(t))
	r := rand.New(rand.NewPCG(17, 18))
	sets := [][]quant.Type{
		{quant.Q4_K, quant.Q4_K, quant.Q6_K},
		{quant.Q5_0, quant.Q8_0},
		{quant.Q4_1, quant.Q4_0},
		{quant.Q4_K, quant.Q8_0},
	}
	const cols = 512
	for si, types := range sets {
		var ws []backend.Weight
		for i, typ := range types {
			rows := 40 + 37*i
			w, _ := randWeights(t, r, typ, rows, cols)
			var bias []float32
			if si == 0 {
				bias = randVec(r, rows)
			}
			h, err := be.Weight(typ, rows, cols, w, bias)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, h)
		}
		for _, n := range []int{1, 3} {
			x, _ := be.NewBuffer(n * cols)
			be.Write(x, 0, randVec(r, n*cols))
			var outs, want []backend.Buffer
			for _, w := range ws {
				rows, _ := w.Shape()
				o, _ := be.NewBuffer(n * rows)
				ow, _ := be.NewBuffer(n * rows)
				outs, want = append(outs, o), append(want, ow)
				be.MatMul(ow, w, x, n)
			}
			be.MatMuls(outs, ws, x, n)
			for i, w := range ws {
				rows, _ := w.Shape()
				got, exp := make([]float32, n*rows), make([]float32, n*rows)
				if err := be.Read(got, outs[i], 0); err != nil {
					t.Fatal(err)
				}
				if err := be.Read(exp, want[i], 0); err != nil {
					t.Fatal(err)
				}
				if k := sameBits(got, exp); k >= 0 {
					t.Errorf("set %d (%v), %d rows: weight %d's output %d is %g, MatMul's %g", si, types, n, i, k, got[k], exp[k])
				}
			}
		}
	}
}
