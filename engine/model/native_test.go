package model

import (
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/backend/native"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/internal/testshared"
)

// TestNativeBackend runs the accuracy and invariance tests again with the
// native CPU library computing: llama.cpp's greedy output and logits on
// stories260K, the parity files within the same bounds as the Go backend,
// and bit-identical rows across batches and block sizes.
func TestNativeBackend(t *testing.T) {
	lib, err := native.Load("")
	if err != nil {
		t.Skipf("the native library is not built (make native): %v", err)
	}
	if !lib.Accelerated() {
		t.Skipf("%s runs only its scalar path here", lib.File())
	}
	be := native.NewBackend(lib)
	testBackend = be
	defer func() { testBackend = nil }()
	t.Logf("%s, %s path", lib.File(), lib.PathName(lib.Path()))
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"StoriesGreedy", TestStoriesGreedy},
		{"StoriesTeacherForced", TestStoriesTeacherForced},
		{"Parity", TestParity},
		{"ParityArchitectures", TestParityArchitectures},
		{"BatchInvariance", TestBatchInvariance},
		{"BlockSizeInvariance", TestBlockSizeInvariance},
		{"ShiftKeys", TestShiftKeys},
	} {
		t.Run(tc.name, tc.f)
	}
	if fb := be.Fallbacks(); len(fb) > 0 {
		t.Logf("handed back to Go: %v", fb)
	}
}

// TestNativeWideGroups compares the native CPU backend and the device
// backend (the CPU library's host memory here; the GPU with
// KVSCOPE_BACKEND=cuda) with the Go backend
// on random F32 models whose KV heads serve many query heads, as real
// models' do (TinyLlama: 8 a KV head at head dimension 64; 4 at 128), which
// the parity files, with few heads, do not: the prompt's logits and three
// decode steps after it. F32 weights round no activations, so the two
// backends differ only by float summation order.
func TestNativeWideGroups(t *testing.T) {
	lib, err := native.Load("")
	if err != nil {
		t.Skipf("the native library is not built (make native): %v", err)
	}
	for _, s := range []synth.Shape{
		{Name: "group 8, dim 64", Dim: 1024, Layers: 2, Heads: 16, KVHeads: 2, FFDim: 256, Vocab: 300, Context: 256, Type: quant.F32},
		{Name: "group 4, dim 128", Dim: 1024, Layers: 2, Heads: 8, KVHeads: 2, FFDim: 256, Vocab: 300, Context: 256, Type: quant.F32},
	} {
		t.Run(s.Name, func(t *testing.T) {
			f, err := synth.Open(s, 3)
			if err != nil {
				t.Fatal(err)
			}
			logits := func(be backend.Backend) [][]float32 {
				m, err := New(f)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if err := m.Use(be); err != nil {
					t.Fatal(err)
				}
				kv, blocks := devSeq(t, m, 16, 64, kvstore.F16, kvstore.F16)
				prompt := []int{5, 77, 9, 130, 42, 8, 250, 17, 3, 99, 64, 12, 200, 31, 7, 180, 55, 2, 91, 140}
				out := devForward(t, m, kv, blocks, prompt, 0)
				for j, tok := range []int{11, 22, 33} {
					out = append(out, devForward(t, m, kv, blocks, []int{tok}, len(prompt)+j)...)
				}
				return out
			}
			ref := logits(backend.Go())
			for _, be := range []backend.Backend{native.NewBackend(lib), deviceBackend(t)} {
				rms, kl, err := testshared.Compare(logits(be), ref)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s from Go: RMS %.3g of std, mean KL %.3g", be.Name(), rms, kl)
				if rms > 1e-4 {
					t.Errorf("%s logits differ from the Go backend's by %.3g of their std", be.Name(), rms)
				}
			}
		})
	}
}
