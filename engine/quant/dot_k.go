package quant

import "encoding/binary"

// Kernels for Q4_K and Q6_K, the K-quants of most real files, written with
// block-sized array views so that indexes need no bounds checks.

// q6F[v] is float32(v-32) for a 6-bit Q6_K value v (indexed by byte, so
// that no bounds check is needed).
var q6F [256]float32

// Byte-lane masks for SWAR unpacking.
const (
	m4    = 0x0f0f0f0f0f0f0f0f
	m2    = 0x0303030303030303
	mask1 = 0x0101010101010101
)

func init() {
	for i := range q6F {
		q6F[i] = float32(i - 32)
	}
}

// subSums fills sums with the sums (sumX) of consecutive n-element groups
// of x.
func subSums(x []float32, n int, sums []float32) {
	for s := range sums {
		sums[s] = sumX(x[n*s : n*s+n])
	}
}

func dotQ4_K(row []byte, x []float32) float32 { return dotQ4_KSums(row, x, nil) }

// dotQ4_KSums is dotQ4_K given the sums of x's 32-element groups (nil: it
// computes them, with the same function, so the result is the same).
func dotQ4_KSums(row []byte, x []float32, sums []float32) float32 {
	nb := checkDot(Q4_K, row, x, 256, 144)
	var local [8]float32
	var sum float32
	for i := range nb {
		b := (*[144]byte)(row[144*i:])
		xs := (*[256]float32)(x[256*i:])
		xsum := &local
		if sums != nil {
			xsum = (*[8]float32)(sums[8*i:])
		} else {
			subSums(xs[:], 32, local[:])
		}
		var accQ, accM float32
		for g := range 4 {
			s1, m1 := scaleMinK4(2*g, b[4:16])
			s2, m2 := scaleMinK4(2*g+1, b[4:16])
			q := (*[32]byte)(b[16+32*g:])
			xl := (*[32]float32)(xs[64*g:])
			xh := (*[32]float32)(xs[64*g+32:])
			var a0, a1, a2, a3, c0, c1, c2, c3 float32
			a0 += nibbleULo[q[0]] * xl[0]
			c0 += nibbleUHi[q[0]] * xh[0]
			a1 += nibbleULo[q[1]] * xl[1]
			c1 += nibbleUHi[q[1]] * xh[1]
			a2 += nibbleULo[q[2]] * xl[2]
			c2 += nibbleUHi[q[2]] * xh[2]
			a3 += nibbleULo[q[3]] * xl[3]
			c3 += nibbleUHi[q[3]] * xh[3]
			a0 += nibbleULo[q[4]] * xl[4]
			c0 += nibbleUHi[q[4]] * xh[4]
			a1 += nibbleULo[q[5]] * xl[5]
			c1 += nibbleUHi[q[5]] * xh[5]
			a2 += nibbleULo[q[6]] * xl[6]
			c2 += nibbleUHi[q[6]] * xh[6]
			a3 += nibbleULo[q[7]] * xl[7]
			c3 += nibbleUHi[q[7]] * xh[7]
			a0 += nibbleULo[q[8]] * xl[8]
			c0 += nibbleUHi[q[8]] * xh[8]
			a1 += nibbleULo[q[9]] * xl[9]
			c1 += nibbleUHi[q[9]] * xh[9]
			a2 += nibbleULo[q[10]] * xl[10]
			c2 += nibbleUHi[q[10]] * xh[10]
			a3 += nibbleULo[q[11]] * xl[11]
			c3 += nibbleUHi[q[11]] * xh[11]
			a0 += nibbleULo[q[12]] * xl[12]
			c0 += nibbleUHi[q[12]] * xh[12]
			a1 += nibbleULo[q[13]] * xl[13]
			c1 += nibbleUHi[q[13]] * xh[13]
			a2 += nibbleULo[q[14]] * xl[14]
			c2 += nibbleUHi[q[14]] * xh[14]
			a3 += nibbleULo[q[15]] * xl[15]
			c3 += nibbleUHi[q[15]] * xh[15]
			a0 += nibbleULo[q[16]] * xl[16]
			c0 += nibbleUHi[q[16]] * xh[16]
			a1 += nibbleULo[q[17]] * xl[17]
			c1 += nibbleUHi[q[17]] * xh[17]
			a2 += nibbleULo[q[18]] * xl[18]
			c2 += nibbleUHi[q[18]] * xh[18]
			a3 += nibbleULo[q[19]] * xl[19]
			c3 += nibbleUHi[q[19]] * xh[19]
			a0 += nibbleULo[q[20]] * xl[20]
			c0 += nibbleUHi[q[20]] * xh[20]
			a1 += nibbleULo[q[21]] * xl[21]
			c1 += nibbleUHi[q[21]] * xh[21]
			a2 += nibbleULo[q[22]] * xl[22]
			c2 += nibbleUHi[q[22]] * xh[22]
			a3 += nibbleULo[q[23]] * xl[23]
			c3 += nibbleUHi[q[23]] * xh[23]
			a0 += nibbleULo[q[24]] * xl[24]
			c0 += nibbleUHi[q[24]] * xh[24]
			a1 += nibbleULo[q[25]] * xl[25]
			c1 += nibbleUHi[q[25]] * xh[25]
			a2 += nibbleULo[q[26]] * xl[26]
			c2 += nibbleUHi[q[26]] * xh[26]
			a3 += nibbleULo[q[27]] * xl[27]
			c3 += nibbleUHi[q[27]] * xh[27]
			a0 += nibbleULo[q[28]] * xl[28]
			c0 += nibbleUHi[q[28]] * xh[28]
			a1 += nibbleULo[q[29]] * xl[29]
			c1 += nibbleUHi[q[29]] * xh[29]
			a2 += nibbleULo[q[30]] * xl[30]
			c2 += nibbleUHi[q[30]] * xh[30]
			a3 += nibbleULo[q[31]] * xl[31]
			c3 += nibbleUHi[q[31]] * xh[31]
			accQ += float32(s1)*((a0+a1)+(a2+a3)) + float32(s2)*((c0+c1)+(c2+c3))
			accM += float32(m1)*xsum[2*g] + float32(m2)*xsum[2*g+1]
		}
		sum += halfAt(b[:])*accQ - halfAt(b[2:])*accM
	}
	return sum
}

func dotQ6_K(row []byte, x []float32) float32 {
	nb := checkDot(Q6_K, row, x, 256, 210)
	var sum float32
	for i := range nb {
		b := (*[210]byte)(row[210*i:])
		xs := (*[256]float32)(x[256*i:])
		sc := (*[16]byte)(b[192:208])
		var acc float32
		for h := range 2 {
			ql := (*[64]byte)(b[64*h:])
			qh := (*[32]byte)(b[128+32*h:])
			y := (*[128]float32)(xs[128*h:])
			for k := range 2 {
				// Elements 16k..16k+15 of each 32-element quarter, 8 at a time:
				// each byte of v1..v4 is one 6-bit value.
				var a1, a2, a3, a4, e1, e2, e3, e4 float32
				for c := 2 * k; c < 2*k+2; c++ {
					lo := binary.LittleEndian.Uint64(ql[8*c:])
					hi := binary.LittleEndian.Uint64(ql[32+8*c:])
					hb := binary.LittleEndian.Uint64(qh[8*c:])
					v1 := lo&m4 | (hb&m2)<<4
					v2 := hi&m4 | (hb>>2&m2)<<4
					v3 := lo>>4&m4 | (hb>>4&m2)<<4
					v4 := hi>>4&m4 | (hb>>6&m2)<<4
					y1, y2 := (*[8]float32)(y[8*c:]), (*[8]float32)(y[32+8*c:])
					y3, y4 := (*[8]float32)(y[64+8*c:]), (*[8]float32)(y[96+8*c:])
					a1 += q6F[byte(v1>>0)] * y1[0]
					a2 += q6F[byte(v2>>0)] * y2[0]
					a3 += q6F[byte(v3>>0)] * y3[0]
					a4 += q6F[byte(v4>>0)] * y4[0]
					e1 += q6F[byte(v1>>8)] * y1[1]
					e2 += q6F[byte(v2>>8)] * y2[1]
					e3 += q6F[byte(v3>>8)] * y3[1]
					e4 += q6F[byte(v4>>8)] * y4[1]
					a1 += q6F[byte(v1>>16)] * y1[2]
					a2 += q6F[byte(v2>>16)] * y2[2]
					a3 += q6F[byte(v3>>16)] * y3[2]
					a4 += q6F[byte(v4>>16)] * y4[2]
					e1 += q6F[byte(v1>>24)] * y1[3]
					e2 += q6F[byte(v2>>24)] * y2[3]
					e3 += q6F[byte(v3>>24)] * y3[3]
					e4 += q6F[byte(v4>>24)] * y4[3]
					a1 += q6F[byte(v1>>32)] * y1[4]
					a2 += q6F[byte(v2>>32)] * y2[4]
					a3 += q6F[byte(v3>>32)] * y3[4]
					a4 += q6F[byte(v4>>32)] * y4[4]
					e1 += q6F[byte(v1>>40)] * y1[5]
					e2 += q6F[byte(v2>>40)] * y2[5]
					e3 += q6F[byte(v3>>40)] * y3[5]
					e4 += q6F[byte(v4>>40)] * y4[5]
					a1 += q6F[byte(v1>>48)] * y1[6]
					a2 += q6F[byte(v2>>48)] * y2[6]
					a3 += q6F[byte(v3>>48)] * y3[6]
					a4 += q6F[byte(v4>>48)] * y4[6]
					e1 += q6F[byte(v1>>56)] * y1[7]
					e2 += q6F[byte(v2>>56)] * y2[7]
					e3 += q6F[byte(v3>>56)] * y3[7]
					e4 += q6F[byte(v4>>56)] * y4[7]
				}
				s := 8*h + k
				acc += (float32(int8(sc[s]))*(a1+e1) + float32(int8(sc[s+2]))*(a2+e2)) +
					(float32(int8(sc[s+4]))*(a3+e3) + float32(int8(sc[s+6]))*(a4+e4))
			}
		}
		sum += halfAt(b[208:]) * acc
	}
	return sum
}
