package native

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
	"kvscope/internal/testshared"
)

// TestMatMulGGUF multiplies every 2-D tensor of the shared parity models,
// quantized by llama.cpp's own llama-quantize (whose K-quant scales span
// ranges the Go test encoders do not reach), on every path, checking the
// product within TestMatMulParity's bound and the decoded rows bit for bit
// against quant.Dequantize. Tensors of types the library lacks (none in
// these files today) must give ErrUnsupported.
func TestMatMulGGUF(t *testing.T) {
	l := loadLib(t)
	defer l.SetPath(-1)
	files := []string{"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "Q3_K_M", "IQ4_NL"}
	r := rand.New(rand.NewPCG(21, 22))
	for _, name := range files {
		f, err := gguf.Open(testshared.Path(t, "models/parity/parity-"+name+".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i := range f.Tensors {
			ti := &f.Tensors[i]
			if len(ti.Dims) != 2 {
				continue
			}
			cols, rows := int(ti.Dims[0]), int(ti.Dims[1])
			w := f.TensorData(ti)
			x := randVec(r, 2*cols)
			label := fmt.Sprintf("%s/%s(%s)", name, ti.Name, ti.Type)
			if !slices.Contains(matTypes, ti.Type) {
				if err := l.MatMul(ti.Type, w, rows, cols, x, 2, make([]float32, 2*rows)); !errors.Is(err, ErrUnsupported) {
					t.Errorf("%s: got %v, want ErrUnsupported", label, err)
				}
				continue
			}
			wf := make([]float32, rows*cols)
			if err := quant.Dequantize(ti.Type, w, wf); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, rows*cols)
			if err := l.DequantRows(ti.Type, w, cols, 0, rows, got); err != nil {
				t.Fatal(err)
			}
			if j := sameBits(got, wf); j >= 0 {
				t.Errorf("%s: element %d decodes to %g, quant.Dequantize gives %g", label, j, got[j], wf[j])
			}
			var scalar []float32
			for _, p := range l.Paths() {
				if err := l.SetPath(p); err != nil {
					t.Fatal(err)
				}
				out := make([]float32, 2*rows)
				if err := l.MatMul(ti.Type, w, rows, cols, x, 2, out); err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if p == PathScalar {
					// The other paths must give these bits.
					scalar = out
					checkMatMul(t, label, ti.Type, wf, rows, cols, x, 2, out)
				} else if j := sameBits(out, scalar); j >= 0 {
					t.Errorf("%s on %s: output %d is %g, the scalar path gave %g", label, l.PathName(p), j, out[j], scalar[j])
				}
			}
		}
	}
}
