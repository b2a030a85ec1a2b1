package quant

import (
	"math"
	"testing"
)

func isHalfNaN(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// TestF16RoundTripAll converts every half to float32 and back.
func TestF16RoundTripAll(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToF32(h)
		if got := math.Float32bits(f16Table[h]); got != math.Float32bits(f) {
			t.Fatalf("f16Table[%#04x] = %#08x, F16ToF32 = %#08x", h, got, math.Float32bits(f))
		}
		back := F32ToF16(f)
		if isHalfNaN(h) {
			if !isHalfNaN(back) || f == f {
				t.Fatalf("NaN %#04x: F16ToF32 = %v, back = %#04x", h, f, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x (via %v)", h, back, f)
		}
	}
}

// TestF16Values checks conversions against values worked out by hand.
func TestF16Values(t *testing.T) {
	tests := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                 // largest half
		{65519, 0x7bff},                 // rounds down
		{65520, 0x7c00},                 // halfway to 65536: ties to even overflows to +Inf
		{1e6, 0x7c00},                   // overflow
		{-1e6, 0xfc00},                  //
		{float32(math.Inf(1)), 0x7c00},  //
		{0x1p-14, 0x0400},               // smallest normal
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // halfway to it: ties to even (0)
		{0x1.8p-25, 0x0001},             // above halfway
		{0x3p-24, 0x0003},               // subnormal, exact
		{0x1.8p-23, 0x0003},             // 1.5 ulp-of-subnormal ×2: 3 exactly
		{0x5p-25, 0x0002},               // 2.5 subnormal ulps: ties to even (2)
		{0x7p-25, 0x0004},               // 3.5 subnormal ulps: ties to even (4)
		{1 + 0x1p-11, 0x3c00},           // halfway between 1 and next: even
		{1 + 0x3p-11, 0x3c02},           // halfway between 0x3c01 and 0x3c02: even
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // just above halfway
		{0.1, 0x2e66},                   //
		{0x1.ffcp-15, 0x0400},           // subnormal rounding up into the smallest normal
		{1e-8, 0x0000},                  // underflow
		{-0x1p-24, 0x8001},              //
	}
	for _, tc := range tests {
		if got := F32ToF16(tc.f); got != tc.h {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	back := []struct {
		h uint16
		f float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 0x1p-24}, {0x03ff, 0x3ffp-24}, {0x3555, 0x1.554p-2}}
	for _, tc := range back {
		if got := F16ToF32(tc.h); got != tc.f {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", tc.h, got, tc.f)
		}
	}
	if h := F32ToF16(float32(math.NaN())); !isHalfNaN(h) {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
	if f := F16ToF32(0x7c00); !math.IsInf(float64(f), 1) {
		t.Errorf("F16ToF32(0x7c00) = %g, want +Inf", f)
	}
}

// TestBF16 checks bfloat16: every non-NaN value survives a round trip, and
// rounding is to nearest, ties to even.
func TestBF16(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		back := F32ToBF16(f)
		if f != f {
			if g := BF16ToF32(back); g == g {
				t.Fatalf("NaN %#04x came back as %#04x, not NaN", h, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, back)
		}
	}
	tests := []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80},
		{-3, 0xc040},
		{3.140625, 0x4049},
		{1 + 0x1p-8, 0x3f80},            // halfway: even
		{1 + 0x3p-8, 0x3f82},            // halfway: even
		{1 + 0x1p-8 + 0x1p-20, 0x3f81},  // above halfway
		{math.MaxFloat32, 0x7f80},       // rounds up to +Inf
		{float32(math.Inf(-1)), 0xff80}, //
	}
	for _, tc := range tests {
		if got := F32ToBF16(tc.f); got != tc.h {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	if f := BF16ToF32(F32ToBF16(float32(math.NaN()))); f == f {
		t.Errorf("F32ToBF16(NaN) is not NaN")
	}
}

// TestHalfAt checks the arithmetic half reader against F16ToF32 on every
// one of the 65536 halves.
func TestHalfAt(t *testing.T) {
	for h := range 1 << 16 {
		got := halfAt([]byte{byte(h), byte(h >> 8)})
		want := F16ToF32(uint16(h))
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("halfAt(%#04x) = %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
	}
}
