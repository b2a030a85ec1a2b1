package quant_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
	"kvscope/internal/testshared"
)

// parityBound is the largest relative RMS error accepted for a tensor
// stored as a given type by llama.cpp's llama-quantize, measured against
// the f32 original: about 1.4× the worst case measured over all tensors
// (noted at each). A wrong layout gives errors near 100%.
var parityBound = map[quant.Type]float64{
	quant.F32:    0,
	quant.F16:    3e-4,   // 0.0002
	quant.BF16:   2.5e-3, // 0.0017
	quant.Q8_0:   0.008,  // 0.0054
	quant.Q6_K:   0.025,  // 0.0180
	quant.Q5_0:   0.06,   // 0.0430
	quant.Q5_1:   0.055,  // 0.0380
	quant.Q5_K:   0.05,   // 0.0363
	quant.Q4_0:   0.12,   // 0.0867
	quant.Q4_1:   0.11,   // 0.0785
	quant.Q4_K:   0.10,   // 0.0717
	quant.IQ4_NL: 0.11,   // 0.0769
	quant.Q3_K:   0.21,   // 0.152
	quant.Q2_K:   0.42,   // 0.300
}

// tensorKind names a tensor without its layer: "blk.3.attn_q.weight" is
// "attn_q.weight".
func tensorKind(name string) string {
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if _, after, ok := strings.Cut(rest, "."); ok {
			return after
		}
	}
	return name
}

func dequantizeTensor(t *testing.T, f *gguf.File, ti *gguf.TensorInfo) []float32 {
	t.Helper()
	out := make([]float32, ti.Elements())
	if err := quant.Dequantize(ti.Type, f.TensorData(ti), out); err != nil {
		t.Fatalf("%s: %v", ti.Name, err)
	}
	return out
}

// TestParityFiles decodes every tensor of the llama.cpp-quantized parity
// models and compares it with the f32 model they were made from. It also
// checks DotFunc and MatMul on the first rows of each tensor against the
// dequantized values.
func TestParityFiles(t *testing.T) {
	ref, err := gguf.Open(testshared.Path(t, "models/parity/parity-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	refCache := map[string][]float32{}
	files := []string{"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL"}
	r := rand.New(rand.NewPCG(11, 12))
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(testshared.Path(t, "models/parity/parity-"+name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors) != len(ref.Tensors) {
				t.Errorf("%d tensors, f32 file has %d", len(f.Tensors), len(ref.Tensors))
			}
			// Worst error per (type, kind), for the log.
			worst := map[string]float64{}
			for i := range f.Tensors {
				ti := &f.Tensors[i]
				rt, ok := ref.Tensor(ti.Name)
				if !ok {
					t.Errorf("tensor %s is not in the f32 file", ti.Name)
					continue
				}
				if rt.Elements() != ti.Elements() {
					t.Errorf("%s: %d elements, f32 has %d", ti.Name, ti.Elements(), rt.Elements())
					continue
				}
				if !quant.Supported(ti.Type) {
					t.Errorf("%s: type %s not supported", ti.Name, ti.Type)
					continue
				}
				want, ok := refCache[ti.Name]
				if !ok {
					want = dequantizeTensor(t, ref, rt)
					refCache[ti.Name] = want
				}
				got := dequantizeTensor(t, f, ti)
				e := relRMS(got, want)
				key := fmt.Sprintf("%-6s %s", ti.Type, tensorKind(ti.Name))
				worst[key] = math.Max(worst[key], e)
				if e > parityBound[ti.Type] {
					t.Errorf("%s (%s): relative RMS error %.4f, bound %g", ti.Name, ti.Type, e, parityBound[ti.Type])
				}
				checkRows(t, r, f, ti, got)
			}
			keys := make([]string, 0, len(worst))
			for k := range worst {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				t.Logf("%s  %-20s rel RMS %.4f", name, k, worst[k])
			}
		})
	}
}

// checkRows multiplies the first rows of a tensor by random vectors with
// MatMul and compares with the dequantized rows.
func checkRows(t *testing.T, r *rand.Rand, f *gguf.File, ti *gguf.TensorInfo, deq []float32) {
	t.Helper()
	cols := int(ti.Dims[0])
	rows := min(int(ti.Elements())/cols, 8)
	rb, err := ti.Type.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	const nx = 3
	x := make([]float32, nx*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	out := make([]float32, nx*rows)
	if err := quant.MatMul(ti.Type, f.TensorData(ti)[:rows*rb], rows, cols, x, out); err != nil {
		t.Fatalf("%s: %v", ti.Name, err)
	}
	for b := 0; b < nx; b++ {
		for row := 0; row < rows; row++ {
			var want, mag float64
			for c := 0; c < cols; c++ {
				p := float64(deq[row*cols+c]) * float64(x[b*cols+c])
				want += p
				mag += math.Abs(p)
			}
			if got := float64(out[b*rows+row]); math.Abs(got-want) > 1e-4*mag {
				t.Errorf("%s row %d vector %d: MatMul %g, dequantized dot %g", ti.Name, row, b, got, want)
			}
		}
	}
}

// relRMS returns the RMS of got-want relative to the RMS of want.
func relRMS(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// TestQuantizeMatchesLlamaCpp re-encodes the f32 parity model with Quantize
// and compares the bytes with llama-quantize's output. For these types our
// encoders follow ggml's reference encoders, so every byte must match.
// (IQ4_NL and the K-quants use simpler encoders than llama.cpp's search.)
func TestQuantizeMatchesLlamaCpp(t *testing.T) {
	ref, err := gguf.Open(testshared.Path(t, "models/parity/parity-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, ty := range []quant.Type{quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1} {
		t.Run(ty.String(), func(t *testing.T) {
			f, err := gguf.Open(testshared.Path(t, "models/parity/parity-"+ty.String()+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			checked := 0
			for i := range f.Tensors {
				ti := &f.Tensors[i]
				if ti.Type != ty {
					continue
				}
				rt, ok := ref.Tensor(ti.Name)
				if !ok {
					t.Fatalf("tensor %s is not in the f32 file", ti.Name)
				}
				src := dequantizeTensor(t, ref, rt)
				got := make([]byte, ti.Size)
				if err := quant.Quantize(ty, src, got); err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
				want := f.TensorData(ti)
				for j := range got {
					if got[j] != want[j] {
						t.Errorf("%s: byte %d (block %d) is %#02x, llama.cpp wrote %#02x", ti.Name, j, j/ty.TypeSize(), got[j], want[j])
						break
					}
				}
				checked += len(got)
			}
			if checked == 0 {
				t.Fatalf("no %s tensors in the file", ty)
			}
			t.Logf("%s: %d bytes identical to llama.cpp's", ty, checked)
		})
	}
}
