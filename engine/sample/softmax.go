package sample

import (
	"math"
)

// Greedy returns the index of the largest logit. Ties go to the lowest index
// and NaN counts as -Inf. It returns 0 when every logit is NaN or -Inf, and
// -1 when logits is empty.
func Greedy(logits []float32) int {
	if len(logits) == 0 {
		return -1
	}
	best := 0
	bestV := float32(math.Inf(-1))
	for i, v := range logits {
		if v > bestV { // false for NaN, so NaN never wins
			best, bestV = i, v
		}
	}
	return best
}

// Softmax writes the probabilities of logits into dst and returns it; dst is
// grown (reallocated) only when it is shorter than logits. NaN counts as
// -Inf. If some logits are +Inf they share all the probability equally. If
// every logit is -Inf or NaN, every probability is 0. The sums are done in
// float64.
func Softmax(dst, logits []float32) []float32 {
	dst = grow(dst, len(logits))
	maxV, nInf := maxLogit(logits)
	if nInf > 0 {
		for i, v := range logits {
			dst[i] = 0
			if math.IsInf(float64(v), 1) {
				dst[i] = 1 / float32(nInf)
			}
		}
		return dst
	}
	if math.IsInf(maxV, -1) {
		clear(dst)
		return dst
	}
	var sum float64
	for i, v := range logits {
		e := expShift(v, maxV)
		dst[i] = float32(e)
		sum += e
	}
	inv := 1 / sum
	for i := range dst {
		dst[i] = float32(float64(dst[i]) * inv)
	}
	return dst
}

// LogSoftmax writes the log-probabilities of logits into dst and returns it,
// with the same conventions as Softmax: a probability of 0 becomes -Inf.
func LogSoftmax(dst, logits []float32) []float32 {
	dst = grow(dst, len(logits))
	maxV, nInf := maxLogit(logits)
	if nInf > 0 {
		lp := float32(-math.Log(float64(nInf)))
		for i, v := range logits {
			dst[i] = float32(math.Inf(-1))
			if math.IsInf(float64(v), 1) {
				dst[i] = lp
			}
		}
		return dst
	}
	if math.IsInf(maxV, -1) {
		for i := range dst {
			dst[i] = float32(math.Inf(-1))
		}
		return dst
	}
	var sum float64
	for _, v := range logits {
		sum += expShift(v, maxV)
	}
	logSum := math.Log(sum)
	for i, v := range logits {
		if v != v { // NaN
			dst[i] = float32(math.Inf(-1))
			continue
		}
		dst[i] = float32(float64(v) - maxV - logSum)
	}
	return dst
}

// maxLogit returns the largest finite-or-(-Inf) logit ignoring NaN and +Inf,
// and how many logits are +Inf.
func maxLogit(logits []float32) (maxV float64, nPosInf int) {
	maxV = math.Inf(-1)
	for _, v := range logits {
		f := float64(v)
		switch {
		case math.IsInf(f, 1):
			nPosInf++
		case f > maxV:
			maxV = f
		}
	}
	return maxV, nPosInf
}

// expShift returns exp(v - maxV), and 0 for NaN or -Inf.
func expShift(v float32, maxV float64) float64 {
	if v != v {
		return 0
	}
	return math.Exp(float64(v) - maxV)
}

func grow(dst []float32, n int) []float32 {
	if cap(dst) < n {
		return make([]float32, n)
	}
	return dst[:n]
}
