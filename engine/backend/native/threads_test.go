package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// withThreads runs f with GOMAXPROCS, and so the library's threads, at n.
func withThreads(n int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	f()
}

// splitBits fails unless got and want are the same float32 bits, every one
// written (out buffers start as NaN, which no kernel here returns).
func splitBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: output %d of %d never written", what, i, len(want))
		}
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: output %d is %g, %g on one thread", what, i, got[i], want[i])
		}
	}
}

func nans(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

// TestThreadsGiveTheSameBits runs every kernel the library splits among its
// threads (native/cpu/pool.c) on 1, 2, 3 and 5 threads, at sizes whose
// ranges do not divide evenly and large enough to be split, and checks that
// every output is written and has the bits one thread gives: a split never
// changes a result. kvs_add, which adds in place, also shows that each
// element is done exactly once: 70,001 halves plus ones must all be 1.5.
func TestThreadsGiveTheSameBits(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(11, 12))
	threads := []int{2, 3, 5}

	type shape struct {
		typ  quant.Type
		cols int
	}
	var shapes []shape
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		shapes = append(shapes, shape{typ, 512})
		if typ.BlockSize() == 256 { // rows long enough to be stored in panels
			shapes = append(shapes, shape{typ, 256 * (panelBlocks(l, typ) + 3)})
		}
	}
	for _, s := range shapes {
		const rows = 333
		typ, cols := s.typ, s.cols
		w, _ := randWeights(t, r, typ, rows, cols)
		pk, _ := l.Pack(typ, w, rows, cols)  // nil for types without a packed form
		for _, n := range []int{1, 7, 130} { // 130 vectors: their rounding is split too
			x := randVec(r, n*cols)
			var want, wantP []float32
			withThreads(1, func() {
				want = nans(n * rows)
				if err := l.MatMul(typ, w, rows, cols, x, n, want); err != nil {
					t.Fatal(err)
				}
				if pk != nil {
					wantP = nans(n * rows)
					if err := l.MatMulPacked(pk, x, n, wantP); err != nil {
						t.Fatal(err)
					}
				}
			})
			for _, th := range threads {
				withThreads(th, func() {
					got := nans(n * rows)
					if err := l.MatMul(typ, w, rows, cols, x, n, got); err != nil {
						t.Fatal(err)
					}
					splitBits(t, fmt.Sprintf("%s matmul, %d columns, %d vectors, %d threads", typ, cols, n, th), got, want)
					if pk != nil {
						got = nans(n * rows)
						if err := l.MatMulPacked(pk, x, n, got); err != nil {
							t.Fatal(err)
						}
						splitBits(t, fmt.Sprintf("%s packed matmul, %d columns, %d vectors, %d threads", typ, cols, n, th), got, wantP)
					}
				})
			}
		}
	}

	const sw = 10007
	gate, up := randVec(r, sw), randVec(r, sw)
	want := nans(sw)
	withThreads(1, func() {
		if err := l.SwiGLU(want, gate, up); err != nil {
			t.Fatal(err)
		}
	})
	for _, th := range threads {
		withThreads(th, func() {
			got := nans(sw)
			if err := l.SwiGLU(got, gate, up); err != nil {
				t.Fatal(err)
			}
			splitBits(t, fmt.Sprintf("swiglu, %d threads", th), got, want)
		})
	}

	const na = 70001
	ones := make([]float32, na)
	for i := range ones {
		ones[i] = 1
	}
	for _, th := range append([]int{1}, threads...) {
		withThreads(th, func() {
			x := make([]float32, na)
			for i := range x {
				x[i] = 0.5
			}
			if err := l.Add(x, ones); err != nil {
				t.Fatal(err)
			}
			for i, v := range x {
				if v != 1.5 {
					t.Fatalf("add, %d threads: element %d is %g, want 1.5 (added %g times)", th, i, v, (v-0.5)/1)
				}
			}
		})
	}

	// Attention: five rows of three sequences (a prefill's and two decode
	// rows), each (row, KV head) pair a unit of the split.
	for _, c := range []attnCase{
		{k: kvstore.F16, v: kvstore.F16, blockSize: 16, kvHeads: 4, heads: 8, dim: 64},
		{k: kvstore.Q8_0, v: kvstore.Int4, blockSize: 7, kvHeads: 3, heads: 9, dim: 40, keyGroup: 5, valueGroup: 8},
		{k: kvstore.Int8, v: kvstore.Int8, blockSize: 32, kvHeads: 2, heads: 2, dim: 32, keyGroup: 8, valueGroup: 16},
	} {
		lens := []int{50, 3, 77}
		s, tables := seqStore(t, r, c, lens)
		rows := []AttnRow{{NPos: 48, Blocks: tables[0]}, {NPos: 49, Blocks: tables[0]}, {NPos: 50, Blocks: tables[0]},
			{NPos: 3, Blocks: tables[1]}, {NPos: 77, Blocks: tables[2]}}
		q := randVec(r, len(rows)*c.heads*c.dim)
		scale := float32(1 / math.Sqrt(float64(c.dim)))
		want := nans(len(q))
		withThreads(1, func() {
			if err := l.Attention(s, 1, c.heads, scale, q, rows, want); err != nil {
				t.Fatal(err)
			}
		})
		for _, th := range threads {
			withThreads(th, func() {
				got := nans(len(q))
				if err := l.Attention(s, 1, c.heads, scale, q, rows, got); err != nil {
					t.Fatal(err)
				}
				splitBits(t, fmt.Sprintf("attention %v/%v, block size %d, %d threads", c.k, c.v, c.blockSize, th), got, want)
			})
		}
	}
}

// TestSum64 checks the read probe's sum against Go's on every path, at
// lengths around its 32-word loops and its split, on 1 to 3 threads.
func TestSum64(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]uint64, 1<<17+37)
	for i := range w {
		w[i] = r.Uint64()
	}
	eachPath(t, l, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 31, 32, 33, 100003, len(w)} {
			var want uint64
			for _, v := range w[:n] {
				want += v
			}
			for _, th := range []int{1, 2, 3} {
				withThreads(th, func() {
					got, err := l.Sum64(w[:n])
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("%d words, %d threads: sum %#x, want %#x", n, th, got, want)
					}
				})
			}
		}
	})
}
