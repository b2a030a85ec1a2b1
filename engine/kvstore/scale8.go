package kvstore

import "fmt"

// The 8-bit scales of Int8 and FP8 planes are f16 values cut to their top
// bits, so that converting them back is a shift and an f16 conversion, on
// every backend: unsigned E5M3, bits 14..7 of an f16 (its sign bit dropped,
// 5 exponent bits, 3 mantissa bits), 2^-17 to 61440, rounded up, so that no
// value of its group lies past the largest code (the NVFP4 rule), but an
// Int8 value group takes the code below when it codes the group with a
// smaller squared error (int8Scale). Int4's codes are cut the same way
// (int4.go): its value scales are signed E5M2 (bits 15..8, FP8's other
// format), its key scales and zero points E5M4.

// maxScale8 is the largest finite E5M3 scale code (61440); codes above it
// would be an f16 infinity or NaN.
const maxScale8 = 0xf7

// maxZero8 is the largest finite E5M2 magnitude code (57344); codes past
// it are an f16 infinity or NaN.
const maxZero8 = 0x7b

// scaleUp returns the smallest E5M3 code whose value is at least x
// (saturating at 61440); 0 for x zero, negative or NaN.
func scaleUp(x float32) uint8 {
	if !(x > 0) {
		return 0
	}
	f := f16Finite(x)
	if h2f(f) < x {
		f++ // the next half up (0x7c00, infinity, saturates below)
	}
	return uint8(min((uint32(f)+0x7f)>>7, maxScale8))
}

// s8f returns an E5M3 scale code's value.
func s8f(c uint8) float32 { return h2f(uint16(c) << 7) }

// z8f returns a signed E5M2 code's value (Int4 value scales).
func z8f(c uint8) float32 { return h2f(uint16(c) << 8) }

// checkCodes checks one layer's saved 8-bit scales, or Int4's codes, sc
// of shape sh: no scale code or zero point past the largest finite one,
// which would decode to an infinity or NaN. For symmetric keys (Int8, FP8)
// only each (head, group)'s first byte, the base, is a scale code; the
// multipliers after it take any value.
func (sh *shape) checkCodes(l int, sc []byte) error {
	switch {
	case !sh.scale8:
		return nil
	case sh.prec == Int4 && sh.key:
		return checkKeyMeta(l, sh.dim, sc)
	case sh.prec == Int4:
		return checkValueScales(l, sc)
	}
	step := 1
	if sh.key {
		step = keyScaleBytes(sh.dim)
	}
	for i := 0; i < len(sc); i += step {
		if sc[i] > maxScale8 {
			return fmt.Errorf("layer %d has scale code %#x at %d, past the largest finite %#x", l, sc[i], i, maxScale8)
		}
	}
	return nil
}
