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

// TestNearCodes checks e5m4Near and e5m4SNear (Int4 keys' scale and zero
// codes) against every code: no code's value is nearer x than theirs
// (within f16's rounding of x first), and a tie takes the larger magnitude.
func TestNearCodes(t *testing.T) {
	for _, x := range []float32{0.001, 0.1, 0.3333, 1, 1.03, 1.0625, 1.1, 1.015625, 2.5, 100, 1000, 60000, 65504, 1e9, 1e-6, 1e-9} {
		for _, v := range []float32{x, -x} {
			f := h2f(f16Finite(v))
			if v > 0 {
				c := e5m4Near(v)
				for k := range e5m4Max + 1 {
					if d := math.Abs(float64(e5m4Val(k) - f)); d < math.Abs(float64(e5m4Val(c)-f)) {
						t.Errorf("e5m4Near(%g) = %#x (%g), but code %#x (%g) is nearer", v, c, e5m4Val(c), k, e5m4Val(k))
						break
					}
				}
			} else if e5m4Near(v) != 0 {
				t.Errorf("e5m4Near(%g) = %#x, want 0", v, e5m4Near(v))
			}
			z := e5m4SNear(v)
			if (z < 0) != (v < 0 && z != 0) || z < -e5m4Max || z > e5m4Max {
				t.Errorf("e5m4SNear(%g) = %d: wrong sign or out of range", v, z)
			}
			for k := -e5m4Max; k <= e5m4Max; k++ {
				if d := math.Abs(float64(e5m4Val(k) - f)); d < math.Abs(float64(e5m4Val(z)-f)) {
					t.Errorf("e5m4SNear(%g) = %d (%g), but code %d (%g) is nearer", v, z, e5m4Val(z), k, e5m4Val(k))
					break
				}
			}
		}
	}
	// 1 + 1/32 is halfway between the codes of 1 and 1 + 1/16: up.
	if got, want := e5m4Val(e5m4Near(1+1.0/32)), float32(1+1.0/16); got != want {
		t.Errorf("e5m4Near(1+1/32) decodes to %g, want %g (halves up)", got, want)
	}
	if got := e5m4SNear(float32(math.NaN())); got != 0 {
		t.Errorf("e5m4SNear(NaN) = %d, want 0", got)
	}
}

// TestInt8Scale checks int8Scale's choice: scaleUp's code or the one
// below, the one below exactly when it codes the group with a smaller
// squared error (brute force here, in float64), and both choices happen.
func TestInt8Scale(t *testing.T) {
	// 2^-7 is an E5M3 code and 1.125*2^-7 the next: amax/127 just past 2^-7
	// takes 1.125*2^-7 from scaleUp.
	const c = 127.0 / 128
	cases := []struct {
		name string
		xs   []float32
		down bool
	}{
		{"zeros", []float32{0, 0, 0}, false},
		// The largest value would clip by 11% under the code below.
		{"outlier far past the code below", []float32{1.12 * c, 0.01, -0.02, 0.015}, false},
		// The largest value clips by 0.01% under the code below, and the
		// rest are coded 11% finer.
		{"amax just past a code", []float32{1.0001 * c, -0.5, 0.31, 0.77, -0.13, 0.61, 0.052, -0.9}, true},
	}
	sse := func(xs []float32, code uint8) float64 {
		s := float64(s8f(code))
		e := 0.0
		for _, v := range xs {
			q := math.Round(float64(v) / s)
			q = math.Max(-127, math.Min(127, q))
			e += (q*s - float64(v)) * (q*s - float64(v))
		}
		return e
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := groupScale(Int8, absMax(tc.xs)).sc
			got := int8Scale(tc.xs).sc
			want := up
			if tc.down {
				want = up - 1
			}
			if got != want {
				t.Fatalf("code %#x, want %#x (scaleUp's %#x)", got, want, up)
			}
			if up > 0 && (sse(tc.xs, up-1) < sse(tc.xs, up)) != tc.down {
				t.Errorf("squared errors %g (code below) and %g (scaleUp's) disagree with the case", sse(tc.xs, up-1), sse(tc.xs, up))
			}
		})
	}
}
