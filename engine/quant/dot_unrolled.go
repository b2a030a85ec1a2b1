package quant

// Unrolled block kernels for the most common types. Each block is viewed
// as an array so that every index is a constant and no bounds check is
// left in the loop.

func dotQ8_0(row []byte, x []float32) float32 {
	nb := checkDot(Q8_0, row, x, 32, 34)
	var sum float32
	for i := range nb {
		b := (*[34]byte)(row[34*i:])
		xs := (*[32]float32)(x[32*i:])
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		s0 += int8F[b[2]] * xs[0]
		s1 += int8F[b[3]] * xs[1]
		s2 += int8F[b[4]] * xs[2]
		s3 += int8F[b[5]] * xs[3]
		s4 += int8F[b[6]] * xs[4]
		s5 += int8F[b[7]] * xs[5]
		s6 += int8F[b[8]] * xs[6]
		s7 += int8F[b[9]] * xs[7]
		s0 += int8F[b[10]] * xs[8]
		s1 += int8F[b[11]] * xs[9]
		s2 += int8F[b[12]] * xs[10]
		s3 += int8F[b[13]] * xs[11]
		s4 += int8F[b[14]] * xs[12]
		s5 += int8F[b[15]] * xs[13]
		s6 += int8F[b[16]] * xs[14]
		s7 += int8F[b[17]] * xs[15]
		s0 += int8F[b[18]] * xs[16]
		s1 += int8F[b[19]] * xs[17]
		s2 += int8F[b[20]] * xs[18]
		s3 += int8F[b[21]] * xs[19]
		s4 += int8F[b[22]] * xs[20]
		s5 += int8F[b[23]] * xs[21]
		s6 += int8F[b[24]] * xs[22]
		s7 += int8F[b[25]] * xs[23]
		s0 += int8F[b[26]] * xs[24]
		s1 += int8F[b[27]] * xs[25]
		s2 += int8F[b[28]] * xs[26]
		s3 += int8F[b[29]] * xs[27]
		s4 += int8F[b[30]] * xs[28]
		s5 += int8F[b[31]] * xs[29]
		s6 += int8F[b[32]] * xs[30]
		s7 += int8F[b[33]] * xs[31]
		sum += halfAt(b[:]) * (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
	}
	return sum
}

func dotQ4_0(row []byte, x []float32) float32 {
	nb := checkDot(Q4_0, row, x, 32, 18)
	var sum float32
	for i := range nb {
		b := (*[18]byte)(row[18*i:])
		xs := (*[32]float32)(x[32*i:])
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		s0 += nibbleS8Lo[b[2]] * xs[0]
		s1 += nibbleS8Hi[b[2]] * xs[16]
		s2 += nibbleS8Lo[b[3]] * xs[1]
		s3 += nibbleS8Hi[b[3]] * xs[17]
		s4 += nibbleS8Lo[b[4]] * xs[2]
		s5 += nibbleS8Hi[b[4]] * xs[18]
		s6 += nibbleS8Lo[b[5]] * xs[3]
		s7 += nibbleS8Hi[b[5]] * xs[19]
		s0 += nibbleS8Lo[b[6]] * xs[4]
		s1 += nibbleS8Hi[b[6]] * xs[20]
		s2 += nibbleS8Lo[b[7]] * xs[5]
		s3 += nibbleS8Hi[b[7]] * xs[21]
		s4 += nibbleS8Lo[b[8]] * xs[6]
		s5 += nibbleS8Hi[b[8]] * xs[22]
		s6 += nibbleS8Lo[b[9]] * xs[7]
		s7 += nibbleS8Hi[b[9]] * xs[23]
		s0 += nibbleS8Lo[b[10]] * xs[8]
		s1 += nibbleS8Hi[b[10]] * xs[24]
		s2 += nibbleS8Lo[b[11]] * xs[9]
		s3 += nibbleS8Hi[b[11]] * xs[25]
		s4 += nibbleS8Lo[b[12]] * xs[10]
		s5 += nibbleS8Hi[b[12]] * xs[26]
		s6 += nibbleS8Lo[b[13]] * xs[11]
		s7 += nibbleS8Hi[b[13]] * xs[27]
		s0 += nibbleS8Lo[b[14]] * xs[12]
		s1 += nibbleS8Hi[b[14]] * xs[28]
		s2 += nibbleS8Lo[b[15]] * xs[13]
		s3 += nibbleS8Hi[b[15]] * xs[29]
		s4 += nibbleS8Lo[b[16]] * xs[14]
		s5 += nibbleS8Hi[b[16]] * xs[30]
		s6 += nibbleS8Lo[b[17]] * xs[15]
		s7 += nibbleS8Hi[b[17]] * xs[31]
		sum += halfAt(b[:]) * (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
	}
	return sum
}

func dotIQ4_NL(row []byte, x []float32) float32 {
	nb := checkDot(IQ4_NL, row, x, 32, 18)
	var sum float32
	for i := range nb {
		b := (*[18]byte)(row[18*i:])
		xs := (*[32]float32)(x[32*i:])
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		s0 += nibbleNLLo[b[2]] * xs[0]
		s1 += nibbleNLHi[b[2]] * xs[16]
		s2 += nibbleNLLo[b[3]] * xs[1]
		s3 += nibbleNLHi[b[3]] * xs[17]
		s4 += nibbleNLLo[b[4]] * xs[2]
		s5 += nibbleNLHi[b[4]] * xs[18]
		s6 += nibbleNLLo[b[5]] * xs[3]
		s7 += nibbleNLHi[b[5]] * xs[19]
		s0 += nibbleNLLo[b[6]] * xs[4]
		s1 += nibbleNLHi[b[6]] * xs[20]
		s2 += nibbleNLLo[b[7]] * xs[5]
		s3 += nibbleNLHi[b[7]] * xs[21]
		s4 += nibbleNLLo[b[8]] * xs[6]
		s5 += nibbleNLHi[b[8]] * xs[22]
		s6 += nibbleNLLo[b[9]] * xs[7]
		s7 += nibbleNLHi[b[9]] * xs[23]
		s0 += nibbleNLLo[b[10]] * xs[8]
		s1 += nibbleNLHi[b[10]] * xs[24]
		s2 += nibbleNLLo[b[11]] * xs[9]
		s3 += nibbleNLHi[b[11]] * xs[25]
		s4 += nibbleNLLo[b[12]] * xs[10]
		s5 += nibbleNLHi[b[12]] * xs[26]
		s6 += nibbleNLLo[b[13]] * xs[11]
		s7 += nibbleNLHi[b[13]] * xs[27]
		s0 += nibbleNLLo[b[14]] * xs[12]
		s1 += nibbleNLHi[b[14]] * xs[28]
		s2 += nibbleNLLo[b[15]] * xs[13]
		s3 += nibbleNLHi[b[15]] * xs[29]
		s4 += nibbleNLLo[b[16]] * xs[14]
		s5 += nibbleNLHi[b[16]] * xs[30]
		s6 += nibbleNLLo[b[17]] * xs[15]
		s7 += nibbleNLHi[b[17]] * xs[31]
		sum += halfAt(b[:]) * (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
	}
	return sum
}

func dotQ4_1(row []byte, x []float32) float32 { return dotQ4_1Sums(row, x, nil) }

// dotQ4_1Sums is dotQ4_1 given the sums of x's 32-element blocks (nil: it
// computes them, with the same function, so the result is the same).
func dotQ4_1Sums(row []byte, x []float32, sums []float32) float32 {
	nb := checkDot(Q4_1, row, x, 32, 20)
	var sum float32
	for i := range nb {
		b := (*[20]byte)(row[20*i:])
		xs := (*[32]float32)(x[32*i:])
		var sx float32
		if sums != nil {
			sx = sums[i]
		} else {
			sx = sumX(xs[:])
		}
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		s0 += nibbleULo[b[4]] * xs[0]
		s1 += nibbleUHi[b[4]] * xs[16]
		s2 += nibbleULo[b[5]] * xs[1]
		s3 += nibbleUHi[b[5]] * xs[17]
		s4 += nibbleULo[b[6]] * xs[2]
		s5 += nibbleUHi[b[6]] * xs[18]
		s6 += nibbleULo[b[7]] * xs[3]
		s7 += nibbleUHi[b[7]] * xs[19]
		s0 += nibbleULo[b[8]] * xs[4]
		s1 += nibbleUHi[b[8]] * xs[20]
		s2 += nibbleULo[b[9]] * xs[5]
		s3 += nibbleUHi[b[9]] * xs[21]
		s4 += nibbleULo[b[10]] * xs[6]
		s5 += nibbleUHi[b[10]] * xs[22]
		s6 += nibbleULo[b[11]] * xs[7]
		s7 += nibbleUHi[b[11]] * xs[23]
		s0 += nibbleULo[b[12]] * xs[8]
		s1 += nibbleUHi[b[12]] * xs[24]
		s2 += nibbleULo[b[13]] * xs[9]
		s3 += nibbleUHi[b[13]] * xs[25]
		s4 += nibbleULo[b[14]] * xs[10]
		s5 += nibbleUHi[b[14]] * xs[26]
		s6 += nibbleULo[b[15]] * xs[11]
		s7 += nibbleUHi[b[15]] * xs[27]
		s0 += nibbleULo[b[16]] * xs[12]
		s1 += nibbleUHi[b[16]] * xs[28]
		s2 += nibbleULo[b[17]] * xs[13]
		s3 += nibbleUHi[b[17]] * xs[29]
		s4 += nibbleULo[b[18]] * xs[14]
		s5 += nibbleUHi[b[18]] * xs[30]
		s6 += nibbleULo[b[19]] * xs[15]
		s7 += nibbleUHi[b[19]] * xs[31]
		sq := ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
		sum += halfAt(b[:])*sq + halfAt(b[2:])*sx
	}
	return sum
}
