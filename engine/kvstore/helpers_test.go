package kvstore

import (
	"math"
	"math/rand/v2"
)

// allPrecisions lists every precision, in order.
var allPrecisions = []Precision{F32, F16, BF16, Q8_0, Int8, Int4, FP8}

// stories is stories260K's K/V shape.
func stories(blockSize, blocks int, k, v Precision) Config {
	return Config{Layers: 5, KVHeads: 4, HeadDim: 8, BlockSize: blockSize, Blocks: blocks, K: k, V: v}
}

// keyGen makes key-like rows: every channel has its own offset and spread,
// and a few channels carry outliers ten to twenty times larger, as real keys
// do.
type keyGen struct {
	rng          *rand.Rand
	mean, spread []float32
}

func newKeyGen(seed uint64, row int) *keyGen {
	g := &keyGen{rng: rand.New(rand.NewPCG(seed, 7)), mean: make([]float32, row), spread: make([]float32, row)}
	for i := range row {
		g.mean[i] = float32(g.rng.NormFloat64() * 0.5)
		g.spread[i] = float32(0.5 + g.rng.Float64())
		if i%7 == 3 { // outlier channel
			g.mean[i] *= 15
			g.spread[i] *= 10
		}
	}
	return g
}

// row returns one token's row.
func (g *keyGen) row() []float32 {
	x := make([]float32, len(g.mean))
	for i := range x {
		x[i] = g.mean[i] + g.spread[i]*float32(g.rng.NormFloat64())
	}
	return x
}

// valueRow returns a value-like row: zero-mean, unit spread, no outliers.
func (g *keyGen) valueRow() []float32 {
	x := make([]float32, len(g.mean))
	for i := range x {
		x[i] = float32(g.rng.NormFloat64())
	}
	return x
}

// sameBits reports whether a and b are bit-for-bit equal.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// relRMS returns the RMS of got-want over the RMS of want.
func relRMS(got, want []float32) float64 {
	var e, w float64
	for i := range want {
		d := float64(got[i] - want[i])
		e += d * d
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(e / w)
}

// fill writes rows[t] as both K (keys) and V (vals) of tokens 0..len-1 of
// block b, in every layer; layer l's rows are offset by l so layers differ.
func fill(s *Store, b int, keys, vals [][]float32, from, to int) {
	for t := from; t < to; t++ {
		for l := range s.Config().Layers {
			s.Write(l, b, t, shift(keys[t], l), shift(vals[t], l))
		}
	}
}

// shift returns x with l*0.25 added to each value.
func shift(x []float32, l int) []float32 {
	if l == 0 {
		return x
	}
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = v + float32(l)*0.25
	}
	return y
}

// gen returns n key-like and n value-like rows for c.
func gen(c Config, seed uint64, n int) (keys, vals [][]float32) {
	g := newKeyGen(seed, c.KVHeads*c.HeadDim)
	for range n {
		keys = append(keys, g.row())
		vals = append(vals, g.valueRow())
	}
	return keys, vals
}

// readAll reads K and V of the first n tokens of block b, layer l, and
// returns them as rows [t][h*HeadDim+d].
func readAll(s *Store, l, b, n int) (keys, vals [][]float32) {
	c := s.Config()
	D, H := c.HeadDim, c.KVHeads
	dk := make([]float32, H*n*D)
	dv := make([]float32, H*n*D)
	s.ReadK(l, b, n, dk)
	s.ReadV(l, b, n, dv)
	for t := range n {
		k := make([]float32, H*D)
		v := make([]float32, H*D)
		for h := range H {
			copy(k[h*D:], dk[(h*n+t)*D:(h*n+t+1)*D])
			copy(v[h*D:], dv[(h*n+t)*D:(h*n+t+1)*D])
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals
}

// errBounds returns, for every value of rows (a block's tokens, all written),
// the largest error precision p may make on it as keys (key true) or values,
// derived from the layout the package documents. Exact precisions give nil.
func errBounds(c Config, p Precision, key bool, rows [][]float32) [][]float64 {
	n, row, D := len(rows), c.KVHeads*c.HeadDim, c.HeadDim
	out := make([][]float64, n)
	for t := range out {
		out[t] = make([]float64, row)
	}
	// e5m3 is the most an E5M3 scale rounded up exceeds s by (a relative
	// step of 1/8, or the smallest code 2^-17).
	e5m3 := func(s float64) float64 { return 1.125*s + 0x1p-17 }
	// asym bounds an Int4 key channel's error. The search's candidate
	// (z0, s0) has its zero point z the E5M4 code nearest the minimum
	// (within |min|/32, taken as /30 for f16's rounding first), its scale
	// s the E5M4 code nearest (max-z)/15, and codes clamp: a value below z
	// clips by at most |min|/30, one above z+15s by at most (max-z)/30; so
	// each of its n errors is at most b. The kept codes' squared error is
	// no larger than that candidate's, n*b^2, which bounds each error by
	// sqrt(n)*b.
	asym := func(vals []float64) float64 {
		mn, mx := vals[0], vals[0]
		for _, v := range vals {
			mn, mx = math.Min(mn, v), math.Max(mx, v)
		}
		zerr := math.Abs(mn)/30 + 0x1p-18
		r := mx - mn + zerr // the most max-z can be
		s := r/15*(1+1.0/30) + 0x1p-18
		b := 0.5*s*(1+1e-6) + math.Max(zerr, r/30+15*0x1p-18) + 1e-7
		return b * math.Sqrt(float64(len(vals))) * (1 + 1e-5)
	}
	// nl bounds the error of one head's Int4 values (rows[t][lo:lo+D]). In
	// the rotated domain the candidate scale d nearest amax/127 (within an
	// eighth, and f16's rounding) codes each value v within 30d: the
	// table's widest half gap is 12 levels, and |v/d| may reach
	// 127*1.126, past 113 by 30. The kept scale's squared error is no
	// larger, and the inverse rotation is orthonormal, so a head's error
	// vector is no longer than the root of its groups' n*(30d)^2 (with
	// rounding slack of the transforms).
	nl := func(t, lo int) float64 {
		G, row := c.valueGroup(), c.KVHeads*D
		y := append([]float32(nil), rows[t]...)
		for h := range c.KVHeads {
			rotateHead(y[h*D : (h+1)*D])
		}
		var e2, norm float64
		for g := lo / G; g*G < lo+D; g++ {
			hi := min(g*G+G, row)
			a := 0.0
			for _, v := range y[g*G : hi] {
				a = math.Max(a, math.Abs(float64(v)))
			}
			b := 30 * (math.Max(1.126*a/127, 0x1p-16) + 0x1p-24) // the smallest scale code is 2^-16
			e2 += float64(hi-g*G) * b * b
		}
		for _, v := range rows[t][lo : lo+D] {
			norm += float64(v) * float64(v)
		}
		return math.Sqrt(e2)*(1+1e-5) + 1e-5*math.Sqrt(norm) + 1e-7
	}
	absMax := func(vals []float64) float64 {
		m := 0.0
		for _, v := range vals {
			m = math.Max(m, math.Abs(v))
		}
		return m
	}
	// sym bounds a symmetric code's error at scale s for value v.
	sym := func(v, s float64) float64 {
		if p == FP8 { // 3 mantissa bits; subnormals step 2^-9 of the scale
			return math.Abs(v)/16 + s/1024 + 1e-7
		}
		return 0.5*s*(1+1e-6) + 1e-7
	}
	// rowGroups applies bound to each group of size G along every token's row.
	rowGroups := func(G int, bound func(vals []float64, i int) float64) {
		for t := range n {
			for lo := 0; lo < row; lo += G {
				hi := min(lo+G, row)
				vals := make([]float64, 0, G)
				for _, v := range rows[t][lo:hi] {
					vals = append(vals, float64(v))
				}
				for i := lo; i < hi; i++ {
					out[t][i] = bound(vals, i-lo)
				}
			}
		}
	}
	switch {
	case p == F32 || p == F16 || p == BF16:
		return nil
	case p == Q8_0:
		rowGroups(min(32, row), func(v []float64, _ int) float64 { return 0.57*absMax(v)/127 + 1e-6 })
	case key: // Int8, Int4, FP8 keys: per channel across each key group of tokens
		KG, qm := c.keyGroup(), float64(qmax(p))
		for lo := 0; lo < n; lo += KG {
			hi := min(lo+KG, n)
			chans := make([][]float64, row)
			for i := range row {
				for t := lo; t < hi; t++ {
					chans[i] = append(chans[i], float64(rows[t][i]))
				}
			}
			for h := range c.KVHeads {
				top := 0.0 // the head's largest magnitude, for the base scale
				for i := h * D; i < (h+1)*D; i++ {
					top = math.Max(top, absMax(chans[i]))
				}
				for i := h * D; i < (h+1)*D; i++ {
					// The channel's scale: amax/qmax, its multiplier rounded
					// up by at most a sixteenth of the base.
					s := absMax(chans[i])/qm + e5m3(top/qm)/16
					// Keys are quantized from their f16 residual: add its
					// rounding, a half ulp of the channel's largest.
					f16 := absMax(chans[i]) / 1024
					for t := lo; t < hi; t++ {
						if p == Int4 {
							out[t][i] = asym(chans[i]) + f16
						} else {
							out[t][i] = sym(float64(rows[t][i]), s) + f16
						}
					}
				}
			}
		}
	case p == Int4:
		for t := range n {
			for lo := 0; lo < row; lo += D {
				b := nl(t, lo)
				for i := lo; i < lo+D; i++ {
					out[t][i] = b
				}
			}
		}
	default: // Int8, FP8 values: per token, groups along the row, symmetric
		qm := float64(qmax(p))
		rowGroups(c.valueGroup(), func(v []float64, i int) float64 {
			b := sym(v[i], e5m3(absMax(v)/qm))
			if p == Int8 {
				// int8Scale may take the code below scaleUp's, at least
				// amax/127/1.125: a value past 127 of its steps clips to it.
				b += math.Max(0, math.Abs(v[i])-absMax(v)/1.125)
			}
			return b
		})
	}
	return out
}
