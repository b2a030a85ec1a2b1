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
// against quant.Dequantize. Tensors of types the library lacks must give
// ErrUnsupported.
func TestMatMulGGUF(t *testing.T) {
	l := loadLib(t)
	files := []string{"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "IQ4_NL"}
	eachPath(t, l, func(t *testing.T) {
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
				out := make([]float32, 2*rows)
				label := fmt.Sprintf("%s/%s(%s)", name, ti.Name, ti.Type)
				err := l.MatMul(ti.Type, w, rows, cols, x, 2, out)
				if !slices.Contains(matTypes, ti.Type) {
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("%s: got %v, want ErrUnsupported", label, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				wf := make([]float32, rows*cols)
				if err := quant.Dequantize(ti.Type, w, wf); err != nil {
					t.Fatal(err)
				}
				checkMatMul(t, label, ti.Type, wf, rows, cols, x, 2, out)
				got := make([]float32, rows*cols)
				if err := l.DequantRows(ti.Type, w, cols, 0, rows, got); err != nil {
					t.Fatal(err)
				}
				if j := sameBits(got, wf); j >= 0 {
					t.Errorf("%s: element %d decodes to %g, quant.Dequantize gives %g", label, j, got[j], wf[j])
				}
			}
		}
	})
}
