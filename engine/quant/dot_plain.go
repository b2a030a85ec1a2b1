package quant

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The plain types are summed in chunks of 32 elements, each with eight
// interleaved partial sums (element j goes to sum j%8), and each chunk's
// sum is added to the row total.

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

func dotF32(row []byte, x []float32) float32 {
	checkDot(F32, row, x, 1, 4)
	w, ok := f32View(row)
	if !ok {
		return dotF32Bytes(row, x)
	}
	var sum float32
	for len(x) > 0 {
		n := min(len(x), 32)
		r, xs := w[:n], x[:n]
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		for len(r) >= 8 && len(xs) >= 8 {
			s0 += r[0] * xs[0]
			s1 += r[1] * xs[1]
			s2 += r[2] * xs[2]
			s3 += r[3] * xs[3]
			s4 += r[4] * xs[4]
			s5 += r[5] * xs[5]
			s6 += r[6] * xs[6]
			s7 += r[7] * xs[7]
			r, xs = r[8:], xs[8:]
		}
		for j, v := range xs {
			s0 += r[j] * v // a chunk shorter than 8
		}
		sum += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
		w, x = w[n:], x[n:]
	}
	return sum
}

// f32At reads the little-endian float32 at b[o:o+4].
func f32At(b []byte, o int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[o:])) }

// dotF32Bytes is dotF32 for rows that cannot be read in place: the same
// sums in the same order, so the same result.
func dotF32Bytes(row []byte, x []float32) float32 {
	var sum float32
	for len(x) > 0 {
		n := min(len(x), 32)
		r, xs := row[:4*n], x[:n]
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		for len(r) >= 32 && len(xs) >= 8 {
			s0 += f32At(r, 0) * xs[0]
			s1 += f32At(r, 4) * xs[1]
			s2 += f32At(r, 8) * xs[2]
			s3 += f32At(r, 12) * xs[3]
			s4 += f32At(r, 16) * xs[4]
			s5 += f32At(r, 20) * xs[5]
			s6 += f32At(r, 24) * xs[6]
			s7 += f32At(r, 28) * xs[7]
			r, xs = r[32:], xs[8:]
		}
		for j, v := range xs {
			s0 += f32At(r, 4*j) * v
		}
		sum += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
		row, x = row[4*n:], x[n:]
	}
	return sum
}

// f16At and bf16At read the 16-bit value at b[o:o+2] as float32.
func f16At(b []byte, o int) float32 { return f16Table[binary.LittleEndian.Uint16(b[o:])] }
func bf16At(b []byte, o int) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[o:])) << 16)
}

func dotF16(row []byte, x []float32) float32 {
	checkDot(F16, row, x, 1, 2)
	var sum float32
	for len(x) > 0 {
		n := min(len(x), 32)
		r, xs := row[:2*n], x[:n]
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		for len(r) >= 16 && len(xs) >= 8 {
			s0 += f16At(r, 0) * xs[0]
			s1 += f16At(r, 2) * xs[1]
			s2 += f16At(r, 4) * xs[2]
			s3 += f16At(r, 6) * xs[3]
			s4 += f16At(r, 8) * xs[4]
			s5 += f16At(r, 10) * xs[5]
			s6 += f16At(r, 12) * xs[6]
			s7 += f16At(r, 14) * xs[7]
			r, xs = r[16:], xs[8:]
		}
		for j, v := range xs {
			s0 += f16At(r, 2*j) * v
		}
		sum += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
		row, x = row[2*n:], x[n:]
	}
	return sum
}

func dotBF16(row []byte, x []float32) float32 {
	checkDot(BF16, row, x, 1, 2)
	var sum float32
	for len(x) > 0 {
		n := min(len(x), 32)
		r, xs := row[:2*n], x[:n]
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		for len(r) >= 16 && len(xs) >= 8 {
			s0 += bf16At(r, 0) * xs[0]
			s1 += bf16At(r, 2) * xs[1]
			s2 += bf16At(r, 4) * xs[2]
			s3 += bf16At(r, 6) * xs[3]
			s4 += bf16At(r, 8) * xs[4]
			s5 += bf16At(r, 10) * xs[5]
			s6 += bf16At(r, 12) * xs[6]
			s7 += bf16At(r, 14) * xs[7]
			r, xs = r[16:], xs[8:]
		}
		for j, v := range xs {
			s0 += bf16At(r, 2*j) * v
		}
		sum += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
		row, x = row[2*n:], x[n:]
	}
	return sum
}
