//go:build amd64 && !noasm

package quant

import "testing"

// TestWithoutAVX runs the kernel and batch-invariance tests again with the
// AVX kernel turned off, as on a processor without AVX: the SSE kernels
// must give the same bits.
func TestWithoutAVX(t *testing.T) {
	if !useAVX {
		t.Skip("this processor has no AVX: the other tests already ran without it")
	}
	useAVX = false
	defer func() { useAVX = true }()
	t.Run("kernels", TestKernelsMatchGeneric)
	t.Run("shapes", TestMatMulBatchShapes)
}
