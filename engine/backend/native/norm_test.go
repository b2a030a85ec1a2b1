package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// ulps4 is the bound for the element-wise kernels: their reference does
// the same float32 operations, so they differ only where the C library's
// exp, sin, cos or sqrt round differently from Go's math package (by at most
// an ulp each), a few float32 ulps of the inputs' scale.
const ulps4 = 4 * 0x1p-24

// TestElementwiseParity compares RMSNorm, RoPE (both pairings, with and
// without frequency factors, partial rotation), SwiGLU and Add on every
// path with Go references (engine/model's formulas), for odd sizes, and
// requires every path's bits to equal the scalar path's.
func TestElementwiseParity(t *testing.T) {
	l := loadLib(t)
	scalar := map[string][]float32{}
	same := func(t *testing.T, name string, got []float32) {
		if ref, ok := scalar[name]; !ok {
			scalar[name] = append([]float32(nil), got...)
		} else if i := sameBits(got, ref); i >= 0 {
			t.Errorf("%s: element %d is %g, the scalar path gave %g", name, i, got[i], ref[i])
		}
	}
	eachPath(t, l, func(t *testing.T) {
		r := rand.New(rand.NewPCG(17, 18))
		for _, dim := range []int{1, 7, 64, 100, 2051} {
			n := 3
			x, w := randVec(r, n*dim), randVec(r, dim)
			out := make([]float32, len(x))
			if err := l.RMSNorm(out, x, w, dim, 1e-5); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("rmsnorm/%d", dim)
			same(t, name, out)
			for row := range n {
				xs := x[row*dim : (row+1)*dim]
				var ss float64
				for _, v := range xs {
					ss += float64(v * v)
				}
				sc := 1 / float32(math.Sqrt(float64(float32(ss/float64(dim))+1e-5)))
				for i, v := range xs {
					want := v * sc * w[i]
					if e := math.Abs(float64(out[row*dim+i] - want)); e > ulps4*math.Abs(float64(want))+1e-30 {
						t.Fatalf("%s: row %d element %d is %g, want %g", name, row, i, out[row*dim+i], want)
					}
				}
			}
		}
		for _, c := range []struct {
			heads, headDim, ropeDim int
			neox, freqs             bool
		}{{3, 8, 8, false, false}, {3, 8, 8, true, false}, {2, 64, 32, false, true}, {2, 64, 48, true, true}, {1, 1030, 1030, true, false}} {
			name := fmt.Sprintf("rope/%dx%d/%d/neox%v/freqs%v", c.heads, c.headDim, c.ropeDim, c.neox, c.freqs)
			pos := []int32{0, 1, 17, 4095}
			x := randVec(r, len(pos)*c.heads*c.headDim)
			var ff []float32
			if c.freqs {
				ff = make([]float32, c.ropeDim/2)
				for i := range ff {
					ff[i] = 1 + 7*r.Float32()
				}
			}
			got := append([]float32(nil), x...)
			base, scale := float32(500000), float32(2)
			if err := l.RoPE(got, c.heads, c.headDim, c.ropeDim, pos, base, scale, ff, c.neox); err != nil {
				t.Fatal(err)
			}
			same(t, name, got)
			ts := float32(math.Pow(float64(base), -2/float64(c.ropeDim)))
			for ri, p := range pos {
				for h := range c.heads {
					hd := x[(ri*c.heads+h)*c.headDim:]
					gd := got[(ri*c.heads+h)*c.headDim:]
					theta := float32(p)
					for i := range c.ropeDim / 2 {
						th := theta / scale
						if ff != nil {
							th /= ff[i]
						}
						cs, sn := float32(math.Cos(float64(th))), float32(math.Sin(float64(th)))
						a, b := 2*i, 2*i+1
						if c.neox {
							a, b = i, i+c.ropeDim/2
						}
						wa, wb := hd[a]*cs-hd[b]*sn, hd[a]*sn+hd[b]*cs
						lim := ulps4 * (math.Abs(float64(hd[a])) + math.Abs(float64(hd[b])))
						if math.Abs(float64(gd[a]-wa)) > lim || math.Abs(float64(gd[b]-wb)) > lim {
							t.Fatalf("%s: pos %d head %d pair %d is (%g, %g), want (%g, %g)", name, p, h, i, gd[a], gd[b], wa, wb)
						}
						theta *= ts
					}
					for d := c.ropeDim; d < c.headDim; d++ {
						if gd[d] != hd[d] {
							t.Fatalf("%s: dim %d past the rope dim changed", name, d)
						}
					}
				}
			}
		}
		for _, n := range []int{1, 15, 1000, 4001} {
			g, u := randVec(r, n), randVec(r, n)
			if n == 4001 {
				// The library's exp is a float polynomial: try it
				// from -100 to 100, past both ends of its clamp.
				for i := range g {
					g[i] = float32(i-2000) / 20
				}
			}
			out := make([]float32, n)
			if err := l.SwiGLU(out, g, u); err != nil {
				t.Fatal(err)
			}
			same(t, fmt.Sprintf("swiglu/%d", n), out)
			for i := range n {
				want := g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
				if e := math.Abs(float64(out[i] - want)); e > ulps4*math.Abs(float64(want))+1e-30 {
					t.Fatalf("swiglu: element %d is %g, want %g", i, out[i], want)
				}
			}
			sum := append([]float32(nil), g...)
			if err := l.Add(sum, u); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if sum[i] != g[i]+u[i] {
					t.Fatalf("add: element %d is %g, want %g", i, sum[i], g[i]+u[i])
				}
			}
		}
	})
}

// TestElementwiseErrors checks that mismatched lengths are refused in Go.
func TestElementwiseErrors(t *testing.T) {
	l := loadLib(t)
	x := make([]float32, 16)
	cases := []struct {
		name string
		err  error
	}{
		{"rmsnorm weight", l.RMSNorm(x, x, x[:3], 4, 1e-5)},
		{"rmsnorm out", l.RMSNorm(x[:8], x, x[:4], 4, 1e-5)},
		{"rope odd dim", l.RoPE(x, 2, 8, 7, []int32{0}, 1e4, 1, nil, false)},
		{"rope rows", l.RoPE(x, 2, 8, 8, []int32{0, 1}, 1e4, 1, nil, false)},
		{"rope freqs", l.RoPE(x, 2, 8, 8, []int32{0}, 1e4, 1, x[:3], false)},
		{"rope base", l.RoPE(x, 2, 8, 8, []int32{0}, 0, 1, nil, false)},
		{"swiglu", l.SwiGLU(x, x[:4], x)},
		{"add", l.Add(x, x[:4])},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}
