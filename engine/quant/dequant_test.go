package quant

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// The tests below build blocks byte by byte from the ggml layouts and state
// each element's expected value from the layout, independently of the
// decoders.

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// seq returns n bytes f(0), f(1), ...
func seq(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

func bit(v uint32, i int) int { return int(v >> i & 1) }

var iq4nlLevels = []float64{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// Half constants used below.
const (
	hOne     = 0x3c00 // 1
	hTwo     = 0x4000 // 2
	hHalf    = 0x3800 // 0.5
	hQuarter = 0x3400 // 0.25
	hEighth  = 0x3000 // 0.125
	h16th    = 0x2c00 // 0.0625
	hMinus1  = 0xbc00 // -1
)

type handBlock struct {
	typ  Type
	data []byte
	want func(e int) float64
}

func handBlocks() []handBlock {
	var blocks []handBlock

	// Plain types.
	f32 := cat(le32(math.Float32bits(1.5)), le32(math.Float32bits(-2)), le32(math.Float32bits(0.25)))
	blocks = append(blocks, handBlock{F32, f32, func(e int) float64 { return []float64{1.5, -2, 0.25}[e] }})
	f16 := cat(le16(0x3c00), le16(0xc000), le16(0x3555), le16(0x0001))
	blocks = append(blocks, handBlock{F16, f16, func(e int) float64 { return []float64{1, -2, 0x1.554p-2, 0x1p-24}[e] }})
	bf16 := cat(le16(0x3f80), le16(0xc040), le16(0x4049))
	blocks = append(blocks, handBlock{BF16, bf16, func(e int) float64 { return []float64{1, -3, 3.140625}[e] }})

	// Q8_0: d=0.5, q[j]=j-16.
	blocks = append(blocks, handBlock{Q8_0, cat(le16(hHalf), seq(32, func(j int) byte { return byte(int8(j - 16)) })),
		func(e int) float64 { return 0.5 * float64(e-16) }})

	// 4-bit nibbles: byte j holds element j (low) and element j+16 (high).
	nib := seq(16, func(j int) byte { return byte(j) | byte(15-j)<<4 })
	nibVal := func(e int) int {
		if e < 16 {
			return e
		}
		return 15 - (e - 16)
	}
	blocks = append(blocks, handBlock{Q4_0, cat(le16(hTwo), nib), func(e int) float64 { return 2 * float64(nibVal(e)-8) }})
	nib41 := seq(16, func(j int) byte { return byte(j) | byte(3*j%16)<<4 })
	blocks = append(blocks, handBlock{Q4_1, cat(le16(hHalf), le16(hMinus1), nib41), func(e int) float64 {
		q := e
		if e >= 16 {
			q = 3 * (e - 16) % 16
		}
		return 0.5*float64(q) - 1
	}})
	blocks = append(blocks, handBlock{IQ4_NL, cat(le16(hHalf), nib), func(e int) float64 { return 0.5 * iq4nlLevels[nibVal(e)] }})

	// Q5: qh bit e is element e's fifth bit.
	const qh50, qh51 = 0xA5A5F00F, 0x12345678
	blocks = append(blocks, handBlock{Q5_0, cat(le16(hOne), le32(qh50), nib), func(e int) float64 {
		return float64(nibVal(e) + 16*bit(qh50, e) - 16)
	}})
	blocks = append(blocks, handBlock{Q5_1, cat(le16(hQuarter), le16(hTwo), le32(qh51), nib), func(e int) float64 {
		return 0.25*float64(nibVal(e)+16*bit(qh51, e)) + 2
	}})

	// Q2_K: scales[s] = scale | min<<4 for 16-element sub-block s; element
	// e = 128h + 32j + l takes bits 2j of qs[32h+l].
	q2scales := seq(16, func(s int) byte { return byte(s) | byte(7*s%16)<<4 })
	q2qs := seq(64, func(i int) byte { return byte(i*37 + 11) })
	blocks = append(blocks, handBlock{Q2_K, cat(q2scales, q2qs, le16(hHalf), le16(hQuarter)), func(e int) float64 {
		h, j, l := e/128, e%128/32, e%32
		s := e / 16
		q := int(q2qs[32*h+l]) >> (2 * j) & 3
		return 0.5*float64(s)*float64(q) - 0.25*float64(7*s%16)
	}})

	// Q3_K: 6-bit scales v[s] (minus 32); low nibbles in bytes 0-7 (s<8 low
	// half, s>=8 high half of byte s-8), top 2 bits in byte 8+s%4 at bit
	// 2*(s/4). Element e = 128h+32j+l: low bits 2j of qs[32h+l], high bit
	// 4h+j of hmask[l] (clear means subtract 4).
	v3 := func(s int) int { return (s*5 + 3) % 64 }
	q3sc := make([]byte, 12)
	for s := 0; s < 16; s++ {
		v := byte(v3(s))
		if s < 8 {
			q3sc[s] |= v & 15
		} else {
			q3sc[s-8] |= (v & 15) << 4
		}
		q3sc[8+s%4] |= (v >> 4) << (2 * (s / 4))
	}
	q3hm := seq(32, func(i int) byte { return byte(i*29 + 7) })
	q3qs := seq(64, func(i int) byte { return byte(i*53 + 1) })
	blocks = append(blocks, handBlock{Q3_K, cat(q3hm, q3qs, q3sc, le16(hQuarter)), func(e int) float64 {
		h, j, l := e/128, e%128/32, e%32
		q := int(q3qs[32*h+l]) >> (2 * j) & 3
		if q3hm[l]>>(4*h+j)&1 == 0 {
			q -= 4
		}
		return 0.25 * float64(v3(e/16)-32) * float64(q)
	}})

	// Q4_K / Q5_K: eight 32-element sub-blocks with 6-bit scale sc and min m.
	sc := []byte{1, 63, 17, 32, 45, 8, 60, 33}
	mn := []byte{0, 5, 63, 20, 49, 2, 31, 58}
	k4 := make([]byte, 12)
	for j := 0; j < 8; j++ {
		if j < 4 {
			k4[j] |= sc[j]
			k4[j+4] |= mn[j]
		} else {
			k4[j+4] = sc[j]&15 | (mn[j]&15)<<4
			k4[j-4] |= (sc[j] >> 4) << 6
			k4[j] |= (mn[j] >> 4) << 6
		}
	}
	// Sub-blocks 2g and 2g+1 use the low and high nibbles of qs[32g:32g+32].
	q4qs := seq(128, func(i int) byte { return byte(i*13 + 5) })
	nib4 := func(e int) int {
		s := e / 32
		b := q4qs[32*(s/2)+e%32]
		if s%2 == 0 {
			return int(b & 15)
		}
		return int(b >> 4)
	}
	blocks = append(blocks, handBlock{Q4_K, cat(le16(hHalf), le16(hEighth), k4, q4qs), func(e int) float64 {
		s := e / 32
		return 0.5*float64(sc[s])*float64(nib4(e)) - 0.125*float64(mn[s])
	}})
	q5qh := seq(32, func(i int) byte { return byte(i*71 + 3) })
	blocks = append(blocks, handBlock{Q5_K, cat(le16(hQuarter), le16(h16th), k4, q5qh, q4qs), func(e int) float64 {
		s := e / 32
		q := nib4(e) + 16*int(q5qh[e%32]>>s&1)
		return 0.25*float64(sc[s])*float64(q) - 0.0625*float64(mn[s])
	}})

	// Q6_K: element e = 128h + 32c + l: low nibble (c<2) or high nibble
	// (c>=2) of ql[64h + 32*(c%2) + l], top bits 2c of qh[32h+l]; int8
	// scale of sub-block e/16.
	q6ql := seq(128, func(i int) byte { return byte(i*7 + 3) })
	q6qh := seq(64, func(i int) byte { return byte(i*11 + 5) })
	q6sc := []int8{-128, 127, -1, 5, 0, 33, -64, 7, 100, -3, 12, -77, 1, 2, 3, -4}
	q6scb := seq(16, func(i int) byte { return byte(q6sc[i]) })
	blocks = append(blocks, handBlock{Q6_K, cat(q6ql, q6qh, q6scb, le16(h16th)), func(e int) float64 {
		h, c, l := e/128, e%128/32, e%32
		b := q6ql[64*h+32*(c%2)+l]
		lo := int(b & 15)
		if c >= 2 {
			lo = int(b >> 4)
		}
		q := lo | int(q6qh[32*h+l]>>(2*c)&3)<<4
		return 0.0625 * float64(q6sc[e/16]) * float64(q-32)
	}})
	return blocks
}

func TestDequantizeHandBuilt(t *testing.T) {
	covered := map[Type]bool{}
	for _, hb := range handBlocks() {
		covered[hb.typ] = true
		t.Run(hb.typ.String(), func(t *testing.T) {
			n := hb.typ.BlockSize()
			if n == 1 {
				n = len(hb.data) / hb.typ.TypeSize()
			}
			if len(hb.data) != n/hb.typ.BlockSize()*hb.typ.TypeSize() {
				t.Fatalf("test block has %d bytes, want %d", len(hb.data), hb.typ.TypeSize())
			}
			// Two copies of the block: the second must decode the same.
			src := cat(hb.data, hb.data)
			dst := make([]float32, 2*n)
			if err := Dequantize(hb.typ, src, dst); err != nil {
				t.Fatal(err)
			}
			for e := range dst {
				want := hb.want(e % n)
				if math.Abs(float64(dst[e])-want) > 1e-6*math.Max(1, math.Abs(want)) {
					t.Errorf("element %d = %g, want %g", e, dst[e], want)
				}
			}
		})
	}
	for t2 := range kernels {
		if !covered[t2] {
			t.Errorf("no hand-built block for %s", t2)
		}
	}
}

func TestSupported(t *testing.T) {
	want := []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL}
	for _, ty := range want {
		if !Supported(ty) || !CanQuantize(ty) {
			t.Errorf("%s: Supported=%v CanQuantize=%v, want both true", ty, Supported(ty), CanQuantize(ty))
		}
	}
	for _, ty := range []Type{IQ2_XXS, Q8_K, I32, MXFP4, Type(99)} {
		if Supported(ty) || CanQuantize(ty) {
			t.Errorf("%s reported as supported", ty)
		}
	}
}

func TestBadArguments(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unsupported dequantize", Dequantize(IQ2_XXS, make([]byte, 66), make([]float32, 256)), "tensor type IQ2_XXS is not supported"},
		{"unknown type", Dequantize(Type(99), nil, nil), "type(99) is not supported"},
		{"partial block", Dequantize(Q8_0, make([]byte, 34), make([]float32, 31)), "not a whole number of 32-element blocks"},
		{"short src", Dequantize(Q4_K, make([]byte, 143), make([]float32, 256)), "take 144 bytes, got 143"},
		{"long src", Dequantize(F16, make([]byte, 10), make([]float32, 4)), "take 8 bytes, got 10"},
		{"quantize partial", Quantize(Q6_K, make([]float32, 300), make([]byte, 210)), "not a whole number of 256-element blocks"},
		{"quantize dst", Quantize(Q4_0, make([]float32, 64), make([]byte, 35)), "take 36 bytes, got 35"},
		{"quantize unsupported", Quantize(IQ4_XS, make([]float32, 256), make([]byte, 136)), "IQ4_XS is not supported"},
		{"matmul unsupported", MatMul(TQ1_0, nil, 1, 256, nil, nil), "TQ1_0 is not supported"},
		{"matmul cols", MatMul(Q8_0, make([]byte, 34), 1, 30, make([]float32, 30), make([]float32, 1)), "not a whole number"},
		{"matmul weights", MatMul(Q8_0, make([]byte, 33), 1, 32, make([]float32, 32), make([]float32, 1)), "weights have 33"},
		{"matmul x", MatMul(Q8_0, make([]byte, 34), 1, 32, make([]float32, 33), make([]float32, 1)), "33 activations"},
		{"matmul out", MatMul(Q8_0, make([]byte, 68), 2, 32, make([]float32, 64), make([]float32, 3)), "output has 3 elements, want 4"},
		{"matmul shape", MatMul(F32, nil, -1, 4, nil, nil), "bad shape"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
	if _, err := DotFunc(IQ3_S); err == nil || !strings.Contains(err.Error(), "IQ3_S is not supported") {
		t.Errorf("DotFunc(IQ3_S): error %v", err)
	}
}

func TestDotFuncLengthPanic(t *testing.T) {
	for _, ty := range []Type{F32, Q8_0, Q4_K} {
		dot, err := DotFunc(ty)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "lengths do not match") {
					t.Errorf("%s: recovered %v, want a length panic", ty, r)
				}
			}()
			dot(make([]byte, 10), make([]float32, 256))
		}()
	}
}
