package quant

import "encoding/binary"

// The dot products below read the blocks directly. Each sums one block (or
// sub-block) into float32 partial sums in a fixed order, scales the partial
// sums, and adds the result to the row total: the same inputs always give the
// same bits. Blocks are viewed as fixed-size arrays (or slices resliced to
// constant lengths) so that the compiler drops bounds checks in the inner
// loops, and small integer values are turned into float32 by table lookups,
// several unpacked at once into the byte lanes of a uint64 where the layout
// allows.

// Lookup tables for 4-bit values: for a byte q, ...Lo[q] is the value of
// its low nibble and ...Hi[q] of its high nibble. Separate tables keep the
// lookups single instructions.
var (
	nibbleULo, nibbleUHi   [256]float32 // q, for Q4_1 and Q4_K
	nibbleS8Lo, nibbleS8Hi [256]float32 // q-8, for Q4_0
	nibbleNLLo, nibbleNLHi [256]float32 // kvaluesIQ4NL[q], for IQ4_NL
	int8F                  [256]float32 // float32(int8(q)), for Q8_0
	u8F                    [256]float32 // float32(q)
	q5S16F                 [256]float32 // float32(q-16), for Q5_0
	q3F                    [256]float32 // float32(q-4), for Q3_K

	// spread8[b] has bit i of b as the low bit of byte i: it turns 8 high
	// bits into 8 byte lanes.
	spread8 [256]uint64

	// f16Table[h] is F16ToF32(h): one load instead of a call.
	f16Table [1 << 16]float32
)

func init() {
	for i := range 256 {
		lo, hi := i&15, i>>4
		nibbleULo[i], nibbleUHi[i] = float32(lo), float32(hi)
		nibbleS8Lo[i], nibbleS8Hi[i] = float32(lo-8), float32(hi-8)
		nibbleNLLo[i], nibbleNLHi[i] = float32(kvaluesIQ4NL[lo]), float32(kvaluesIQ4NL[hi])
		int8F[i] = float32(int8(i))
		u8F[i] = float32(i)
		q5S16F[i] = float32(i - 16)
		q3F[i] = float32(i - 4)
		for b := range 8 {
			spread8[i] |= uint64(i>>b&1) << (8 * b)
		}
	}
	for i := range f16Table {
		f16Table[i] = F16ToF32(uint16(i))
	}
}

// sumX returns the sum of x in a fixed order (eight interleaved partial
// sums).
func sumX(x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	for len(x) >= 8 {
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		s4 += x[4]
		s5 += x[5]
		s6 += x[6]
		s7 += x[7]
		x = x[8:]
	}
	for _, v := range x {
		s0 += v
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// checkDot panics when row and x do not match for type t, and otherwise
// returns the number of blocks.
func checkDot(t Type, row []byte, x []float32, bs, ts int) int {
	nb := len(x) / bs
	if len(x)%bs != 0 || len(row) != nb*ts {
		dotLenPanic(t, len(row), len(x))
	}
	return nb
}

// dot5 returns the dot product of a Q5 block's 32 5-bit values (16 nibble
// bytes qs plus 32 high bits qh) with x, each value q read as tab[q]. It
// unpacks eight values at a time into the byte lanes of a uint64.
func dot5(qs *[16]byte, qh uint32, x *[32]float32, tab *[256]float32) float32 {
	var s0, s1, s2, s3 float32
	for c := 0; c < 16; c += 8 {
		q := binary.LittleEndian.Uint64(qs[c:])
		lo := q&m4 | spread8[byte(qh>>c)]<<4
		hi := q>>4&m4 | spread8[byte(qh>>(16+c))]<<4
		xl, xh := (*[8]float32)(x[c:]), (*[8]float32)(x[16+c:])
		s0 += tab[byte(lo)] * xl[0]
		s1 += tab[byte(hi)] * xh[0]
		s2 += tab[byte(lo>>8)] * xl[1]
		s3 += tab[byte(hi>>8)] * xh[1]
		s0 += tab[byte(lo>>16)] * xl[2]
		s1 += tab[byte(hi>>16)] * xh[2]
		s2 += tab[byte(lo>>24)] * xl[3]
		s3 += tab[byte(hi>>24)] * xh[3]
		s0 += tab[byte(lo>>32)] * xl[4]
		s1 += tab[byte(hi>>32)] * xh[4]
		s2 += tab[byte(lo>>40)] * xl[5]
		s3 += tab[byte(hi>>40)] * xh[5]
		s0 += tab[byte(lo>>48)] * xl[6]
		s1 += tab[byte(hi>>48)] * xh[6]
		s2 += tab[byte(lo>>56)] * xl[7]
		s3 += tab[byte(hi>>56)] * xh[7]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotQ5_0(row []byte, x []float32) float32 {
	nb := checkDot(Q5_0, row, x, 32, 22)
	var sum float32
	for i := range nb {
		b := (*[22]byte)(row[22*i:])
		xs := (*[32]float32)(x[32*i:])
		sq := dot5((*[16]byte)(b[6:22]), binary.LittleEndian.Uint32(b[2:6]), xs, &q5S16F)
		sum += halfAt(b[:]) * sq
	}
	return sum
}

func dotQ5_1(row []byte, x []float32) float32 { return dotQ5_1Sums(row, x, nil) }

// dotQ5_1Sums is dotQ5_1 given the sums of x's 32-element blocks (nil: it
// computes them).
func dotQ5_1Sums(row []byte, x []float32, sums []float32) float32 {
	nb := checkDot(Q5_1, row, x, 32, 24)
	var sum float32
	for i := range nb {
		b := (*[24]byte)(row[24*i:])
		xs := (*[32]float32)(x[32*i:])
		var sx float32
		if sums != nil {
			sx = sums[i]
		} else {
			sx = sumX(xs[:])
		}
		sq := dot5((*[16]byte)(b[8:24]), binary.LittleEndian.Uint32(b[4:8]), xs, &u8F)
		sum += halfAt(b[:])*sq + halfAt(b[2:])*sx
	}
	return sum
}

func dotQ2_K(row []byte, x []float32) float32 { return dotQ2_KSums(row, x, nil) }

// dotQ2_KSums is dotQ2_K given the sums of x's 16-element groups (nil: it
// computes them).
func dotQ2_KSums(row []byte, x []float32, sums []float32) float32 {
	nb := checkDot(Q2_K, row, x, 256, 84)
	var local [16]float32
	var sum float32
	for i := range nb {
		b := (*[84]byte)(row[84*i:])
		xs := (*[256]float32)(x[256*i:])
		xsum := &local
		if sums != nil {
			xsum = (*[16]float32)(sums[16*i:])
		} else {
			subSums(xs[:], 16, local[:])
		}
		var accQ, accM float32
		for h := range 2 {
			for j := range 4 {
				shift := uint(2 * j)
				for k := range 2 {
					q := (*[16]byte)(b[16+32*h+16*k:])
					xx := (*[16]float32)(xs[128*h+32*j+16*k:])
					var s0, s1, s2, s3 float32
					for c := 0; c < 16; c += 8 {
						// Eight 2-bit values in byte lanes.
						v := binary.LittleEndian.Uint64(q[c:]) >> shift & m2
						x8 := (*[8]float32)(xx[c:])
						s0 += u8F[byte(v)] * x8[0]
						s1 += u8F[byte(v>>8)] * x8[1]
						s2 += u8F[byte(v>>16)] * x8[2]
						s3 += u8F[byte(v>>24)] * x8[3]
						s0 += u8F[byte(v>>32)] * x8[4]
						s1 += u8F[byte(v>>40)] * x8[5]
						s2 += u8F[byte(v>>48)] * x8[6]
						s3 += u8F[byte(v>>56)] * x8[7]
					}
					s := b[8*h+2*j+k]
					accQ += float32(s&15) * ((s0 + s1) + (s2 + s3))
					accM += float32(s>>4) * xsum[8*h+2*j+k]
				}
			}
		}
		sum += halfAt(b[80:])*accQ - halfAt(b[82:])*accM
	}
	return sum
}

func dotQ3_K(row []byte, x []float32) float32 {
	nb := checkDot(Q3_K, row, x, 256, 110)
	var scales [16]int8
	var sum float32
	for i := range nb {
		b := (*[110]byte)(row[110*i:])
		xs := (*[256]float32)(x[256*i:])
		q3KScales(b[96:108], &scales)
		var acc float32
		for h := range 2 {
			for j := range 4 {
				shift, bit := uint(2*j), uint(4*h+j)
				for k := range 2 {
					xx := (*[16]float32)(xs[128*h+32*j+16*k:])
					var s0, s1, s2, s3 float32
					for c := 0; c < 16; c += 8 {
						// Eight 3-bit values (low bits and high bit) in byte lanes.
						q := binary.LittleEndian.Uint64(b[32+32*h+16*k+c:])
						hm := binary.LittleEndian.Uint64(b[16*k+c:])
						v := q>>shift&m2 | (hm>>bit&mask1)<<2
						x8 := (*[8]float32)(xx[c:])
						s0 += q3F[byte(v)] * x8[0]
						s1 += q3F[byte(v>>8)] * x8[1]
						s2 += q3F[byte(v>>16)] * x8[2]
						s3 += q3F[byte(v>>24)] * x8[3]
						s0 += q3F[byte(v>>32)] * x8[4]
						s1 += q3F[byte(v>>40)] * x8[5]
						s2 += q3F[byte(v>>48)] * x8[6]
						s3 += q3F[byte(v>>56)] * x8[7]
					}
					acc += float32(scales[8*h+2*j+k]) * ((s0 + s1) + (s2 + s3))
				}
			}
		}
		sum += halfAt(b[108:]) * acc
	}
	return sum
}

func dotQ5_K(row []byte, x []float32) float32 { return dotQ5_KSums(row, x, nil) }

// dotQ5_KSums is dotQ5_K given the sums of x's 32-element groups (nil: it
// computes them).
func dotQ5_KSums(row []byte, x []float32, sums []float32) float32 {
	nb := checkDot(Q5_K, row, x, 256, 176)
	var local [8]float32
	var sum float32
	for i := range nb {
		b := (*[176]byte)(row[176*i:])
		xs := (*[256]float32)(x[256*i:])
		xsum := &local
		if sums != nil {
			xsum = (*[8]float32)(sums[8*i:])
		} else {
			subSums(xs[:], 32, local[:])
		}
		qh := (*[32]byte)(b[16:48])
		var accQ, accM float32
		for g := range 4 {
			s1, m1 := scaleMinK4(2*g, b[4:16])
			s2, m2 := scaleMinK4(2*g+1, b[4:16])
			q := (*[32]byte)(b[48+32*g:])
			xl, xh := (*[32]float32)(xs[64*g:]), (*[32]float32)(xs[64*g+32:])
			sl, sh := uint(2*g), uint(2*g+1)
			var a0, a1, c0, c1 float32
			for l := 0; l < 32; l += 8 {
				// Eight values at a time: each byte of lo and hi is one 5-bit value.
				ql := binary.LittleEndian.Uint64(q[l:])
				hb := binary.LittleEndian.Uint64(qh[l:])
				lo := ql&m4 | (hb>>sl&mask1)<<4
				hi := ql>>4&m4 | (hb>>sh&mask1)<<4
				l8, h8 := (*[8]float32)(xl[l:]), (*[8]float32)(xh[l:])
				a0 += u8F[byte(lo)] * l8[0]
				c0 += u8F[byte(hi)] * h8[0]
				a1 += u8F[byte(lo>>8)] * l8[1]
				c1 += u8F[byte(hi>>8)] * h8[1]
				a0 += u8F[byte(lo>>16)] * l8[2]
				c0 += u8F[byte(hi>>16)] * h8[2]
				a1 += u8F[byte(lo>>24)] * l8[3]
				c1 += u8F[byte(hi>>24)] * h8[3]
				a0 += u8F[byte(lo>>32)] * l8[4]
				c0 += u8F[byte(hi>>32)] * h8[4]
				a1 += u8F[byte(lo>>40)] * l8[5]
				c1 += u8F[byte(hi>>40)] * h8[5]
				a0 += u8F[byte(lo>>48)] * l8[6]
				c0 += u8F[byte(hi>>48)] * h8[6]
				a1 += u8F[byte(lo>>56)] * l8[7]
				c1 += u8F[byte(hi>>56)] * h8[7]
			}
			accQ += float32(s1)*(a0+a1) + float32(s2)*(c0+c1)
			accM += float32(m1)*xsum[2*g] + float32(m2)*xsum[2*g+1]
		}
		sum += halfAt(b[:])*accQ - halfAt(b[2:])*accM
	}
	return sum
}
