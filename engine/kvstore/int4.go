package kvstore

import (
	"fmt"
	"math"
)

// The int4 K/V layout, v3 (save magic KVB3), which the CPU library and the
// CUDA sources follow bit for bit. Every float operation is rounded to
// float32, in the order written here (the explicit conversions keep the
// compiler from fusing a multiply and an add).
//
// Keys: per channel over a key group, q = round((x-z)/s) in 0..15, with a
// 9-bit unsigned E5M4 scale s and a 10-bit signed E5M4 zero point z, chosen
// among the 3×3 codes around the nearest ones by squared error.
//
// Values: each head's row is rotated by a normalized Walsh–Hadamard
// transform, then coded in groups of VG with the IQ4_NL table times one
// signed E5M2 scale, chosen among 7 codes × 2 signs by squared error.

// e5m4Max is the largest finite E5M4 magnitude code (0x7bff >> 6, 61440).
const e5m4Max = 0x7bff >> 6

// e5m4Near returns the unsigned E5M4 code nearest x (f16 first, then its
// low 6 bits rounded, halves up), saturating at 61440; 0 for x zero,
// negative or NaN.
func e5m4Near(x float32) int {
	if !(x > 0) {
		return 0
	}
	return min((int(f16Finite(x))+1<<5)>>6, e5m4Max)
}

// e5m4SNear returns the signed E5M4 code nearest x as a signed integer
// (magnitude code, negative for a negative x; -0 is 0), saturating at
// ±61440; 0 for NaN.
func e5m4SNear(x float32) int {
	h := int(f16Finite(x))
	mag := min((h&0x7fff+1<<5)>>6, e5m4Max)
	if h&0x8000 != 0 {
		return -mag
	}
	return mag
}

// e5m4Val returns the value of a signed E5M4 code given as a signed
// integer (an unsigned code is its own positive integer).
func e5m4Val(c int) float32 {
	if c < 0 {
		return -h2f(uint16(-c << 6))
	}
	return h2f(uint16(c << 6))
}

// keyMetaBytes returns the metadata bytes of one (head, key group) of Int4
// keys of head dim d: the low bytes of d scale codes and d zero codes, then
// three bit planes of ceil(d/8) bytes (scale bit 8, zero bit 8, zero sign).
func keyMetaBytes(d int) int { return 2*d + 3*((d+7)/8) }

// int4KeyCodes returns channel d's scale code (9 bits) and zero code
// (10 bits, the top bits of its f16) from one (head, key group)'s metadata.
func int4KeyCodes(meta []byte, D, d int) (sc, zc uint16) {
	P := (D + 7) / 8
	bit := func(plane int) uint16 { return uint16(meta[2*D+plane*P+d>>3]>>(d&7)) & 1 }
	sc = uint16(meta[d]) | bit(0)<<8
	zc = uint16(meta[D+d]) | bit(1)<<8 | bit(2)<<9
	return sc, zc
}

// setInt4KeyCodes stores channel d's scale and zero codes into meta.
func setInt4KeyCodes(meta []byte, D, d int, sc, zc uint16) {
	P := (D + 7) / 8
	set := func(plane int, v uint16) {
		i, m := 2*D+plane*P+d>>3, byte(1)<<(d&7)
		meta[i] = meta[i]&^m | byte(v&1)<<(d&7)
	}
	meta[d], meta[D+d] = byte(sc), byte(zc)
	set(0, sc>>8)
	set(1, zc>>8)
	set(2, zc>>9)
}

// int4KeyVals returns the scale and zero point of codes sc and zc.
func int4KeyVals(sc, zc uint16) (s, z float32) { return h2f(sc << 6), h2f(zc << 6) }

// keySSE codes xs with scale s (1/s in id, 0 for a zero scale) and zero
// point z into codes and returns the squared error, summed in order.
func keySSE(xs []float32, s, id, z float32, codes []uint8) float32 {
	var e float32
	for i, v := range xs {
		q := roundUnsigned(float32(v-z)*id, 15)
		codes[i] = q
		t := float32(float32(q)*s) + z
		t -= v
		e += float32(t * t)
	}
	return e
}

// int4KeySearch chooses the codes of one key channel's values xs (token
// order, at most MaxBlockSize): among zero codes z0-1..z0+1 (z0 nearest the
// minimum) and, for each, scale codes s0-1..s0+1 (s0 nearest
// (max-z)/15), the first with the smallest squared error. It writes the
// values' codes into codes and returns the scale code, the zero code's
// stored form and the error.
func int4KeySearch(xs []float32, codes []uint8) (sc, zc uint16, best float32) {
	var tmp [MaxBlockSize]uint8
	mn, mx := xs[0], xs[0] // Go's min and max: NaN wins, -0 below +0 (C's go_min, go_max)
	for _, v := range xs[1:] {
		mn, mx = min(mn, v), max(mx, v)
	}
	z0 := e5m4SNear(mn)
	first := true
	var bz, bs int
	for zi := max(z0-1, -e5m4Max); zi <= min(z0+1, e5m4Max); zi++ {
		z := e5m4Val(zi)
		s0 := e5m4Near(float32(mx-z) / 15)
		for si := max(s0-1, 0); si <= min(s0+1, e5m4Max); si++ {
			s := e5m4Val(si)
			var id float32
			if s != 0 {
				id = 1 / s
			}
			if e := keySSE(xs, s, id, z, tmp[:len(xs)]); first || e < best {
				first, best, bz, bs = false, e, zi, si
				copy(codes, tmp[:len(xs)])
			}
		}
	}
	zc = uint16(bz)
	if bz < 0 {
		zc = 1<<9 | uint16(-bz)
	}
	return uint16(bs), zc, best
}

// checkKeyMeta checks one layer's saved Int4 key metadata: no scale or zero
// code that decodes to an infinity or NaN.
func checkKeyMeta(l, D int, meta []byte) error {
	M := keyMetaBytes(D)
	for i := 0; i+M <= len(meta); i += M {
		for d := range D {
			sc, zc := int4KeyCodes(meta[i:], D, d)
			if sc > e5m4Max {
				return fmt.Errorf("layer %d has scale code %#x at channel %d of key group %d, past the largest finite %#x", l, sc, d, i/M, e5m4Max)
			}
			if zc&0x1ff > e5m4Max {
				return fmt.Errorf("layer %d has zero point code %#x at channel %d of key group %d, an infinity or NaN", l, zc, d, i/M)
			}
		}
	}
	return nil
}

// nlTable is IQ4_NL's 16 levels; a value's code is the level nearest x/d
// for its group's signed scale d.
var nlTable = [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// nlMid holds the 15 midpoints between consecutive levels (exact halves),
// and +Inf past them so that nlCode's indices need no bounds checks.
var nlMid = func() (m [16]float32) {
	for k := range 15 {
		m[k] = (nlTable[k] + nlTable[k+1]) / 2
	}
	m[15] = float32(math.Inf(1))
	return m
}()

// nlCode returns u's code: the number of midpoints below u (a tie goes to
// the lower level, NaN to 0), found in four comparisons (the midpoints
// ascend).
func nlCode(u float32) uint8 {
	var q uint8
	if u > nlMid[7] {
		q = 8
	}
	if u > nlMid[(q+3)&15] {
		q += 4
	}
	if u > nlMid[(q+1)&15] {
		q += 2
	}
	if u > nlMid[q&15] {
		q++
	}
	return q
}

// nlSSE returns the squared error of xs coded with signed scale d, summed in
// order.
func nlSSE(xs []float32, d float32) float32 {
	id := 1 / d
	var e float32
	for _, v := range xs {
		t := float32(d*nlTable[nlCode(float32(v*id))]) - v
		e += float32(t * t)
	}
	return e
}

// nlScale chooses a rotated value group's scale byte (sign<<7 | E5M2
// magnitude code, an f16's top byte): 0 for an all-zero group, else among
// codes c0-3..c0+3 (c0 nearest amax/127, at least 1), each positive then
// negative, the first with the smallest squared error.
func nlScale(xs []float32) uint8 {
	a := absMax(xs)
	if a == 0 {
		return 0
	}
	c0 := min((int(f16Finite(a/127))+0x80)>>8, maxZero8)
	var b uint8
	var best float32
	first := true
	for sc := max(c0-3, 1); sc <= min(c0+3, maxZero8); sc++ {
		for _, sg := range [2]uint8{0, 0x80} {
			if e := nlSSE(xs, z8f(sg|uint8(sc))); first || e < best {
				first, best, b = false, e, sg|uint8(sc)
			}
		}
	}
	return b
}

// whtBlock returns the rotation block of head dim D: the largest power of
// two dividing it.
func whtBlock(D int) int { return D & -D }

// wht applies the normalized Walsh–Hadamard transform H/sqrt(len(x)) in
// place (len(x) a power of two): butterflies of stride 1, 2, 4, ...,
// (a, b) -> (a+b, a-b), then a multiply by 1/sqrt(len(x)). It is its own
// inverse (up to rounding).
func wht(x []float32) {
	R := len(x)
	if R < 2 {
		return
	}
	for h := 1; h < R; h *= 2 {
		for i := 0; i < R; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := x[j], x[j+h]
				x[j], x[j+h] = a+b, a-b
			}
		}
	}
	rs := float32(1 / math.Sqrt(float64(R)))
	for i := range x {
		x[i] *= rs
	}
}

// rotateHead rotates one head's D values in place, in blocks of
// whtBlock(D): for writing (rotate) and reading (un-rotate) alike.
func rotateHead(x []float32) {
	R := whtBlock(len(x))
	for i := 0; i < len(x); i += R {
		wht(x[i : i+R])
	}
}

// checkValueScales checks one layer's saved Int4 value scale bytes: no
// magnitude past E5M2's largest finite one.
func checkValueScales(l int, sc []byte) error {
	for i, b := range sc {
		if b&0x7f > maxZero8 {
			return fmt.Errorf("layer %d has scale code %#x at %d, an infinity or NaN", l, b, i)
		}
	}
	return nil
}
