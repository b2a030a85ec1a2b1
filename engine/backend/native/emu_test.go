package native

import (
	"errors"
	"os"
	"os/exec"
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
		{"DevicePreemption", TestDevicePreemption},
		{"DeviceKeyGroups", TestDeviceKeyGroups},
		{"DeviceAttentionInvariance", TestDeviceAttentionInvariance},
	} {
		t.Run(tc.name, tc.f)
	}
}

// TestSanitizedOutOfBounds shows that under the sanitizer build of the
// emulated CUDA library (make cuda-emu SANITIZE=1, which .ci/run runs the
// device tests on) a kernel reading past the end of a device buffer, which
// on a GPU silently reads whatever lies there, ends the process with
// AddressSanitizer's report, so the test meeting it fails: a child process
// adds 8 values from an input of 4 (kvs_add) and must die saying so.
func TestSanitizedOutOfBounds(t *testing.T) {
	d := hostDevice(t)
	if os.Getenv("KVSCOPE_OOB_CHILD") == "1" {
		x, err := d.alloc(8 * 4)
		if err != nil {
			t.Fatal(err)
		}
		y, err := d.alloc(4 * 4)
		if err != nil {
			t.Fatal(err)
		}
		d.d.add(x, y, 8)
		d.d.sync()
		return // not sanitized: the read went unseen
	}
	if d.d.emulated != 2 {
		t.Skipf("%s is not the sanitizer build of the emulated CUDA library (make cuda-emu SANITIZE=1; .ci/run runs this)", d.File())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSanitizedOutOfBounds$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVSCOPE_OOB_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ERROR: AddressSanitizer: heap-buffer-overflow") {
		t.Fatalf("an out-of-bounds read in a kernel: %v, output:\n%s", err, out)
	}
	t.Logf("the child died: %v; %s", err, firstLine(string(out), "READ of size"))
}

// firstLine returns the first line of s that contains sub.
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
