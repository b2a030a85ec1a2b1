package quant

import (
	"encoding/binary"
	"math"
)

// The encoders for F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow ggml's
// reference encoders and produce the same bytes as llama-quantize without an
// importance matrix (TestQuantizeMatchesLlamaCpp checks this). IQ4_NL tries a
// few scales and keeps the best. The K-quant encoders are simpler than
// llama.cpp's: each sub-block takes its range (or absolute maximum) as its
// scale, the sub-block scales are rounded to the format's bits, and every
// value is rounded to the nearest level of its rounded scale.

// putHalf stores f as a half at b[0:2] and returns the value stored.
func putHalf(b []byte, f float32) float32 {
	h := F32ToF16(f)
	binary.LittleEndian.PutUint16(b, h)
	return F16ToF32(h)
}

// roundInt rounds half away from zero, as C's roundf.
func roundInt(f float32) int { return int(math.Round(float64(f))) }

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// absMax returns the value of largest magnitude in x (with its sign) and
// that magnitude.
func absMax(x []float32) (signed, amax float32) {
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, signed = a, v
		}
	}
	return signed, amax
}

func minMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantF32(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func quantF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
	}
}

func quantBF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	}
}

func quantQ8_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[34*i:34*i+34]
		_, amax := absMax(x)
		d := amax / 127
		putHalf(b, d)
		id := inv(d)
		for j, v := range x {
			b[2+j] = byte(int8(roundInt(v * id)))
		}
	}
}

func quantQ4_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[18*i:18*i+18]
		mx, _ := absMax(x)
		d := mx / -8
		putHalf(b, d)
		id := inv(d)
		for j := 0; j < 16; j++ {
			q0 := min(15, int(x[j]*id+8.5))
			q1 := min(15, int(x[j+16]*id+8.5))
			b[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ4_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[20*i:20*i+20]
		lo, hi := minMax(x)
		d := (hi - lo) / 15
		putHalf(b, d)
		putHalf(b[2:], lo)
		id := inv(d)
		for j := 0; j < 16; j++ {
			q0 := min(15, int((x[j]-lo)*id+0.5))
			q1 := min(15, int((x[j+16]-lo)*id+0.5))
			b[4+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ5_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[22*i:22*i+22]
		mx, _ := absMax(x)
		d := mx / -16
		putHalf(b, d)
		id := inv(d)
		var qh uint32
		for j := 0; j < 16; j++ {
			q0 := min(31, int(x[j]*id+16.5))
			q1 := min(31, int(x[j+16]*id+16.5))
			b[6+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

func quantQ5_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[24*i:24*i+24]
		lo, hi := minMax(x)
		d := (hi - lo) / 31
		putHalf(b, d)
		putHalf(b[2:], lo)
		id := inv(d)
		var qh uint32
		for j := 0; j < 16; j++ {
			q0 := min(31, int((x[j]-lo)*id+0.5))
			q1 := min(31, int((x[j+16]-lo)*id+0.5))
			b[8+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}

// nearestIQ4NL returns the index of the IQ4_NL level nearest to v.
func nearestIQ4NL(v float32) int {
	best, bestErr := 0, float32(math.Inf(1))
	for k, l := range kvaluesIQ4NL {
		if e := float32(math.Abs(float64(v - float32(l)))); e < bestErr {
			best, bestErr = k, e
		}
	}
	return best
}

// quantIQ4_NL tries 15 scales around max/-127, maps each value to its
// nearest level, and keeps the least-squares scale of the best mapping.
func quantIQ4_NL(src []float32, dst []byte) {
	var idx, best [32]int
	for i := 0; i < len(src)/32; i++ {
		x, b := src[32*i:32*i+32], dst[18*i:18*i+18]
		mx, amax := absMax(x)
		if amax == 0 {
			clear(b)
			continue
		}
		var bestScale, bestGain float32 = 0, -1
		for try := -7; try <= 7; try++ {
			id := (float32(try) + float32(kvaluesIQ4NL[0])) / mx
			var sqx, sq2 float32
			for j, v := range x {
				idx[j] = nearestIQ4NL(v * id)
				l := float32(kvaluesIQ4NL[idx[j]])
				sqx += l * v
				sq2 += l * l
			}
			if sq2 > 0 && sqx*sqx/sq2 > bestGain {
				bestGain, bestScale, best = sqx*sqx/sq2, sqx/sq2, idx
			}
		}
		putHalf(b, bestScale)
		for j := 0; j < 16; j++ {
			b[2+j] = byte(best[j]) | byte(best[j+16])<<4
		}
	}
}

// affineFit returns, for a sub-block of a K-quant with minimum, the scale
// and (non-negative) min such that x ≈ scale*q - min with q in 0..nmax.
func affineFit(x []float32, nmax int) (scale, mn float32) {
	lo, hi := minMax(x)
	lo = min(lo, 0)
	return (hi - lo) / float32(nmax), -lo
}

// quantKMin encodes one super-block of a K-quant with per-sub-block scales
// and mins (Q2_K, Q4_K, Q5_K). sub is the sub-block size, nmax the largest
// quant, sbits the bits of each scale and min. It returns the rounded super
// scales and stores the 6-/4-bit scales and mins in ls and lm and each
// element's quant in q.
func quantKMin(x []float32, sub, nmax, sbits int, putD func(d, dmin float32) (float32, float32), ls, lm []uint8, q []uint8) {
	ns := len(x) / sub
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for s := 0; s < ns; s++ {
		scales[s], mins[s] = affineFit(x[sub*s:sub*s+sub], nmax)
		maxScale, maxMin = max(maxScale, scales[s]), max(maxMin, mins[s])
	}
	smax := float32(int(1)<<sbits - 1)
	d, dmin := putD(maxScale/smax, maxMin/smax)
	for s := 0; s < ns; s++ {
		ls[s] = uint8(clampInt(roundInt(scales[s]*inv(d)), 0, int(smax)))
		lm[s] = uint8(clampInt(roundInt(mins[s]*inv(dmin)), 0, int(smax)))
		dq, dm := d*float32(ls[s]), dmin*float32(lm[s])
		idq := inv(dq)
		for l := 0; l < sub; l++ {
			q[sub*s+l] = uint8(clampInt(roundInt((x[sub*s+l]+dm)*idq), 0, nmax))
		}
	}
}

func quantQ2_K(src []float32, dst []byte) {
	var ls, lm [16]uint8
	var q [256]uint8
	for i := 0; i < len(src)/256; i++ {
		x, b := src[256*i:256*i+256], dst[84*i:84*i+84]
		clear(b)
		quantKMin(x, 16, 3, 4, func(d, dmin float32) (float32, float32) {
			return putHalf(b[80:], d), putHalf(b[82:], dmin)
		}, ls[:], lm[:], q[:])
		for s := 0; s < 16; s++ {
			b[s] = ls[s] | lm[s]<<4
		}
		for e := 0; e < 256; e++ {
			h, j, kl := e/128, e%128/32, e%32
			b[16+32*h+kl] |= q[e] << (2 * j)
		}
	}
}

// packScaleMinK4 is the inverse of scaleMinK4.
func packScaleMinK4(ls, lm []uint8, b []byte) {
	b = b[:12]
	clear(b)
	for j := 0; j < 8; j++ {
		if j < 4 {
			b[j] |= ls[j] & 63
			b[j+4] |= lm[j] & 63
		} else {
			b[j+4] = ls[j]&15 | (lm[j]&15)<<4
			b[j-4] |= (ls[j] >> 4) << 6
			b[j] |= (lm[j] >> 4) << 6
		}
	}
}

func quantQ4_K(src []float32, dst []byte) {
	var ls, lm [16]uint8
	var q [256]uint8
	for i := 0; i < len(src)/256; i++ {
		x, b := src[256*i:256*i+256], dst[144*i:144*i+144]
		quantKMin(x, 32, 15, 6, func(d, dmin float32) (float32, float32) {
			return putHalf(b[0:], d), putHalf(b[2:], dmin)
		}, ls[:], lm[:], q[:])
		packScaleMinK4(ls[:8], lm[:8], b[4:16])
		for g := 0; g < 4; g++ {
			for l := 0; l < 32; l++ {
				b[16+32*g+l] = q[64*g+l] | q[64*g+32+l]<<4
			}
		}
	}
}

func quantQ5_K(src []float32, dst []byte) {
	var ls, lm [16]uint8
	var q [256]uint8
	for i := 0; i < len(src)/256; i++ {
		x, b := src[256*i:256*i+256], dst[176*i:176*i+176]
		quantKMin(x, 32, 31, 6, func(d, dmin float32) (float32, float32) {
			return putHalf(b[0:], d), putHalf(b[2:], dmin)
		}, ls[:], lm[:], q[:])
		packScaleMinK4(ls[:8], lm[:8], b[4:16])
		qh := b[16:48]
		clear(qh)
		for g := 0; g < 4; g++ {
			for l := 0; l < 32; l++ {
				lo, hi := q[64*g+l], q[64*g+32+l]
				b[48+32*g+l] = lo&15 | (hi&15)<<4
				qh[l] |= (lo>>4)<<(2*g) | (hi>>4)<<(2*g+1)
			}
		}
	}
}

// quantKSym encodes one super-block of a symmetric K-quant (Q3_K, Q6_K):
// sub-blocks of 16 with signed integer scales in [-smax, smax-1] (smax 32 or
// 128) and quants in [-nmax, nmax-1]. It returns the quants (offset by
// +nmax) in q and the signed scales in ls.
func quantKSym(x []float32, nmax, smax int, putD func(d float32) float32, ls []int, q []uint8) {
	var scales [16]float32
	var maxScale, amaxScale float32
	for s := 0; s < 16; s++ {
		mx, _ := absMax(x[16*s : 16*s+16])
		scales[s] = mx / float32(-nmax)
		if a := float32(math.Abs(float64(scales[s]))); a > amaxScale {
			amaxScale, maxScale = a, scales[s]
		}
	}
	iscale := float32(0)
	if maxScale != 0 {
		iscale = float32(-smax) / maxScale
	}
	d := putD(inv(iscale))
	for s := 0; s < 16; s++ {
		ls[s] = clampInt(roundInt(iscale*scales[s]), -smax, smax-1)
		idq := inv(d * float32(ls[s]))
		for l := 0; l < 16; l++ {
			q[16*s+l] = uint8(clampInt(roundInt(x[16*s+l]*idq), -nmax, nmax-1) + nmax)
		}
	}
}

func quantQ3_K(src []float32, dst []byte) {
	var ls [16]int
	var q [256]uint8
	for i := 0; i < len(src)/256; i++ {
		x, b := src[256*i:256*i+256], dst[110*i:110*i+110]
		clear(b)
		quantKSym(x, 4, 32, func(d float32) float32 { return putHalf(b[108:], d) }, ls[:], q[:])
		sc := b[96:108]
		for s := 0; s < 16; s++ {
			v := uint8(ls[s] + 32)
			if s < 8 {
				sc[s] |= v & 15
			} else {
				sc[s-8] |= (v & 15) << 4
			}
			sc[8+s%4] |= (v >> 4) << (2 * (s / 4))
		}
		for e := 0; e < 256; e++ {
			h, j, kl := e/128, e%128/32, e%32
			b[32+32*h+kl] |= (q[e] & 3) << (2 * j)
			b[kl] |= (q[e] >> 2 & 1) << (4*h + j)
		}
	}
}

func quantQ6_K(src []float32, dst []byte) {
	var ls [16]int
	var q [256]uint8
	for i := 0; i < len(src)/256; i++ {
		x, b := src[256*i:256*i+256], dst[210*i:210*i+210]
		quantKSym(x, 32, 128, func(d float32) float32 { return putHalf(b[208:], d) }, ls[:], q[:])
		for s := 0; s < 16; s++ {
			b[192+s] = byte(int8(ls[s]))
		}
		for h := 0; h < 2; h++ {
			y := q[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				q1, q2, q3, q4 := y[l], y[l+32], y[l+64], y[l+96]
				b[64*h+l] = q1&15 | (q3&15)<<4
				b[64*h+32+l] = q2&15 | (q4&15)<<4
				b[128+32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	}
}
