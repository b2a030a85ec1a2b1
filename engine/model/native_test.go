package model

import (
	"testing"

	"kvscope/engine/backend/native"
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
