package kvstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestWHT checks the rotation: applied twice it gives back its input
// (H/sqrt(R) is symmetric orthonormal) and it keeps a vector's length,
// within float32 rounding, for every block size and for head dims whose
// blocks are shorter than the head.
func TestWHT(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	for _, D := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 24, 33, 40, 96} {
		t.Run(fmt.Sprint("D", D), func(t *testing.T) {
			R := whtBlock(D)
			if R&(R-1) != 0 || D%R != 0 || (D/R)%2 == 0 {
				t.Fatalf("whtBlock(%d) = %d, not the largest power of two dividing it", D, R)
			}
			for range 20 {
				x := make([]float32, D)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
				}
				y := append([]float32(nil), x...)
				rotateHead(y)
				var nx, ny, e2 float64
				for i := range x {
					nx += float64(x[i]) * float64(x[i])
					ny += float64(y[i]) * float64(y[i])
				}
				z := append([]float32(nil), y...)
				rotateHead(z)
				for i := range x {
					e2 += float64(z[i]-x[i]) * float64(z[i]-x[i])
				}
				tol := 1e-6 * float64(1+bitsLen(R)) // a few ulps a butterfly stage
				if math.Abs(math.Sqrt(ny)-math.Sqrt(nx)) > tol*math.Sqrt(nx) {
					t.Errorf("rotation changed the length: %g -> %g", math.Sqrt(nx), math.Sqrt(ny))
				}
				if math.Sqrt(e2) > 2*tol*math.Sqrt(nx) {
					t.Errorf("rotating twice is off by %g (length %g)", math.Sqrt(e2), math.Sqrt(nx))
				}
			}
			// The columns are orthonormal: each basis vector maps to a
			// column of ±1/sqrt(R) within its block.
			for j := range D {
				e := make([]float32, D)
				e[j] = 1
				rotateHead(e)
				for i, v := range e {
					want := 0.0
					if i/R == j/R {
						want = 1 / math.Sqrt(float64(R))
					}
					if math.Abs(math.Abs(float64(v))-want) > 1e-7 {
						t.Fatalf("column %d row %d is %g, want ±%g", j, i, v, want)
					}
				}
			}
		})
	}
	// The normalization is the f32 of 1/sqrt(R), as the spec writes it.
	if got := math.Float32bits(float32(1 / math.Sqrt(32))); got != 0x3e3504f3 {
		t.Errorf("1/sqrt(32) as f32 = %#x, want 0x3e3504f3", got)
	}
}

func bitsLen(n int) int {
	b := 0
	for ; n > 1; n >>= 1 {
		b++
	}
	return b
}

// TestNLCode checks the codebook's coding: the nearest level, a value
// exactly between two levels taking the lower, NaN 0.
func TestNLCode(t *testing.T) {
	for k := range 15 {
		m := nlMid[k]
		if float64(m) != (float64(nlTable[k])+float64(nlTable[k+1]))/2 {
			t.Fatalf("midpoint %d is %g", k, m)
		}
		for _, tc := range []struct {
			u    float32
			want uint8
		}{
			{m, uint8(k)}, // a tie: the lower level
			{math.Nextafter32(m, 1000), uint8(k + 1)}, // just above: the upper
			{math.Nextafter32(m, -1000), uint8(k)},
			{nlTable[k], uint8(k)},
			{nlTable[k+1], uint8(k + 1)},
		} {
			if got := nlCode(tc.u); got != tc.want {
				t.Errorf("nlCode(%v) = %d, want %d", tc.u, got, tc.want)
			}
		}
	}
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		u    float32
		want uint8
	}{{0, 8}, {float32(math.Copysign(0, -1)), 8}, {-inf, 0}, {inf, 15}, {float32(math.NaN()), 0}, {-1000, 0}, {1000, 15}, {127, 15}, {-127, 0}} {
		if got := nlCode(tc.u); got != tc.want {
			t.Errorf("nlCode(%v) = %d, want %d", tc.u, got, tc.want)
		}
	}
	// Against brute force: the nearest level, the lower on a tie.
	rng := rand.New(rand.NewPCG(5, 5))
	for range 10000 {
		u := float32(rng.Float64()*300 - 150)
		best := 0
		for k := range nlTable {
			if math.Abs(float64(u-nlTable[k])) < math.Abs(float64(u-nlTable[best])) {
				best = k
			}
		}
		if got := nlCode(u); int(got) != best {
			t.Fatalf("nlCode(%v) = %d, nearest level is %d", u, got, best)
		}
	}
}

// groupCases are value groups the int4 searches must handle.
func groupCases() map[string][]float32 {
	rng := rand.New(rand.NewPCG(9, 1))
	normal := func(n int, mean, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + sd*rng.NormFloat64())
		}
		return x
	}
	outlier := normal(16, 0, 1)
	outlier[5] = 40
	return map[string][]float32{
		"normal 16":     normal(16, 0, 1),
		"normal 32":     normal(32, 0.3, 2),
		"offset":        normal(16, 50, 0.5),
		"negative":      normal(16, -7, 0.1),
		"tiny":          normal(16, 0, 1e-6),
		"subnormal f16": normal(8, 0, 1e-7),
		"outlier":       outlier,
		"constant":      {2.5, 2.5, 2.5, 2.5},
		"zeros":         make([]float32, 16),
		"one value":     {-3.25},
		"two values":    {-1, 1e3},
		"huge":          normal(16, 0, 1e5),
		"long":          normal(256, 1, 1),
	}
}

// keyCandidates lists the (zero code, scale code) pairs the key search
// tries, in its order.
func keyCandidates(xs []float32) [][2]int {
	mn, mx := xs[0], xs[0]
	for _, v := range xs {
		mn, mx = min(mn, v), max(mx, v)
	}
	var out [][2]int
	z0 := e5m4SNear(mn)
	for zi := z0 - 1; zi <= z0+1; zi++ {
		if zi < -e5m4Max || zi > e5m4Max {
			continue
		}
		s0 := e5m4Near(float32(mx-e5m4Val(zi)) / 15)
		for si := s0 - 1; si <= s0+1; si++ {
			if si >= 0 && si <= e5m4Max {
				out = append(out, [2]int{zi, si})
			}
		}
	}
	return out
}

func keyCandSSE(xs []float32, zi, si int) float32 {
	s, z := e5m4Val(si), e5m4Val(zi)
	var id float32
	if s != 0 {
		id = 1 / s
	}
	codes := make([]uint8, len(xs))
	return keySSE(xs, s, id, z, codes)
}

// TestInt4KeySearch checks the key channel search: it keeps the first
// candidate with the smallest squared error (never worse than the first
// one tried, nor than the nearest codes), its stored codes decode to the
// kept scale and zero point, its codes are the ones the error was measured
// with, and each value's error is within the bound of the nearest
// candidate's squared error.
func TestInt4KeySearch(t *testing.T) {
	for name, xs := range groupCases() {
		t.Run(name, func(t *testing.T) {
			codes := make([]uint8, len(xs))
			sc, zc, best := int4KeySearch(xs, codes)
			cands := keyCandidates(xs)
			minE, minAt := float32(math.Inf(1)), -1
			for i, c := range cands {
				if e := keyCandSSE(xs, c[0], c[1]); e < minE {
					minE, minAt = e, i
				}
			}
			if first := keyCandSSE(xs, cands[0][0], cands[0][1]); best > first {
				t.Errorf("kept squared error %g is worse than the first candidate's %g", best, first)
			}
			if best != minE {
				t.Errorf("kept squared error %g, the smallest candidate's is %g", best, minE)
			}
			wz, ws := cands[minAt][0], cands[minAt][1]
			s, z := int4KeyVals(sc, zc)
			if s != e5m4Val(ws) || z != e5m4Val(wz) {
				t.Errorf("kept scale %g zero %g, want candidate %d's %g, %g", s, z, minAt, e5m4Val(ws), e5m4Val(wz))
			}
			if (zc>>9 != 0) != (wz < 0) || int(zc&0x1ff) != max(wz, -wz) {
				t.Errorf("zero code stored as %#x for signed code %d", zc, wz)
			}
			// The meta bytes hold what was stored, for every channel slot.
			for _, D := range []int{1, 7, 8, 9, 33} {
				meta := make([]byte, keyMetaBytes(D))
				for d := range D {
					setInt4KeyCodes(meta, D, d, sc^uint16(d), zc^uint16(d*3)&0x3ff)
				}
				for d := range D {
					gs, gz := int4KeyCodes(meta, D, d)
					if gs != sc^uint16(d) || gz != zc^uint16(d*3)&0x3ff {
						t.Fatalf("D %d channel %d: read back codes %#x %#x", D, d, gs, gz)
					}
				}
			}
			var e2 float64
			for i, v := range xs {
				got := float32(float32(codes[i])*s) + z
				e2 += float64(got-v) * float64(got-v)
			}
			if math.Abs(e2-float64(best)) > 1e-4*float64(best)+1e-30 {
				t.Errorf("decoded squared error %g, search measured %g", e2, best)
			}
			// The nearest candidate (z0, s0) codes each value within b.
			mn, mx := xs[0], xs[0]
			for _, v := range xs {
				mn, mx = min(mn, v), max(mx, v)
			}
			zerr := math.Abs(float64(mn))/30 + 0x1p-18
			r := float64(mx-mn) + zerr
			b := 0.5*(r/15*(1+1.0/30)+0x1p-18) + math.Max(zerr, r/30+15*0x1p-18) + 1e-7
			for i, v := range xs {
				got := float32(float32(codes[i])*s) + z
				if e := math.Abs(float64(got - v)); e > b*math.Sqrt(float64(len(xs)))*(1+1e-5) {
					t.Errorf("value %d: %g read as %g, error %g over the bound %g", i, v, got, e, b*math.Sqrt(float64(len(xs))))
				}
			}
		})
	}
}

// TestInt4ValueSearch checks the value group search the same way: never
// worse than the first candidate (c0-3, +) nor the nearest (c0, +), the
// first smallest of all 14, and the group's errors bounded.
func TestInt4ValueSearch(t *testing.T) {
	for name, xs := range groupCases() {
		t.Run(name, func(t *testing.T) {
			b := nlScale(xs)
			a := absMax(xs)
			if a == 0 {
				if b != 0 {
					t.Fatalf("all-zero group got scale %#x, want 0", b)
				}
				return
			}
			c0 := min((int(f16Finite(a/127))+0x80)>>8, maxZero8)
			var cands []uint8
			for sc := max(c0-3, 1); sc <= min(c0+3, maxZero8); sc++ {
				cands = append(cands, uint8(sc), 0x80|uint8(sc))
			}
			best := nlSSE(xs, z8f(b))
			minE, minAt := float32(math.Inf(1)), -1
			for i, c := range cands {
				if e := nlSSE(xs, z8f(c)); e < minE {
					minE, minAt = e, i
				}
			}
			if first := nlSSE(xs, z8f(cands[0])); best > first {
				t.Errorf("kept squared error %g over the first candidate's %g", best, first)
			}
			if near := nlSSE(xs, z8f(uint8(c0))); c0 > 0 && best > near {
				t.Errorf("kept squared error %g over the nearest scale's %g", best, near)
			}
			if b != cands[minAt] {
				t.Errorf("kept scale %#x, want the first smallest, %#x", b, cands[minAt])
			}
			if b&0x7f < 1 || b&0x7f > maxZero8 {
				t.Errorf("scale code %#x out of range", b)
			}
			d := z8f(b)
			// The smallest scale code is 2^-16: values past a tiny group's
			// nearest level by about that.
			bound := 30 * (math.Max(1.126*float64(a)/127, 0x1p-16) + 0x1p-24) * math.Sqrt(float64(len(xs)))
			for i, v := range xs {
				got := d * nlTable[nlCode(float32(v*(1/d)))]
				if e := math.Abs(float64(got - v)); e > bound {
					t.Errorf("value %d: %g read as %g, error %g over %g", i, v, got, e, bound)
				}
			}
		})
	}
}

// TestInt4SaveLoad saves int4 blocks (partial and full, head dims whose bit
// planes have unused bits, several key and value groups) and loads them
// into another block: it reads back the same bits and saves the same
// bytes, and the metadata sits where the layout says.
func TestInt4SaveLoad(t *testing.T) {
	for _, c := range []Config{
		{Layers: 2, KVHeads: 4, HeadDim: 8, BlockSize: 32, Blocks: 3},
		{Layers: 2, KVHeads: 1, HeadDim: 32, BlockSize: 16, Blocks: 3},
		{Layers: 1, KVHeads: 2, HeadDim: 12, BlockSize: 20, Blocks: 3, KeyGroup: 8, ValueGroup: 10},
		{Layers: 1, KVHeads: 3, HeadDim: 33, BlockSize: 9, Blocks: 3, KeyGroup: 4},
	} {
		c.K, c.V = Int4, Int4
		for _, n := range []int{c.BlockSize, c.BlockSize - 3, 1} {
			t.Run(fmt.Sprintf("H%dD%dB%d/n%d", c.KVHeads, c.HeadDim, c.BlockSize, n), func(t *testing.T) {
				s, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				keys, vals := gen(c, 21, c.BlockSize)
				fill(s, 0, keys, vals, 0, n)
				saved := s.Save(0, nil)
				if string(saved[:4]) != "KVB3" {
					t.Fatalf("saved magic %q, want KVB3", saved[:4])
				}
				if err := s.Load(2, saved); err != nil {
					t.Fatal(err)
				}
				if !sameBits(readBlock(s, 2, n), readBlock(s, 0, n)) {
					t.Error("loaded block reads differently")
				}
				if again := s.Save(2, nil); string(again) != string(saved) {
					t.Error("loaded block saves differently")
				}
				// Layer 0's key metadata follows its data; a full group's
				// codes decode to the plane's scales and zero points.
				kp := s.k.(*keyPlane)
				at := headerLen + kp.sh.data
				if kp.sh.scales != c.KVHeads*kp.sh.groups*keyMetaBytes(c.HeadDim) {
					t.Fatalf("key scales per block %d", kp.sh.scales)
				}
				if string(saved[at:at+kp.sh.scales]) != string(kp.scale[:kp.sh.scales]) {
					t.Error("saved key metadata is not the plane's scale bytes")
				}
				r := s.RawK()
				if r.ScalesPerBlock != kp.sh.scales || len(r.Scale8) != kp.sh.scales*c.Layers*c.Blocks {
					t.Error("Raw describes the wrong scale size")
				}
				if rv := s.RawV(); rv.ScalesPerBlock != c.BlockSize*rv.Groups || rv.Group != c.valueGroup() {
					t.Errorf("Raw V: %d scales a block, group %d", rv.ScalesPerBlock, rv.Group)
				}
			})
		}
	}
}

// TestLoadOldLayout checks that a block saved before int4 v3 (magic KVB2,
// 8-bit int4 scales and zero points) or by a later layout is refused with
// an error that says so.
func TestLoadOldLayout(t *testing.T) {
	for _, p := range []Precision{Int4, Int8, F16} {
		c := stories(16, 2, p, p)
		s, _ := New(c)
		keys, vals := gen(c, 1, 16)
		fill(s, 0, keys, vals, 0, 16)
		for _, magic := range []string{"KVB2", "KVB1", "KVB4"} {
			data := s.Save(0, nil)
			copy(data, magic)
			err := s.Load(1, data)
			if err == nil || !strings.Contains(err.Error(), magic) || !strings.Contains(err.Error(), "KVB3") {
				t.Errorf("%v: Load of a %s block: error %v, want one naming %s and KVB3", p, magic, err, magic)
			}
		}
	}
}
