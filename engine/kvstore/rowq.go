package kvstore

import "sync"

// rowPlane stores values quantized per token: each token's row of
// KVHeads*HeadDim values (head-major) is cut into groups of sh.group values,
// each with a scale. It serves Q8_0 (keys or values, f16 scales) and Int8,
// Int4 and FP8 values (8-bit scales). Int4 rotates each head's values
// (rotateHead) before cutting the row and codes the rotated values with the
// IQ4_NL table (int4.go); reading rotates them back.
//
// Per layer and block: data [kvHead][slot][rowBytes] (Int4 packs two values a
// byte, the even dim in the low nibble) and scale (or sc8) [slot][group].
type rowPlane struct {
	c     Config
	sh    shape
	data  []byte
	scale []uint16  // Q8_0's f16 scales; nil otherwise
	sc8   []uint8   // E5M3 scales of Int8 and FP8, signed E5M2 of Int4; nil for Q8_0
	bufs  sync.Pool // *[]float32 of a row, for Int4's rotation
}

// qmax returns the largest code magnitude of a symmetric precision: 127
// for Int8 and 448 (E4M3's largest value) for FP8.
func qmax(p Precision) float32 {
	if p == FP8 {
		return fp8Max
	}
	return 127
}

// quant8 holds one group's Int8 or FP8 scale code and the reciprocal its
// values are coded with.
type quant8 struct {
	sc uint8
	id float32 // 1/scale (0 for a zero scale)
}

// groupScale chooses an Int8 or FP8 group's 8-bit scale for values whose
// largest magnitude is amax: amax/qmax rounded up (no value clips).
func groupScale(p Precision, amax float32) quant8 {
	q := quant8{sc: scaleUp(amax / qmax(p))}
	q.setScale()
	return q
}

// setScale sets q.id from q.sc.
func (q *quant8) setScale() {
	q.id = 0
	if s := s8f(q.sc); s != 0 {
		q.id = 1 / s
	}
}

// int8Scale chooses an Int8 value group's scale for xs: the code below
// scaleUp(amax/127) when it codes xs with a smaller squared error (its
// largest values clamp at ±127), else scaleUp's. Rounding the scale up
// costs 4% of a step on average; this takes most of it back (on gen-model's
// "small" preset, a sixth of the values' KL). The errors are summed in the
// group's order, each operation rounded to float32, as every backend does.
func int8Scale(xs []float32) quant8 {
	q := groupScale(Int8, absMax(xs))
	if q.sc == 0 {
		return q
	}
	down := quant8{sc: q.sc - 1}
	down.setScale()
	if down.sse8(xs) < q.sse8(xs) {
		return down
	}
	return q
}

// sse8 returns the squared error of xs coded as Int8 under q, summed in
// order.
func (q *quant8) sse8(xs []float32) float32 {
	s := s8f(q.sc)
	var e float32
	for _, v := range xs {
		d := float32(float32(roundSym(v*q.id, 127))*s) - v
		e += float32(d * d)
	}
	return e
}

// code returns value v's code under q: an int8 bit pattern or an E4M3
// byte.
func (q *quant8) code(p Precision, v float32) uint8 {
	if p == Int8 {
		return uint8(roundSym(v*q.id, 127))
	}
	return fp8Encode(v * q.id)
}

func (p *rowPlane) write(l, b, t int, x []float32) {
	sh := &p.sh
	D, B, G := p.c.HeadDim, p.c.BlockSize, sh.group
	lb := l*p.c.Blocks + b
	si := lb*sh.scales + t*sh.groups
	base := lb*sh.data + t*sh.rowBytes
	stride := B * sh.rowBytes // from one head's row to the next
	if sh.prec == Int4 {
		bp := p.bufs.Get().(*[]float32)
		defer p.bufs.Put(bp)
		y := *bp
		copy(y, x)
		for h := range p.c.KVHeads {
			rotateHead(y[h*D : (h+1)*D])
		}
		x = y
	}
	for g := range sh.groups {
		lo, hi := g*G, min(g*G+G, len(x))
		xs := x[lo:hi]
		h, d := lo/D, lo%D
		off := base + h*stride
		if sh.prec == Q8_0 {
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
			continue
		}
		if sh.prec == Int4 {
			sc := nlScale(xs)
			p.sc8[si+g] = sc
			var id float32
			if sc != 0 {
				id = 1 / z8f(sc)
			}
			for _, v := range xs {
				c := uint8(8) // an all-zero group (scale 0) codes 0 as 8
				if sc != 0 {
					c = nlCode(float32(v * id))
				}
				setNibble(p.data[off:], d, c)
				if d++; d == D {
					d, off = 0, off+stride
				}
			}
			continue
		}
		var q quant8
		if sh.prec == Int8 {
			q = int8Scale(xs)
		} else {
			q = groupScale(sh.prec, absMax(xs))
		}
		p.sc8[si+g] = q.sc
		for _, v := range xs {
			p.data[off+d] = q.code(sh.prec, v)
			if d++; d == D {
				d, off = 0, off+stride
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
				seg := out[d0:d1]
				switch sh.prec {
				case Q8_0:
					s := h2f(p.scale[si+g])
					for i, q := range src[d0:d1] {
						seg[i] = float32(int8(q)) * s
					}
				case FP8:
					s, tab := s8f(p.sc8[si+g]), fp8Table
					for i, q := range src[d0:d1] {
						seg[i] = tab[q] * s
					}
				case Int8:
					s := s8f(p.sc8[si+g])
					for i, q := range src[d0:d1] {
						seg[i] = float32(int8(q)) * s
					}
				default: // Int4: the rotated values
					s := z8f(p.sc8[si+g])
					for i := range seg {
						seg[i] = s * nlTable[getNibble(src, d0+i)]
					}
				}
				d0 = d1
			}
			if sh.prec == Int4 {
				rotateHead(out)
			}
		}
	}
}

func (p *rowPlane) copyBlock(dst, src int) {
	sh := &p.sh
	for l := range p.c.Layers {
		ld, ls := l*p.c.Blocks+dst, l*p.c.Blocks+src
		copy(p.data[ld*sh.data:(ld+1)*sh.data], p.data[ls*sh.data:(ls+1)*sh.data])
		if p.scale != nil {
			copy(p.scale[ld*sh.scales:(ld+1)*sh.scales], p.scale[ls*sh.scales:(ls+1)*sh.scales])
		}
		if p.sc8 != nil {
			copy(p.sc8[ld*sh.scales:(ld+1)*sh.scales], p.sc8[ls*sh.scales:(ls+1)*sh.scales])
		}
	}
}

func (p *rowPlane) save(b int, buf []byte) []byte {
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		buf = append(buf, p.data[lb*sh.data:(lb+1)*sh.data]...)
		if p.scale != nil {
			buf = appendU16s(buf, p.scale[lb*sh.scales:(lb+1)*sh.scales])
		}
		if p.sc8 != nil {
			buf = append(buf, p.sc8[lb*sh.scales:(lb+1)*sh.scales]...)
		}
	}
	return buf
}

func (p *rowPlane) loadSize(data []byte) (int, error) {
	sh := &p.sh
	need := sh.bytes() * p.c.Layers
	if len(data) < need {
		return 0, errShort(need, len(data))
	}
	if sh.scale8 {
		for l := range p.c.Layers {
			at := data[l*sh.bytes()+sh.data:]
			if err := sh.checkCodes(l, at[:sh.scales]); err != nil {
				return 0, err
			}
		}
	}
	return need, nil
}

func (p *rowPlane) load(b int, data []byte) {
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		data = data[copy(p.data[lb*sh.data:(lb+1)*sh.data], data):]
		if p.scale != nil {
			data = readU16s(p.scale[lb*sh.scales:(lb+1)*sh.scales], data)
		}
		if p.sc8 != nil {
			data = data[copy(p.sc8[lb*sh.scales:(lb+1)*sh.scales], data):]
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
