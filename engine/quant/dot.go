package quant

import "sync"

// Lookup tables turn small integer values into float32 when blocks are
// unpacked (unpack.go); the dot products themselves are in this file and
// mac.go.

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
	q6F                    [256]float32 // float32(q-32), for Q6_K

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
		q6F[i] = float32(i - 32)
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

// Byte-lane masks for SWAR unpacking.
const (
	m4    = 0x0f0f0f0f0f0f0f0f
	m2    = 0x0303030303030303
	mask1 = 0x0101010101010101
)

// subSums fills sums with the sums (sumX) of consecutive n-element groups
// of x.
func subSums(x []float32, n int, sums []float32) {
	for s := range sums {
		sums[s] = sumX(x[n*s : n*s+n])
	}
}

// dotScratch is the working memory of one DotFunc call.
type dotScratch struct {
	w    [span]float32
	p    [16]float32
	sums [span / 16]float32
	acc  [1]float32
}

var dotPool = sync.Pool{New: func() any { return new(dotScratch) }}

// dot is the dot product DotFunc returns for f's type: span by span,
// unpack, multiply group by group (pairProducts), finish.
func (f *format) dot(row []byte, x []float32) float32 {
	nb := len(x) / f.bs
	if len(x)%f.bs != 0 || len(row) != nb*f.ts {
		dotLenPanic(f.typ, len(row), len(x))
	}
	s := dotPool.Get().(*dotScratch)
	defer dotPool.Put(s)
	s.acc[0] = 0
	for e0 := 0; e0 < len(x); e0 += span {
		n := min(span, len(x)-e0)
		b := row[e0/f.bs*f.ts:]
		xs := x[e0 : e0+n]
		f.unpack(b, n, &s.w)
		pairProducts(&s.w, xs, n, &s.p)
		var sums []float32
		if f.sumGroup > 0 {
			sums = s.sums[:n/f.sumGroup]
			subSums(xs, f.sumGroup, sums)
		}
		f.finish(b, n, s.p[:], sums, 0, s.acc[:])
	}
	return s.acc[0]
}

// pairProducts writes to p[g] the product of group g of w with group g of
// x, for the n elements of a span (the last group may be short).
func pairProducts(w *[span]float32, x []float32, n int, p *[16]float32) {
	ng := n / 16
	macTile(1, 1, w[:], span, x, 0, ng, p[:], 16)
	if n%16 != 0 {
		p[ng] = dotShort(w[16*ng:n], x[16*ng:])
	}
}

// dotF32 and dotF16 are DotFunc(F32) and DotFunc(F16).
func dotF32(row []byte, x []float32) float32 { return formats[F32].dot(row, x) }
func dotF16(row []byte, x []float32) float32 { return formats[F16].dot(row, x) }
