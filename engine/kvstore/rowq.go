package kvstore

// rowPlane stores values quantized per token: each token's row of
// KVHeads*HeadDim values (head-major) is cut into groups of sh.group values,
// each with an f16 scale (and, for Int8/Int4, an f16 zero point, the group's
// minimum). It serves Q8_0 and FP8 (keys or values) and Int8/Int4 values.
//
// Per layer and block: data [kvHead][slot][rowBytes] (Int4 packs two values a
// byte, the even dim in the low nibble), scale and zero [slot][group].
type rowPlane struct {
	c     Config
	sh    shape
	data  []byte
	scale []uint16
	zero  []uint16 // nil for symmetric precisions
}

// qmax returns the largest code of an asymmetric integer precision.
func qmax(p Precision) float32 {
	if p == Int4 {
		return 15
	}
	return 255
}

func (p *rowPlane) write(l, b, t int, x []float32) {
	sh := &p.sh
	D, B, G := p.c.HeadDim, p.c.BlockSize, sh.group
	lb := l*p.c.Blocks + b
	si := lb*sh.scales + t*sh.groups
	base := lb*sh.data + t*sh.rowBytes
	stride := B * sh.rowBytes // from one head's row to the next
	for g := range sh.groups {
		lo, hi := g*G, min(g*G+G, len(x))
		xs := x[lo:hi]
		h, d := lo/D, lo%D
		off := base + h*stride
		switch sh.prec {
		case Q8_0:
			// As ggml's quantize_row_q8_0_ref: d = amax/127, q = round(x/d)
			// with the unrounded d, halves away from zero.
			dq := absMax(xs) / 127
			p.scale[si+g] = f16Finite(dq)
			var id float32
			if dq != 0 {
				id = 1 / dq
			}
			for _, v := range xs {
				p.data[off+d] = byte(roundSym(v*id, 127))
				if d++; d == D {
					d, off = 0, off+stride
				}
			}
		case FP8:
			sc := f16Finite(absMax(xs) / fp8Max)
			p.scale[si+g] = sc
			var id float32
			if s := h2f(sc); s != 0 {
				id = 1 / s
			}
			for _, v := range xs {
				p.data[off+d] = fp8Encode(v * id)
				if d++; d == D {
					d, off = 0, off+stride
				}
			}
		default: // Int8, Int4 asymmetric
			mn, mx := minMax(xs)
			qm := qmax(sh.prec)
			sc, zp := f16Finite((mx-mn)/qm), f16Finite(mn)
			p.scale[si+g], p.zero[si+g] = sc, zp
			s, m := h2f(sc), h2f(zp)
			var id float32
			if s != 0 {
				id = 1 / s
			}
			if sh.prec == Int8 {
				for _, v := range xs {
					p.data[off+d] = byte(roundUnsigned((v-m)*id, qm))
					if d++; d == D {
						d, off = 0, off+stride
					}
				}
			} else {
				for _, v := range xs {
					setNibble(p.data[off:], d, byte(roundUnsigned((v-m)*id, qm)))
					if d++; d == D {
						d, off = 0, off+stride
					}
				}
			}
		}
	}
}

func (p *rowPlane) read(l, b, n int, dst []float32) {
	sh := &p.sh
	D, H, B, G := p.c.HeadDim, p.c.KVHeads, p.c.BlockSize, sh.group
	lb := l*p.c.Blocks + b
	for h := range H {
		for t := range n {
			si := lb*sh.scales + t*sh.groups
			src := p.data[lb*sh.data+(h*B+t)*sh.rowBytes:][:sh.rowBytes]
			out := dst[(h*n+t)*D : (h*n+t+1)*D]
			// Cut the head's row where groups of the token row begin.
			for d0 := 0; d0 < D; {
				g := (h*D + d0) / G
				d1 := min((g+1)*G-h*D, D)
				s := h2f(p.scale[si+g])
				seg := out[d0:d1]
				switch sh.prec {
				case Q8_0:
					for i, q := range src[d0:d1] {
						seg[i] = float32(int8(q)) * s
					}
				case FP8:
					tab := fp8Table
					for i, q := range src[d0:d1] {
						seg[i] = tab[q] * s
					}
				case Int8:
					m := h2f(p.zero[si+g])
					for i, q := range src[d0:d1] {
						seg[i] = float32(q)*s + m
					}
				default: // Int4
					m := h2f(p.zero[si+g])
					for i := range seg {
						seg[i] = float32(getNibble(src, d0+i))*s + m
					}
				}
				d0 = d1
			}
		}
	}
}

func (p *rowPlane) copyBlock(dst, src int) {
	sh := &p.sh
	for l := range p.c.Layers {
		ld, ls := l*p.c.Blocks+dst, l*p.c.Blocks+src
		copy(p.data[ld*sh.data:(ld+1)*sh.data], p.data[ls*sh.data:(ls+1)*sh.data])
		copy(p.scale[ld*sh.scales:(ld+1)*sh.scales], p.scale[ls*sh.scales:(ls+1)*sh.scales])
		if p.zero != nil {
			copy(p.zero[ld*sh.scales:(ld+1)*sh.scales], p.zero[ls*sh.scales:(ls+1)*sh.scales])
		}
	}
}

func (p *rowPlane) save(b int, buf []byte) []byte {
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		buf = append(buf, p.data[lb*sh.data:(lb+1)*sh.data]...)
		buf = appendU16s(buf, p.scale[lb*sh.scales:(lb+1)*sh.scales])
		if p.zero != nil {
			buf = appendU16s(buf, p.zero[lb*sh.scales:(lb+1)*sh.scales])
		}
	}
	return buf
}

func (p *rowPlane) loadSize(data []byte) (int, error) {
	need := p.sh.bytes() * p.c.Layers
	if len(data) < need {
		return 0, errShort(need, len(data))
	}
	return need, nil
}

func (p *rowPlane) load(b int, data []byte) {
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		data = data[copy(p.data[lb*sh.data:(lb+1)*sh.data], data):]
		data = readU16s(p.scale[lb*sh.scales:(lb+1)*sh.scales], data)
		if p.zero != nil {
			data = readU16s(p.zero[lb*sh.scales:(lb+1)*sh.scales], data)
		}
	}
}

func (p *rowPlane) reset(int) {}

// absMax returns the largest magnitude in xs.
func absMax(xs []float32) float32 {
	var m float32
	for _, v := range xs {
		if v < 0 {
			v = -v
		}
		if v > m {
			m = v
		}
	}
	return m
}

// minMax returns the smallest and largest value in xs (non-empty).
func minMax(xs []float32) (mn, mx float32) {
	mn, mx = xs[0], xs[0]
	for _, v := range xs[1:] {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	return mn, mx
}

// roundSym rounds v to the nearest integer, halves away from zero (C's
// roundf), clamped to ±lim, and returns it as an int8 bit pattern.
func roundSym(v, lim float32) int8 {
	switch {
	case v >= lim:
		return int8(lim)
	case v <= -lim:
		return int8(-lim)
	case v >= 0:
		return int8(v + 0.5)
	case v < 0:
		return int8(v - 0.5)
	}
	return 0 // NaN
}

// roundUnsigned rounds v to the nearest integer in [0, lim] (halves up).
func roundUnsigned(v, lim float32) uint8 {
	switch {
	case v >= lim:
		return uint8(lim)
	case v > 0:
		return uint8(v + 0.5)
	}
	return 0 // negative or NaN
}

// setNibble stores q (0..15) as the d-th 4-bit value of row.
func setNibble(row []byte, d int, q byte) {
	sh := uint(d&1) * 4
	row[d>>1] = row[d>>1]&^(0xf<<sh) | q<<sh
}

// getNibble returns the d-th 4-bit value of row.
func getNibble(row []byte, d int) byte {
	return row[d>>1] >> (uint(d&1) * 4) & 0xf
}
