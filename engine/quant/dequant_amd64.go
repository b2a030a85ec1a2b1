//go:build !noasm

package quant

import "fmt"

// SSE2 dequantizers (dequant_amd64.s) for the most common types. They
// compute exactly what the Go dequantizers (dequantQ4_0Go and so on)
// compute: the block's integers converted to float32 exactly, then the same
// float32 multiplies and subtractions, one rounding each. The package tests
// compare the two bit for bit.

// dequantNib: for chunk i < nb, 16 nibble bytes at q[i*ss:], low nibble j
// gives dst[i*ds+j] = (value-bias)*sc[4i] - sc[4i+1] and high nibble j
// gives dst[i*ds+hoff+j] = (value-bias)*sc[4i+2] - sc[4i+3].
//
//go:noescape
func dequantNib(q *byte, nb int, ss int, dst *float32, ds int, hoff int, bias float32, sc *float32)

// dequantQ6_Kx dequantizes the Q6_K block at b (210 bytes) to dst[:256],
// given sc[g] = d*scale[g] for its 16 groups.
//
//go:noescape
func dequantQ6_Kx(b *byte, dst *float32, sc *float32)

// dequantQ4_0x and dequantQ8_0x dequantize nb blocks at src to dst.
//
//go:noescape
func dequantQ4_0x(src *byte, nb int, dst *float32)

//go:noescape
func dequantQ8_0x(src *byte, nb int, dst *float32)

// dequantF16x converts 8*n8 little-endian halves at q to dst.
//
//go:noescape
func dequantF16x(q *byte, n8 int, dst *float32)

// nib checks dequantNib's operands and calls it.
func nib(q []byte, nb, ss int, dst []float32, ds, hoff int, bias float32, sc []float32) {
	if nb <= 0 {
		return
	}
	if len(q) < (nb-1)*ss+16 || len(dst) < (nb-1)*ds+hoff+16 || len(sc) < 4*nb {
		panic(fmt.Sprintf("quant: dequantNib of %d chunks: %d bytes, %d values, %d scales", nb, len(q), len(dst), len(sc)))
	}
	dequantNib(&q[0], nb, ss, &dst[0], ds, hoff, bias, &sc[0])
}

// nibBatch is how many blocks the Q4_0 and Q4_1 dequantizers pass to
// dequantNib at a time.
const nibBatch = 16

func dequantQ4_0(src []byte, dst []float32) {
	nb := len(dst) / 32
	if nb == 0 {
		return
	}
	if len(src) < 18*nb || len(dst) < 32*nb {
		panic(fmt.Sprintf("quant: Q4_0 dequantization of %d blocks: %d bytes, %d values", nb, len(src), len(dst)))
	}
	dequantQ4_0x(&src[0], nb, &dst[0])
}

func dequantQ4_1(src []byte, dst []float32) {
	var sc [4 * nibBatch]float32
	nb := len(dst) / 32
	for i0 := 0; i0 < nb; i0 += nibBatch {
		n := min(nibBatch, nb-i0)
		for i := range n {
			// x = q*d + m, computed as q*d - (-m): the same rounding.
			d, m := halfAt(src[20*(i0+i):]), halfAt(src[20*(i0+i)+2:])
			sc[4*i], sc[4*i+1], sc[4*i+2], sc[4*i+3] = d, -m, d, -m
		}
		nib(src[20*i0+4:], n, 20, dst[32*i0:], 32, 16, 0, sc[:])
	}
}

func dequantQ4_K(src []byte, dst []float32) {
	var sc [16]float32
	for i := 0; i < len(dst)/256; i++ {
		b := src[144*i : 144*i+144]
		d, dmin := halfAt(b), halfAt(b[2:])
		for g := range 4 {
			s1, m1 := scaleMinK4(2*g, b[4:16])
			s2, m2 := scaleMinK4(2*g+1, b[4:16])
			sc[4*g], sc[4*g+1] = d*float32(s1), dmin*float32(m1)
			sc[4*g+2], sc[4*g+3] = d*float32(s2), dmin*float32(m2)
		}
		// Bytes 32g..32g+15 of qs hold elements 64g.. (low nibbles) and
		// 64g+32.. (high); bytes 32g+16.. hold the next 16 of each.
		y := dst[256*i : 256*i+256]
		nib(b[16:], 4, 32, y, 64, 32, 0, sc[:])
		nib(b[32:], 4, 32, y[16:], 64, 32, 0, sc[:])
	}
}

func dequantQ8_0(src []byte, dst []float32) {
	nb := len(dst) / 32
	if nb == 0 {
		return
	}
	if len(src) < 34*nb || len(dst) < 32*nb {
		panic(fmt.Sprintf("quant: Q8_0 dequantization of %d blocks: %d bytes, %d values", nb, len(src), len(dst)))
	}
	dequantQ8_0x(&src[0], nb, &dst[0])
}

func dequantQ6_K(src []byte, dst []float32) {
	var sc [16]float32
	for i := 0; i < len(dst)/256; i++ {
		b := src[210*i : 210*i+210]
		d := halfAt(b[208:])
		for g := range 16 {
			sc[g] = d * float32(int8(b[192+g]))
		}
		y := dst[256*i : 256*i+256]
		dequantQ6_Kx(&b[0], &y[0], &sc[0])
	}
}

func dequantF16(src []byte, dst []float32) {
	n8 := len(dst) / 8
	if n8 > 0 {
		if len(src) < 16*n8 {
			panic(fmt.Sprintf("quant: F16 dequantization of %d values: %d bytes", len(dst), len(src)))
		}
		dequantF16x(&src[0], n8, &dst[0])
	}
	for i := 8 * n8; i < len(dst); i++ {
		dst[i] = f16Table[uint16(src[2*i])|uint16(src[2*i+1])<<8]
	}
}
