package kvstore

import (
	"math"

	"kvscope/engine/quant"
)

// h2f converts an f16, given as its bits, to float32 exactly, as
// quant.F16ToF32 does, small enough to inline. A normal half only needs its
// exponent rebiased. For zeros and subnormals, the half's bits placed in a
// float32 are its value times 2^-112, so one exact multiplication by 2^112
// finishes them; infinities and NaN need their exponent field filled.
func h2f(h uint16) float32 {
	o := uint32(h&0x7fff) << 13
	switch e := h & 0x7c00; {
	case e == 0x7c00:
		o += 0x70000000 // (255-31)<<23
	case e != 0:
		o += 0x38000000 // (127-15)<<23
	default:
		o = math.Float32bits(math.Float32frombits(o) * 0x1p112)
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// maxF16 is the largest finite half-precision value.
const maxF16 = 65504

// f16 rounds x to half precision (ties to even) and returns its bits.
func f16(x float32) uint16 { return quant.F32ToF16(x) }

// f16Finite rounds x to a finite half, saturating at ±65504, with NaN as 0
// (scales and zero points must stay finite).
func f16Finite(x float32) uint16 {
	if x != x {
		return 0
	}
	if x > maxF16 {
		x = maxF16
	} else if x < -maxF16 {
		x = -maxF16
	}
	return quant.F32ToF16(x)
}

// fp8Max is the largest finite OCP E4M3FN value.
const fp8Max = 448

// fp8Table maps every E4M3FN byte to its float32 value: sign, 4 exponent
// bits with bias 7, 3 mantissa bits; exponent 0 is subnormal; S.1111.111 is
// NaN; there is no infinity.
var fp8Table = func() *[256]float32 {
	var t [256]float32
	for c := range 256 {
		e := (c >> 3) & 15
		m := float64(c & 7)
		var v float64
		switch {
		case c&0x7f == 0x7f:
			v = math.NaN()
		case e == 0:
			v = m / 8 * math.Ldexp(1, -6)
		default:
			v = (1 + m/8) * math.Ldexp(1, e-7)
		}
		if c&0x80 != 0 {
			v = -v
		}
		t[c] = float32(v)
	}
	return &t
}()

// fp8Encode rounds x to the nearest E4M3FN value (ties to even), saturating
// at ±448, and returns its byte. NaN encodes as 0.
func fp8Encode(x float32) uint8 {
	b := math.Float32bits(x)
	sign := uint8(b>>24) & 0x80
	a := math.Float32frombits(b &^ (1 << 31))
	switch {
	case !(a < fp8Max): // at or past the largest value, or NaN
		if a != a {
			return 0
		}
		return sign | 0x7e
	case a < 1.0/64: // subnormal range: steps of 2^-9
		v := a * 512
		q := uint8(v)
		r := v - float32(q)
		if r > 0.5 || (r == 0.5 && q&1 == 1) {
			q++ // q == 8 is the smallest normal, which the code order makes right
		}
		return sign | q
	}
	ab := math.Float32bits(a)
	e := int(ab>>23) - 127 // -6..8
	mant := ab & 0x7fffff
	code := uint32(e+7)<<3 | mant>>20
	rem := mant & 0xfffff
	if rem > 0x80000 || (rem == 0x80000 && code&1 == 1) {
		code++ // a mantissa carry moves into the exponent, which is right
	}
	if code > 0x7e {
		code = 0x7e
	}
	return sign | uint8(code)
}
