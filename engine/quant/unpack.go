package quant

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// A format is how DotFunc and MatMul compute with one type. A row is taken
// in spans of up to 256 elements (one K-quant block, eight 32-element
// blocks, or 256 plain values). For each span:
//
//  1. unpack writes the span's integer values (for plain types, the values
//     themselves) as float32, unscaled and in element order. Integers of a
//     few bits are exact in float32, so this loses nothing.
//  2. The values are multiplied with the activations in groups of 16
//     consecutive elements: each group's partial product is summed from
//     zero, element by element in order (see mac.go).
//  3. finish applies the blocks' scales (and minimums) to the groups'
//     partial products and adds each block's contribution, block by block,
//     to the running total.
//
// Steps 1 and 3 do not depend on the activations and step 2's order does
// not depend on which other rows or vectors are computed alongside, so a
// given (row, vector) gets the same bits from DotFunc and from MatMul
// whatever the batch; MatMul gains from batching by unpacking a block once
// for all its vectors.
type format struct {
	typ    Type
	bs, ts int // elements and bytes per block, as Type.BlockSize and TypeSize

	// unpack writes the n values of the blocks at the start of b to dst.
	unpack func(b []byte, n int, dst *[span]float32)

	// finish adds the contributions of the blocks holding n elements at
	// the start of b to acc[v] for every v < len(acc), given the partial
	// products p[16*v+g] of group g with vector v and, for types with
	// minimums, the sums of sumGroup-element groups of vector v's
	// activations at sums[ss*v+k] (k counted from the span's start).
	finish   func(b []byte, n int, p, sums []float32, ss int, acc []float32)
	sumGroup int // elements per activation sum finish needs; 0 for none
}

// span is the most elements unpacked at a time: one K-quant block.
const span = 256

// formats lists the computing formats of the supported types.
var formats = map[Type]*format{
	F32:    {typ: F32, bs: 1, ts: 4, unpack: unpackF32, finish: finishPlain},
	F16:    {typ: F16, bs: 1, ts: 2, unpack: unpackF16, finish: finishPlain},
	BF16:   {typ: BF16, bs: 1, ts: 2, unpack: unpackBF16, finish: finishPlain},
	Q8_0:   {typ: Q8_0, bs: 32, ts: 34, unpack: unpackQ8_0, finish: finishD(34)},
	Q4_0:   {typ: Q4_0, bs: 32, ts: 18, unpack: unpackQ4_0, finish: finishD(18)},
	IQ4_NL: {typ: IQ4_NL, bs: 32, ts: 18, unpack: unpackIQ4_NL, finish: finishD(18)},
	Q4_1:   {typ: Q4_1, bs: 32, ts: 20, unpack: unpackQ4_1, finish: finishDM(20), sumGroup: 32},
	Q5_0:   {typ: Q5_0, bs: 32, ts: 22, unpack: unpackQ5_0, finish: finishD(22)},
	Q5_1:   {typ: Q5_1, bs: 32, ts: 24, unpack: unpackQ5_1, finish: finishDM(24), sumGroup: 32},
	Q2_K:   {typ: Q2_K, bs: 256, ts: 84, unpack: unpackQ2_K, finish: finishQ2_K, sumGroup: 16},
	Q3_K:   {typ: Q3_K, bs: 256, ts: 110, unpack: unpackQ3_K, finish: finishQ3_K},
	Q4_K:   {typ: Q4_K, bs: 256, ts: 144, unpack: unpackQ4_K, finish: finishK4, sumGroup: 32},
	Q5_K:   {typ: Q5_K, bs: 256, ts: 176, unpack: unpackQ5_K, finish: finishK4, sumGroup: 32},
	Q6_K:   {typ: Q6_K, bs: 256, ts: 210, unpack: unpackQ6_K, finish: finishQ6_K},
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

func unpackF32(b []byte, n int, dst *[span]float32) {
	if w, ok := f32View(b[:4*n]); ok {
		copy(dst[:n], w)
		return
	}
	for i := range dst[:n] {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

func unpackF16(b []byte, n int, dst *[span]float32) {
	b = b[:2*n]
	for i := range dst[:n] {
		dst[i] = f16Table[uint16(b[2*i])|uint16(b[2*i+1])<<8]
	}
}

func unpackBF16(b []byte, n int, dst *[span]float32) {
	b = b[:2*n]
	for i := range dst[:n] {
		dst[i] = math.Float32frombits((uint32(b[2*i]) | uint32(b[2*i+1])<<8) << 16)
	}
}

// finishPlain adds each group's product: plain values need no scale.
func finishPlain(_ []byte, n int, p, _ []float32, _ int, acc []float32) {
	ng := (n + 15) / 16
	for v := range acc {
		pv := p[16*v : 16*v+ng]
		a := acc[v]
		for _, s := range pv {
			a += s
		}
		acc[v] = a
	}
}

func unpackQ8_0(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		blk := (*[34]byte)(b[34*i:])
		y := (*[32]float32)(dst[32*i:])
		for j := range 32 {
			y[j] = int8F[blk[2+j]]
		}
	}
}

// Q4_0, IQ4_NL and Q4_1 blocks hold 16 nibble bytes q after their header:
// element j is the low nibble of q[j] and element j+16 the high nibble,
// read through a table.

func unpackQ4_0(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		q := (*[16]byte)(b[18*i+2:])
		y := (*[32]float32)(dst[32*i:])
		for j := range 16 {
			y[j] = nibbleS8Lo[q[j]]
			y[j+16] = nibbleS8Hi[q[j]]
		}
	}
}

func unpackIQ4_NL(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		q := (*[16]byte)(b[18*i+2:])
		y := (*[32]float32)(dst[32*i:])
		for j := range 16 {
			y[j] = nibbleNLLo[q[j]]
			y[j+16] = nibbleNLHi[q[j]]
		}
	}
}

func unpackQ4_1(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		q := (*[16]byte)(b[20*i+4:])
		y := (*[32]float32)(dst[32*i:])
		for j := range 16 {
			y[j] = nibbleULo[q[j]]
			y[j+16] = nibbleUHi[q[j]]
		}
	}
}

func unpackQ5_0(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		blk := (*[22]byte)(b[22*i:])
		unpack5((*[16]byte)(blk[6:]), binary.LittleEndian.Uint32(blk[2:]), (*[32]float32)(dst[32*i:]), &q5S16F)
	}
}

func unpackQ5_1(b []byte, n int, dst *[span]float32) {
	for i := range n / 32 {
		blk := (*[24]byte)(b[24*i:])
		unpack5((*[16]byte)(blk[8:]), binary.LittleEndian.Uint32(blk[4:]), (*[32]float32)(dst[32*i:]), &u8F)
	}
}

// unpack5 writes the 32 5-bit values of a Q5 block (16 nibble bytes qs,
// fifth bits in qh) to y, each value q read as tab[q]. It unpacks eight
// values at a time into the byte lanes of a uint64.
func unpack5(qs *[16]byte, qh uint32, y *[32]float32, tab *[256]float32) {
	for c := 0; c < 16; c += 8 {
		q := binary.LittleEndian.Uint64(qs[c:])
		lo := q&m4 | spread8[byte(qh>>c)]<<4
		hi := q>>4&m4 | spread8[byte(qh>>(16+c))]<<4
		yl, yh := (*[8]float32)(y[c:]), (*[8]float32)(y[16+c:])
		for k := range 8 {
			yl[k] = tab[byte(lo>>(8*k))]
			yh[k] = tab[byte(hi>>(8*k))]
		}
	}
}

// finishD returns the finisher of 32-element blocks of ts bytes that start
// with their scale d: a block adds d*(p0+p1).
func finishD(ts int) func(b []byte, n int, p, sums []float32, ss int, acc []float32) {
	return func(b []byte, n int, p, _ []float32, _ int, acc []float32) {
		nb := n / 32
		var d [span / 32]float32
		for i := range nb {
			d[i] = halfAt(b[ts*i:])
		}
		for v := range acc {
			pv := (*[16]float32)(p[16*v:])
			a := acc[v]
			for i := range nb {
				a += d[i] * (pv[2*i] + pv[2*i+1])
			}
			acc[v] = a
		}
	}
}

// finishDM returns the finisher of 32-element blocks of ts bytes that start
// with their scale d and minimum m: a block adds d*(p0+p1) + m*sum(x).
func finishDM(ts int) func(b []byte, n int, p, sums []float32, ss int, acc []float32) {
	return func(b []byte, n int, p, sums []float32, ss int, acc []float32) {
		nb := n / 32
		var d, m [span / 32]float32
		for i := range nb {
			d[i], m[i] = halfAt(b[ts*i:]), halfAt(b[ts*i+2:])
		}
		for v := range acc {
			pv := (*[16]float32)(p[16*v:])
			sv := sums[ss*v : ss*v+nb]
			a := acc[v]
			for i := range nb {
				a += d[i]*(pv[2*i]+pv[2*i+1]) + m[i]*sv[i]
			}
			acc[v] = a
		}
	}
}

// unpackQ2_K: element 128h+32j+16k+l is bits 2j..2j+1 of qs[32h+16k+l].
func unpackQ2_K(b []byte, _ int, dst *[span]float32) {
	qs := (*[64]byte)(b[16:80])
	for h := range 2 {
		for j := range 4 {
			shift := uint(2 * j)
			for c := 0; c < 32; c += 8 {
				v := binary.LittleEndian.Uint64(qs[32*h+c:]) >> shift & m2
				y := (*[8]float32)(dst[128*h+32*j+c:])
				for k := range 8 {
					y[k] = u8F[byte(v>>(8*k))]
				}
			}
		}
	}
}

// finishQ2_K: group g (16 elements) has scale sc[g]&15 and minimum
// sc[g]>>4; the block adds d*Σ scale·p - dmin*Σ min·sum(x).
func finishQ2_K(b []byte, _ int, p, sums []float32, ss int, acc []float32) {
	blk := (*[84]byte)(b)
	var sc, mn [16]float32
	for g := range 16 {
		sc[g], mn[g] = float32(blk[g]&15), float32(blk[g]>>4)
	}
	d, dmin := halfAt(blk[80:]), halfAt(blk[82:])
	for v := range acc {
		pv := (*[16]float32)(p[16*v:])
		sv := (*[16]float32)(sums[ss*v:])
		var accQ, accM float32
		for g := range 16 {
			accQ += sc[g] * pv[g]
			accM += mn[g] * sv[g]
		}
		acc[v] += d*accQ - dmin*accM
	}
}

// unpackQ3_K: the low bits are placed as Q2_K's; the high bit of element
// 128h+32j+16k+l is bit 4h+j of hmask[16k+l]; the value is low+4*high-4.
func unpackQ3_K(b []byte, _ int, dst *[span]float32) {
	blk := (*[110]byte)(b)
	for h := range 2 {
		for j := range 4 {
			shift, bit := uint(2*j), uint(4*h+j)
			for c := 0; c < 32; c += 8 {
				q := binary.LittleEndian.Uint64(blk[32+32*h+c:])
				hm := binary.LittleEndian.Uint64(blk[c:])
				v := q>>shift&m2 | (hm>>bit&mask1)<<2
				y := (*[8]float32)(dst[128*h+32*j+c:])
				for k := range 8 {
					y[k] = q3F[byte(v>>(8*k))]
				}
			}
		}
	}
}

// finishQ3_K: group g has the signed 6-bit scale s[g]; the block adds
// d*Σ s·p.
func finishQ3_K(b []byte, _ int, p, _ []float32, _ int, acc []float32) {
	blk := (*[110]byte)(b)
	var s8 [16]int8
	q3KScales(blk[96:108], &s8)
	var sc [16]float32
	for g := range 16 {
		sc[g] = float32(s8[g])
	}
	d := halfAt(blk[108:])
	for v := range acc {
		pv := (*[16]float32)(p[16*v:])
		var a float32
		for g := range 16 {
			a += sc[g] * pv[g]
		}
		acc[v] += d * a
	}
}

// unpackQ4_K: sub-blocks 2g and 2g+1 (elements 64g.. and 64g+32..) are the
// low and high nibbles of qs[32g:32g+32].
func unpackQ4_K(b []byte, _ int, dst *[span]float32) {
	qs := (*[128]byte)(b[16:144])
	for g := range 4 {
		q := (*[32]byte)(qs[32*g:])
		yl, yh := (*[32]float32)(dst[64*g:]), (*[32]float32)(dst[64*g+32:])
		for l := range 32 {
			yl[l] = nibbleULo[q[l]]
			yh[l] = nibbleUHi[q[l]]
		}
	}
}

// unpackQ5_K: as Q4_K, plus a fifth bit: element 32s+l (sub-block s) takes
// bit s of qh[l].
func unpackQ5_K(b []byte, _ int, dst *[span]float32) {
	blk := (*[176]byte)(b)
	qh := (*[32]byte)(blk[16:48])
	for g := range 4 {
		q := (*[32]byte)(blk[48+32*g:])
		sl, sh := uint(2*g), uint(2*g+1)
		for c := 0; c < 32; c += 8 {
			ql := binary.LittleEndian.Uint64(q[c:])
			hb := binary.LittleEndian.Uint64(qh[c:])
			lo := ql&m4 | (hb>>sl&mask1)<<4
			hi := ql>>4&m4 | (hb>>sh&mask1)<<4
			yl, yh := (*[8]float32)(dst[64*g+c:]), (*[8]float32)(dst[64*g+32+c:])
			for k := range 8 {
				yl[k] = u8F[byte(lo>>(8*k))]
				yh[k] = u8F[byte(hi>>(8*k))]
			}
		}
	}
}

// finishK4 is Q4_K's and Q5_K's: sub-block s (groups 2s and 2s+1) has a
// 6-bit scale and minimum; the block adds d*Σ scale·p - dmin*Σ min·sum(x).
func finishK4(b []byte, _ int, p, sums []float32, ss int, acc []float32) {
	var sc, mn [8]float32
	for s := range 8 {
		a, m := scaleMinK4(s, b[4:16])
		sc[s], mn[s] = float32(a), float32(m)
	}
	d, dmin := halfAt(b), halfAt(b[2:])
	for v := range acc {
		pv := (*[16]float32)(p[16*v:])
		sv := (*[8]float32)(sums[ss*v:])
		var accQ, accM float32
		for s := range 8 {
			accQ += sc[s] * (pv[2*s] + pv[2*s+1])
			accM += mn[s] * sv[s]
		}
		acc[v] += d*accQ - dmin*accM
	}
}

// unpackQ6_K: in half h, for l<32, element l is the low nibble of
// ql[64h+l], element l+32 the low nibble of ql[64h+l+32], element l+64 the
// high nibble of ql[64h+l], element l+96 the high nibble of ql[64h+l+32];
// their top 2 bits are bits 0-1, 2-3, 4-5, 6-7 of qh[32h+l]. The value is
// q-32.
func unpackQ6_K(b []byte, _ int, dst *[span]float32) {
	blk := (*[210]byte)(b)
	for h := range 2 {
		ql := (*[64]byte)(blk[64*h:])
		qh := (*[32]byte)(blk[128+32*h:])
		y := (*[128]float32)(dst[128*h:])
		for c := 0; c < 32; c += 8 {
			lo := binary.LittleEndian.Uint64(ql[c:])
			hi := binary.LittleEndian.Uint64(ql[32+c:])
			hb := binary.LittleEndian.Uint64(qh[c:])
			v1 := lo&m4 | (hb&m2)<<4
			v2 := hi&m4 | (hb>>2&m2)<<4
			v3 := lo>>4&m4 | (hb>>4&m2)<<4
			v4 := hi>>4&m4 | (hb>>6&m2)<<4
			y1, y2 := (*[8]float32)(y[c:]), (*[8]float32)(y[32+c:])
			y3, y4 := (*[8]float32)(y[64+c:]), (*[8]float32)(y[96+c:])
			for k := range 8 {
				y1[k] = q6F[byte(v1>>(8*k))]
				y2[k] = q6F[byte(v2>>(8*k))]
				y3[k] = q6F[byte(v3>>(8*k))]
				y4[k] = q6F[byte(v4>>(8*k))]
			}
		}
	}
}

// finishQ6_K: group g has the int8 scale sc[g]; the block adds d*Σ sc·p.
func finishQ6_K(b []byte, _ int, p, _ []float32, _ int, acc []float32) {
	blk := (*[210]byte)(b)
	var sc [16]float32
	for g := range 16 {
		sc[g] = float32(int8(blk[192+g]))
	}
	d := halfAt(blk[208:])
	for v := range acc {
		pv := (*[16]float32)(p[16*v:])
		var a float32
		for g := range 16 {
			a += sc[g] * pv[g]
		}
		acc[v] += d * a
	}
}
