package kvstore

import (
	"math"
	"testing"
)

// TestScaleCodes checks scaleUp against every code's value: the smallest
// E5M3 code at or above x, saturating at the largest finite.
func TestScaleCodes(t *testing.T) {
	xs := []float32{0, -1, float32(math.NaN()), 1e-30, 0x1p-17, 0x1p-18, 1e-6, 0.001, 0.1, 0.3333, 1, 1.0625, 1.1, 2.5,
		100, 1000, 61440, 61441, 70000, float32(math.Inf(1))}
	for _, x := range xs {
		for _, v := range []float32{x, -x} {
			c := scaleUp(v)
			switch {
			case !(v > 0):
				if c != 0 {
					t.Errorf("scaleUp(%g) = %#x, want 0", v, c)
				}
			case v > s8f(maxScale8):
				if c != maxScale8 {
					t.Errorf("scaleUp(%g) = %#x, want the largest code %#x", v, c, maxScale8)
				}
			default:
				if s8f(c) < v || (c > 0 && s8f(c-1) >= v) {
					t.Errorf("scaleUp(%g) = %#x (%g), not the smallest code at or above it", v, c, s8f(c))
				}
			}
		}
	}
}

// TestNearCodes checks scaleNear and zeroNear against every code: no code's
// value is nearer x than theirs (within f16's rounding of x first).
func TestNearCodes(t *testing.T) {
	for _, x := range []float32{0.001, 0.1, 0.3333, 1, 1.03, 1.0625, 1.1, 2.5, 100, 1000, 60000, 1e-6} {
		for _, v := range []float32{x, -x} {
			f := h2f(f16Finite(v))
			if v > 0 {
				c := scaleNear(v)
				for k := range maxScale8 + 1 {
					if d := math.Abs(float64(s8f(uint8(k)) - f)); d < math.Abs(float64(s8f(c)-f)) {
						t.Errorf("scaleNear(%g) = %#x (%g), but code %#x (%g) is nearer", v, c, s8f(c), k, s8f(uint8(k)))
						break
					}
				}
			} else if scaleNear(v) != 0 {
				t.Errorf("scaleNear(%g) = %#x, want 0", v, scaleNear(v))
			}
			z := zeroNear(v)
			for k := range 256 {
				w := z8f(uint8(k))
				if uint8(k)&0x7f > maxZero8 {
					continue
				}
				if d := math.Abs(float64(w - f)); d < math.Abs(float64(z8f(z)-f)) {
					t.Errorf("zeroNear(%g) = %#x (%g), but code %#x (%g) is nearer", v, z, z8f(z), k, w)
					break
				}
			}
		}
	}
}
