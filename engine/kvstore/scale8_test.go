package kvstore

import (
	"math"
	"testing"
)

// TestScaleCodes checks the 8-bit scale and zero point codes against every
// code's value: scaleUp gives the smallest E5M3 code at or above x, zeroDown
// the largest E5M2 code at or below x, saturating at the largest finite.
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
			if v != v {
				continue
			}
			z := zeroDown(v)
			zv := z8f(z)
			switch {
			case v < -57344:
				if zv != -57344 {
					t.Errorf("zeroDown(%g) = %g, want -57344", v, zv)
				}
			case zv > v || math.IsInf(float64(zv), 0) || zv != zv:
				t.Errorf("zeroDown(%g) = %#x (%g), above it or not finite", v, z, zv)
			default:
				// No finite E5M2 value lies in (zv, v].
				for c := range 256 {
					w := z8f(uint8(c))
					if w > zv && w <= v && !math.IsInf(float64(w), 0) {
						t.Errorf("zeroDown(%g) = %g, but code %#x (%g) is larger and at most %g", v, zv, c, w, v)
						break
					}
				}
			}
		}
	}
}
