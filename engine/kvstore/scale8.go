package kvstore

import "fmt"

// The 8-bit scales and zero points of Int8, Int4 and FP8 planes are f16
// values cut to their top bits, so that converting them back is a shift and
// an f16 conversion, on every backend:
//
//   - a scale is unsigned E5M3: bits 14..7 of an f16 (its sign bit dropped,
//     5 exponent bits, 3 mantissa bits), 2^-17 to 61440; Int8 and FP8
//     round it up, so that no value of its group lies past the largest
//     code (the NVFP4 rule), but an Int8 value group takes the code below
//     when it codes the group with a smaller squared error (int8Scale);
//   - a zero point (Int4 only) is E5M2, FP8's other format: bits 15..8 of
//     an f16.
//
// Int4 rounds both to the nearest code and clamps its codes (scaleNear,
// zeroNear): on stories260K and parity-llama3 that costs a quarter less KL
// than widening the range to contain every value (zero point rounded down,
// scale up).

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

// scaleNear returns the E5M3 code nearest x (ties away from zero in the
// code, saturating at 61440); 0 for x zero, negative or NaN. Int4 takes it:
// its values' codes are clamped, and on stories260K and parity-llama3 the
// nearest scale and zero point cost less than the range rounded outward.
func scaleNear(x float32) uint8 {
	if !(x > 0) {
		return 0
	}
	return uint8(min((uint32(f16Finite(x))+0x40)>>7, maxScale8))
}

// zeroNear returns the E5M2 code nearest x (f16 first, then the low byte
// rounded, ties away from zero), saturating at ±57344; 0 for NaN.
func zeroNear(x float32) uint8 {
	if x != x {
		return 0
	}
	f := f16Finite(x)
	return uint8(f>>8)&0x80 | uint8(min((uint32(f&0x7fff)+0x80)>>8, maxZero8))
}

// s8f returns an E5M3 scale code's value.
func s8f(c uint8) float32 { return h2f(uint16(c) << 7) }

// z8f returns an E5M2 zero point code's value.
func z8f(c uint8) float32 { return h2f(uint16(c) << 8) }

// checkCodes checks one layer's saved 8-bit scales (sc) and zero points
// (zp, empty when none) of shape sh: no scale code or zero point past the
// largest finite one, which would decode to an infinity or NaN. For
// symmetric keys (Int8, FP8) only each (head, group)'s first byte, the
// base, is a scale code; the multipliers after it take any value.
func (sh *shape) checkCodes(l int, sc, zp []byte) error {
	if !sh.scale8 {
		return nil
	}
	step := 1
	if sh.key && !sh.asym {
		step = keyScaleBytes(sh.rowBytes) // rowBytes is the head dim for 8-bit codes
	}
	for i := 0; i < len(sc); i += step {
		if sc[i] > maxScale8 {
			return fmt.Errorf("layer %d has scale code %#x at %d, past the largest finite %#x", l, sc[i], i, maxScale8)
		}
	}
	for i, z := range zp {
		if z&0x7f > maxZero8 {
			return fmt.Errorf("layer %d has zero point code %#x at %d, an infinity or NaN", l, z, i)
		}
	}
	return nil
}
