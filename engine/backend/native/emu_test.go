package native

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// onEmulated makes hostDevice return the CUDA library emulated on the CPU
// (TestEmulatedCUDA sets it while its subtests run).
var onEmulated bool

// emulated opens the CUDA library emulated on the CPU (make cuda-emu),
// skipping when it is not built and $KVSCOPE_CUDA_EMU does not ask for it.
func emulated(t *testing.T) *Device {
	t.Helper()
	d, err := OpenEmulated()
	if errors.Is(err, ErrNotFound) && os.Getenv(EmuDirEnv) == "" {
		t.Skipf("the CUDA library emulated on the CPU is not built (make cuda-emu): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEmulatedCUDA runs the device tests on the CUDA library's own sources
// built on HIP-CPU (make cuda-emu, native/README.md): every device
// operation against the Go backend, the errors, the engine generating and
// preempting, the int8/int4 key groups bit for bit against the Go store,
// and the prefill kernel's rows against the decode kernel's bits.
func TestEmulatedCUDA(t *testing.T) {
	d := emulated(t)
	if !strings.Contains(d.DeviceName(), "emulated on the CPU (HIP-CPU)") || d.Name() != "cuda" {
		t.Errorf("the emulation is described as %s, %q", d.Name(), d.DeviceName())
	}
	t.Log(d.describe())
	onEmulated = true
	defer func() { onEmulated = false }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"DeviceOps", TestDeviceOps},
		{"DeviceErrors", TestDeviceErrors},
		{"DeviceEngine", TestDeviceEngine},
		{"DeviceKeyGroups", TestDeviceKeyGroups},
		{"DeviceAttentionInvariance", TestDeviceAttentionInvariance},
	} {
		t.Run(tc.name, tc.f)
	}
}
