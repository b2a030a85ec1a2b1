package native

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kvscope/engine/quant"

	"github.com/ebitengine/purego"
)

// matTypes are the weight types the library implements.
var matTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1,
	quant.Q5_0, quant.Q5_1, quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_NL}

// actBlock returns the activation block length type t's products round to
// (0: float types, not rounded).
func actBlock(t quant.Type) int {
	switch t {
	case quant.F32, quant.F16, quant.BF16:
		return 0
	case quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return 256
	}
	return 32
}

// matCase is one matmul shape: cols is a whole, odd number of blocks for
// block types, rows no multiple of any tile.
type matCase struct {
	typ        quant.Type
	rows, cols int
	n          []int
}

func matCases() []matCase {
	var cs []matCase
	all := make([]int, 17)
	for i := range all {
		all[i] = i + 1
	}
	for _, typ := range matTypes {
		bs := typ.BlockSize()
		if bs == 1 {
			cs = append(cs, matCase{typ, 13, 5, all}, matCase{typ, 7, 100, []int{1, 4}}, matCase{typ, 37, 1056, []int{1, 3}})
			continue
		}
		odd := 3
		if bs == 32 {
			odd = 33
		}
		cs = append(cs, matCase{typ, 13, bs, all}, matCase{typ, 7, 3 * bs, []int{1, 4}}, matCase{typ, 37, odd * bs, []int{1, 3}})
	}
	return cs
}

// randWeights returns rows×cols random weights quantized to typ, and their
// values as quant.Dequantize decodes them.
func randWeights(t testing.TB, r *rand.Rand, typ quant.Type, rows, cols int) ([]byte, []float32) {
	wf := randVec(r, rows*cols)
	rb, err := typ.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]byte, rows*rb)
	if err := quant.Quantize(typ, wf, w); err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(typ, w, wf); err != nil {
		t.Fatal(err)
	}
	return w, wf
}

// TestMatMulParity compares every type's product on every path with the
// exact product of quant.Dequantize's weights and the activations, within a
// bound that follows from the activation rounding: for an output, the sum
// over activation blocks of half a rounding step (max|x|/127/2) times the
// block's sum of |w|, plus float32 summation error, (cols/16 + blocks + 8)
// · 2^-23 · Σ|w·x|. Float types round nothing, so only the second term
// applies. The worst error relative to the outputs' RMS is logged: about
// 1e-6 for float types, and 2-4% (32-element blocks) to 5-8% (256-element
// blocks) for the 8-bit rounding of these activations, whose 1-in-50
// outliers ten times the rest coarsen their blocks' step. Every path's bits
// must equal the scalar path's.
func TestMatMulParity(t *testing.T) {
	l := loadLib(t)
	scalar := map[string][]float32{}
	eachPath(t, l, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, c := range matCases() {
			w, wf := randWeights(t, r, c.typ, c.rows, c.cols)
			for _, n := range c.n {
				name := fmt.Sprintf("%s/%dx%d/n%d", c.typ, c.rows, c.cols, n)
				x := randVec(r, n*c.cols)
				out := make([]float32, n*c.rows)
				if err := l.MatMul(c.typ, w, c.rows, c.cols, x, n, out); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if ref, ok := scalar[name]; !ok {
					scalar[name] = out
				} else if i := sameBits(out, ref); i >= 0 {
					t.Errorf("%s: output %d is %g, the scalar path gave %g", name, i, out[i], ref[i])
				}
				checkPacked(t, l, name, c.typ, w, c.rows, c.cols, x, n, out)
				// The other paths must give the scalar path's bits, so the
				// bound need only be checked on that one.
				if l.Path() == PathScalar {
					worst, exact := checkMatMul(t, name, c.typ, wf, c.rows, c.cols, x, n, out)
					if n == c.n[len(c.n)-1] && c.rows == 37 {
						t.Logf("%s: worst error %.2g of the outputs' RMS", name, worst/rms(exact))
					}
				}
			}
		}
	})
}

// checkPacked checks, for a type the library packs, that the product of
// the packed weights has the bits of MatMul's, out.
func checkPacked(t *testing.T, l *Lib, name string, typ quant.Type, w []byte, rows, cols int, x []float32, n int, out []float32) {
	t.Helper()
	if !l.Packable(typ) {
		return
	}
	p, err := l.Pack(typ, w, rows, cols)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := make([]float32, n*rows)
	if err := l.MatMulPacked(p, x, n, got); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if i := sameBits(got, out); i >= 0 {
		t.Errorf("%s: packed output %d is %g, MatMul gave %g", name, i, got[i], out[i])
	}
}

// checkMatMul checks out, the product of weights whose values are wf
// (rows×cols) with the n vectors x, against the exact product within
// TestMatMulParity's bound, and returns the worst error and the exact
// outputs.
func checkMatMul(t *testing.T, name string, typ quant.Type, wf []float32, rows, cols int, x []float32, n int, out []float32) (worst float64, exact []float64) {
	t.Helper()
	exact = make([]float64, n*rows)
	for b := range n {
		xb := x[b*cols : (b+1)*cols]
		for row := range rows {
			wr := wf[row*cols : (row+1)*cols]
			var y, abs, act float64
			for j, wv := range wr {
				y += float64(wv) * float64(xb[j])
				abs += math.Abs(float64(wv) * float64(xb[j]))
			}
			blocks := 0
			if ab := actBlock(typ); ab > 0 {
				blocks = cols / ab
				for j0 := 0; j0 < cols; j0 += ab {
					var amax, wsum float64
					for j := j0; j < j0+ab; j++ {
						amax = max(amax, math.Abs(float64(xb[j])))
						wsum += math.Abs(float64(wr[j]))
					}
					act += amax / 127 / 2 * wsum
				}
			}
			bound := act*(1+1e-6) + float64(cols/16+blocks+8)*0x1p-23*abs
			got := float64(out[b*rows+row])
			exact[b*rows+row] = y
			if e := math.Abs(got - y); !(e <= bound) {
				t.Errorf("%s: vector %d row %d is %g, exact %g: error %.3g over the bound %.3g", name, b, row, got, y, e, bound)
			} else {
				worst = max(worst, e)
			}
		}
	}
	return worst, exact
}

// TestMatMulBatchInvariance checks that each vector's outputs are the same
// bits alone as in a batch of 17, on a matrix big enough that the rows are
// split among goroutines.
func TestMatMulBatchInvariance(t *testing.T) {
	l := loadLib(t)
	eachPath(t, l, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, typ := range matTypes {
			rows, cols, n := 301, 1024, 17
			w, _ := randWeights(t, r, typ, rows, cols)
			x := randVec(r, n*cols)
			all := make([]float32, n*rows)
			if err := l.MatMul(typ, w, rows, cols, x, n, all); err != nil {
				t.Fatal(err)
			}
			one := make([]float32, rows)
			for b := range n {
				if err := l.MatMul(typ, w, rows, cols, x[b*cols:(b+1)*cols], 1, one); err != nil {
					t.Fatal(err)
				}
				if i := sameBits(one, all[b*rows:(b+1)*rows]); i >= 0 {
					t.Fatalf("%s: vector %d row %d alone is %g, in the batch %g", typ, b, i, one[i], all[b*rows+i])
				}
			}
			if !l.Packable(typ) {
				continue
			}
			p, err := l.Pack(typ, w, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			for _, nb := range []int{1, 3, 8, 9, 17} {
				got := make([]float32, nb*rows)
				if err := l.MatMulPacked(p, x[:nb*cols], nb, got); err != nil {
					t.Fatal(err)
				}
				if i := sameBits(got, all[:nb*rows]); i >= 0 {
					t.Fatalf("%s packed: batch of %d, output %d is %g, in the batch of 17 %g", typ, nb, i, got[i], all[i])
				}
			}
		}
	})
}

// TestDequantRows checks the embedding lookup against quant.Dequantize, bit
// for bit, for every type and path.
func TestDequantRows(t *testing.T) {
	l := loadLib(t)
	eachPath(t, l, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, typ := range matTypes {
			rows, cols := 9, 3*max(32, typ.BlockSize())
			w, wf := randWeights(t, r, typ, rows, cols)
			out := make([]float32, 4*cols)
			if err := l.DequantRows(typ, w, cols, 3, 7, out); err != nil {
				t.Fatal(err)
			}
			if i := sameBits(out, wf[3*cols:7*cols]); i >= 0 {
				t.Errorf("%s: element %d is %g, quant.Dequantize gives %g", typ, i, out[i], wf[3*cols+i])
			}
		}
	})
}

// TestMatMulErrors checks that bad lengths and unsupported types give
// errors, never a call into C with short slices.
func TestMatMulErrors(t *testing.T) {
	l := loadLib(t)
	w := make([]byte, 4*34)
	x := make([]float32, 2*32)
	out := make([]float32, 2*4)
	cases := []struct {
		name  string
		typ   quant.Type
		w     []byte
		rows  int
		cols  int
		x     []float32
		n     int
		out   []float32
		want  string
		unsup bool
	}{
		{"short weights", quant.Q8_0, w[:100], 4, 32, x, 2, out, "weights have 100", false},
		{"short activations", quant.Q8_0, w, 4, 32, x[:40], 2, out, "activations", false},
		{"short output", quant.Q8_0, w, 4, 32, x, 2, out[:7], "outputs", false},
		{"partial block", quant.Q8_0, w, 4, 33, x, 2, out, "whole number", false},
		{"negative rows", quant.Q8_0, w, -1, 32, x, 2, out, "bad shape", false},
		{"unsupported type", quant.IQ2_XXS, w, 4, 32, x, 2, out, "not implemented", true},
	}
	for _, c := range cases {
		err := l.MatMul(c.typ, c.w, c.rows, c.cols, c.x, c.n, c.out)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrUnsupported) != c.unsup {
			t.Errorf("%s: got %v, want an error containing %q (unsupported %v)", c.name, err, c.want, c.unsup)
		}
	}
}

// TestLoadErrors checks that a missing or foreign library gives a clear
// error, not a panic.
func TestLoadErrors(t *testing.T) {
	empty := t.TempDir()
	junk := t.TempDir()
	if err := os.WriteFile(filepath.Join(junk, LibName()), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir, want string
		notFound        bool
	}{
		{"missing", empty, "no " + LibName(), true},
		{"not a library", junk, "cannot load", false},
	}
	for _, c := range cases {
		l, err := Load(c.dir)
		if l != nil || err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNotFound) != c.notFound {
			t.Errorf("%s: got %v, %v; want an error containing %q", c.name, l, err, c.want)
		}
	}
	// A library of another ABI version, when a C compiler is at hand.
	if cc, err := exec.LookPath("cc"); err == nil {
		dir := t.TempDir()
		src := filepath.Join(dir, "v.c")
		if err := os.WriteFile(src, []byte("int kvs_abi_version(void) { return 999; }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(dir, LibName()), src).CombinedOutput(); err != nil {
			t.Fatalf("building a stand-in library: %v: %s", err, out)
		}
		l, err := Load(dir)
		if l != nil || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ABI version 999 but this kvscope needs %d", ABIVersion)) {
			t.Errorf("wrong ABI version: got %v, %v", l, err)
		}
	}
	t.Setenv(EnvDir, empty)
	if _, err := Load(""); err != nil && !errors.Is(err, ErrNotFound) {
		t.Errorf("search with %s=%s: %v", EnvDir, empty, err)
	}
}

// TestLoadSearch checks that KVSCOPE_NATIVE_DIR comes first in the search
// (an explicit choice wins over the places found by themselves, see
// TestSearchPlaces), that the library says so, and that it reports its ABI
// and a path this CPU runs.
func TestLoadSearch(t *testing.T) {
	built := loadLib(t).File()
	dir := t.TempDir()
	data, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LibName()), data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDir, dir)
	l, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, LibName()); l.File() != want {
		t.Errorf("loaded %s, want %s (from %s)", l.File(), want, EnvDir)
	}
	if want := "in $" + EnvDir; l.From() != want || !strings.HasSuffix(l.Where(), ", found "+want) {
		t.Errorf("From %q, Where %q; want %q", l.From(), l.Where(), want)
	}
	if ps := l.Paths(); len(ps) == 0 || ps[0] != PathScalar || !slices.Contains(ps, l.Path()) {
		t.Errorf("paths %v, path in force %d", ps, l.Path())
	}
	t.Logf("library %s: paths %v, running %s, CPU features %#x", l.File(), l.Paths(), l.PathName(l.Path()), l.Features())
}

// TestQuantizeActsPaths rounds activation rows for the 32-value types and
// the K-quants on every SIMD path and wants the scalar path's bytes: rows
// of random values with outliers, a row of zeros (no scale), and rows
// whose values fall on halves of a code step (rounded to even).
func TestQuantizeActsPaths(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(21, 22))
	const cols = 512
	rows := [][]float32{randVec(r, cols), randVec(r, cols), make([]float32, cols)}
	ties := make([]float32, cols)
	for i := range ties {
		ties[i] = float32(i%255-127) + 0.5*float32(i%2) // max 127: a step of 1
	}
	rows = append(rows, ties)
	x := make([]float32, 0, len(rows)*cols)
	for _, row := range rows {
		x = append(x, row...)
	}
	n := len(rows)
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		size := l.actBytes(uint32(typ), cols, int64(n))
		got := map[string][]byte{}
		eachPath(t, l, func(t *testing.T) {
			qx := make([]byte, size)
			rc, _, _ := purego.SyscallN(l.quantizeSym, uintptr(typ), uintptr(ptr(x)), cols, uintptr(n), uintptr(ptr(qx)))
			if rc != 0 {
				t.Fatalf("%s: rc %d", typ, int32(rc))
			}
			got[l.PathName(l.Path())] = qx
		})
		ref := got["scalar"]
		if ref == nil {
			t.Fatal("no scalar path")
		}
		for path, qx := range got {
			if !slices.Equal(qx, ref) {
				for i := range qx {
					if qx[i] != ref[i] {
						t.Errorf("%s on %s: byte %d of %d is %#x, the scalar path's %#x", typ, path, i, len(qx), qx[i], ref[i])
						break
					}
				}
			}
		}
	}
}
