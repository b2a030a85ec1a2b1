package quant

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Block layouts (ggml-common.h). Every multi-byte field is little-endian;
// "half" is an IEEE binary16 value.
//
//	Q8_0   (32 el, 34 B): d half | qs[32] int8            x = d*q
//	Q4_0   (32 el, 18 B): d half | qs[16]                 x[j] = d*(lo(qs[j])-8), x[j+16] = d*(hi(qs[j])-8)
//	Q4_1   (32 el, 20 B): d half | m half | qs[16]        x = d*q + m (nibbles as Q4_0)
//	Q5_0   (32 el, 22 B): d half | qh uint32 | qs[16]     5th bit of x[j] is qh bit j; x = d*(q-16)
//	Q5_1   (32 el, 24 B): d, m half | qh uint32 | qs[16]  x = d*q + m
//	IQ4_NL (32 el, 18 B): d half | qs[16]                 x = d*kvaluesIQ4NL[nibble] (nibbles as Q4_0)
//	Q2_K  (256 el, 84 B): scales[16] | qs[64] | d, dmin half
//	Q3_K (256 el, 110 B): hmask[32] | qs[64] | scales[12] | d half
//	Q4_K (256 el, 144 B): d, dmin half | scales[12] | qs[128]
//	Q5_K (256 el, 176 B): d, dmin half | scales[12] | qh[32] | qs[128]
//	Q6_K (256 el, 210 B): ql[128] | qh[64] | scales[16] int8 | d half
//
// The K-quant bit placements are described at each dequantizer below. The
// explicit float32 conversions of products keep each product rounded on
// its own, so that no architecture fuses it with the subtraction that
// follows: every machine dequantizes to the same bits (dequant_amd64.s
// computes them too).

// kvaluesIQ4NL are IQ4_NL's 16 non-linear levels.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// halfAt reads the little-endian half at b[0:2]. Block scales are read
// often and scattered, so it converts by arithmetic rather than through
// f16Table (256 KiB, mostly out of cache): the half's exponent and mantissa
// bits, shifted into place, are a float32 2^112 times too small (a
// subnormal half lands on a subnormal float32, still exact); only
// infinities and NaN, whose exponent must stay all ones, take the table.
func halfAt(b []byte) float32 {
	h := uint32(b[0]) | uint32(b[1])<<8
	if h&0x7c00 == 0x7c00 {
		return f16Table[h]
	}
	f := math.Float32frombits(h&0x7fff<<13) * 0x1p112
	return math.Float32frombits(math.Float32bits(f) | h&0x8000<<16)
}

// nativeLittle reports whether the machine is little-endian, so that F32
// rows can be read in place.
var nativeLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32View returns row as float32s when it can be read in place (aligned,
// little-endian machine).
func f32View(row []byte) ([]float32, bool) {
	p := unsafe.SliceData(row)
	if !nativeLittle || uintptr(unsafe.Pointer(p))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), len(row)/4), true
}

func dequantF32(src []byte, dst []float32) {
	if w, ok := f32View(src); ok {
		copy(dst, w)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16Go(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

func dequantBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dequantQ8_0Go(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*34 : i*34+34]
		y := dst[i*32 : i*32+32]
		d := halfAt(b)
		for j, q := range b[2:34] {
			y[j] = float32(int8(q)) * d
		}
	}
}

func dequantQ4_0Go(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*18 : i*18+18]
		y := dst[i*32 : i*32+32]
		d := halfAt(b)
		for j, q := range b[2:18] {
			y[j] = float32(int(q&15)-8) * d
			y[j+16] = float32(int(q>>4)-8) * d
		}
	}
}

func dequantQ4_1Go(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*20 : i*20+20]
		y := dst[i*32 : i*32+32]
		d, m := halfAt(b), halfAt(b[2:])
		for j, q := range b[4:20] {
			y[j] = float32(float32(q&15)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*22 : i*22+22]
		y := dst[i*32 : i*32+32]
		d := halfAt(b)
		qh := binary.LittleEndian.Uint32(b[2:])
		for j, q := range b[6:22] {
			lo := int(q&15) | int(qh>>j&1)<<4
			hi := int(q>>4) | int(qh>>(j+16)&1)<<4
			y[j] = float32(lo-16) * d
			y[j+16] = float32(hi-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*24 : i*24+24]
		y := dst[i*32 : i*32+32]
		d, m := halfAt(b), halfAt(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		for j, q := range b[8:24] {
			lo := uint32(q&15) | (qh>>j&1)<<4
			hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
			y[j] = float32(float32(lo)*d) + m
			y[j+16] = float32(float32(hi)*d) + m
		}
	}
}

func dequantIQ4_NL(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[i*18 : i*18+18]
		y := dst[i*32 : i*32+32]
		d := halfAt(b)
		for j, q := range b[2:18] {
			y[j] = d * float32(kvaluesIQ4NL[q&15])
			y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
		}
	}
}

// Q2_K: 16 sub-blocks of 16. scales[s] holds sub-block s's scale (low
// nibble) and min (high nibble): x = d*sc*q - dmin*m, q 2 bits. The 256
// elements are two halves of 128; in half h, element 32*j+l (j<4, l<32) takes
// bits 2j..2j+1 of qs[32*h+l], and belongs to sub-block 8*h+2*j+l/16.
func dequantQ2_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[i*84 : i*84+84]
		y := dst[i*256 : i*256+256]
		sc := b[0:16]
		d, dmin := halfAt(b[80:]), halfAt(b[82:])
		for h := 0; h < 2; h++ {
			qs := b[16+32*h : 16+32*h+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				for k := 0; k < 2; k++ {
					s := sc[8*h+2*j+k]
					dl := d * float32(s&15)
					ml := float32(dmin * float32(s>>4)) // rounded: no fused multiply-subtract below
					out := y[128*h+32*j+16*k : 128*h+32*j+16*k+16]
					for l, q := range qs[16*k : 16*k+16] {
						out[l] = float32(dl*float32(q>>shift&3)) - ml
					}
				}
			}
		}
	}
}

// q3KScales unpacks Q3_K's sixteen 6-bit scales, stored in 12 bytes: the low
// 4 bits of scale s are the low nibble of b[s] for s<8 and the high nibble of
// b[s-8] otherwise; its high 2 bits are bits 2*(s/4).. of b[8+s%4]. The
// scale used is the 6-bit value minus 32.
func q3KScales(b []byte, out *[16]int8) {
	b = b[:12]
	for s := 0; s < 16; s++ {
		var lo byte
		if s < 8 {
			lo = b[s] & 15
		} else {
			lo = b[s-8] >> 4
		}
		hi := b[8+s%4] >> (2 * (s / 4)) & 3
		out[s] = int8(lo|hi<<4) - 32
	}
}

// Q3_K: 16 sub-blocks of 16, x = d*(scale-32)*q with q = low2 - 4*(1-high)
// in -4..3. Low bits are placed as Q2_K's; the high bit of element
// 128*h+32*j+l is bit 4*h+j of hmask[l].
func dequantQ3_K(src []byte, dst []float32) {
	var scales [16]int8
	for i := 0; i < len(dst)/256; i++ {
		b := src[i*110 : i*110+110]
		y := dst[i*256 : i*256+256]
		hm := b[0:32]
		q3KScales(b[96:108], &scales)
		d := halfAt(b[108:])
		for h := 0; h < 2; h++ {
			qs := b[32+32*h : 32+32*h+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				bit := uint(4*h + j)
				for k := 0; k < 2; k++ {
					dl := d * float32(scales[8*h+2*j+k])
					out := y[128*h+32*j+16*k : 128*h+32*j+16*k+16]
					for l := 0; l < 16; l++ {
						q := int(qs[16*k+l]>>shift&3) - 4 + 4*int(hm[16*k+l]>>bit&1)
						out[l] = dl * float32(q)
					}
				}
			}
		}
	}
}

// scaleMinK4 decodes sub-block j's 6-bit scale and min from the 12 packed
// bytes of a Q4_K or Q5_K block: for j<4 they are the low 6 bits of q[j] and
// q[j+4]; for j>=4 their low 4 bits are the nibbles of q[j+4] and their high
// 2 bits are the top bits of q[j-4] and q[j].
func scaleMinK4(j int, q []byte) (sc, m byte) {
	q = q[:12]
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&15 | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K: 8 sub-blocks of 32, x = d*sc*q - dmin*m. Sub-blocks 2g and 2g+1
// take the low and high nibbles of qs[32g:32g+32].
func dequantQ4_KGo(src []byte, dst []float32) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[i*144 : i*144+144]
		y := dst[i*256 : i*256+256]
		d, dmin := halfAt(b), halfAt(b[2:])
		for g := 0; g < 4; g++ {
			s1, m1 := scaleMinK4(2*g, b[4:16])
			s2, m2 := scaleMinK4(2*g+1, b[4:16])
			d1, mm1 := d*float32(s1), float32(dmin*float32(m1))
			d2, mm2 := d*float32(s2), float32(dmin*float32(m2))
			out := y[64*g : 64*g+64]
			for l, q := range b[16+32*g : 16+32*g+32] {
				out[l] = float32(d1*float32(q&15)) - mm1
				out[l+32] = float32(d2*float32(q>>4)) - mm2
			}
		}
	}
}

// Q5_K: as Q4_K, plus a fifth bit: element 32*s+l (sub-block s) takes bit s
// of qh[l].
func dequantQ5_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[i*176 : i*176+176]
		y := dst[i*256 : i*256+256]
		d, dmin := halfAt(b), halfAt(b[2:])
		qh := b[16:48]
		for g := 0; g < 4; g++ {
			s1, m1 := scaleMinK4(2*g, b[4:16])
			s2, m2 := scaleMinK4(2*g+1, b[4:16])
			d1, mm1 := d*float32(s1), float32(dmin*float32(m1))
			d2, mm2 := d*float32(s2), float32(dmin*float32(m2))
			out := y[64*g : 64*g+64]
			for l, q := range b[48+32*g : 48+32*g+32] {
				lo := q&15 | (qh[l]>>(2*g)&1)<<4
				hi := q>>4 | (qh[l]>>(2*g+1)&1)<<4
				out[l] = float32(d1*float32(lo)) - mm1
				out[l+32] = float32(d2*float32(hi)) - mm2
			}
		}
	}
}

// Q6_K: 16 sub-blocks of 16 with int8 scales, x = d*scale*(q-32), q 6 bits.
// In half h (128 elements), for l<32: element l takes the low nibble of
// ql[64h+l], element l+32 the low nibble of ql[64h+l+32], element l+64 the
// high nibble of ql[64h+l], element l+96 the high nibble of ql[64h+l+32];
// their top 2 bits are bits 0-1, 2-3, 4-5, 6-7 of qh[32h+l].
func dequantQ6_KGo(src []byte, dst []float32) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[i*210 : i*210+210]
		y := dst[i*256 : i*256+256]
		sc := b[192:208]
		d := halfAt(b[208:])
		for h := 0; h < 2; h++ {
			ql := b[64*h : 64*h+64]
			qh := b[128+32*h : 128+32*h+32]
			out := y[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				s := 8*h + l/16
				q1 := int(ql[l]&15|(qh[l]&3)<<4) - 32
				q2 := int(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				out[l] = d * float32(int8(sc[s])) * float32(q1)
				out[l+32] = d * float32(int8(sc[s+2])) * float32(q2)
				out[l+64] = d * float32(int8(sc[s+4])) * float32(q3)
				out[l+96] = d * float32(int8(sc[s+6])) * float32(q4)
			}
		}
	}
}
