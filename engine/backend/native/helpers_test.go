package native

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// loadLib loads the library from native/build, skipping the test when it is
// not built.
func loadLib(t testing.TB) *Lib {
	t.Helper()
	l, err := Load("")
	if errors.Is(err, ErrNotFound) {
		t.Skipf("skipping: the native library is not built (run make native): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// eachPath runs f as a subtest for every SIMD path this machine runs, with
// that path forced, and restores the fastest path afterwards.
func eachPath(t *testing.T, l *Lib, f func(t *testing.T)) {
	t.Helper()
	defer l.SetPath(-1)
	for _, p := range l.Paths() {
		if err := l.SetPath(p); err != nil {
			t.Fatal(err)
		}
		t.Run(l.PathName(p), f)
	}
}

// randVec returns n values, mostly N(0,1), with a few outliers ten times
// larger (as activations have).
func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if r.IntN(50) == 0 {
			x[i] *= 10
		}
	}
	return x
}

// sameBits reports the first index where a and b differ in bits, or -1.
func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// rms returns the root mean square of x.
func rms(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s / float64(max(1, len(x))))
}
