package native

import (
	"fmt"
	"os"
	"path/filepath"
)

// EmuDirEnv names the environment variable that points the device tests at
// the directory of the CUDA library emulated on the CPU (make cuda-emu
// builds it in native/build/emu, where they look when it is unset).
const EmuDirEnv = "KVSCOPE_CUDA_EMU"

// OpenEmulated opens the CUDA library emulated on the CPU (HIP-CPU), for
// the device tests to run the CUDA sources' kernels on: from
// $KVSCOPE_CUDA_EMU, else native/build/emu under the module root found by
// walking up from the working directory. The error wraps ErrNotFound when
// the library is not built there; a library that is not an emulation is an
// error too, so that a GPU is never tested under the emulation's name.
func OpenEmulated() (*Device, error) {
	dir := os.Getenv(EmuDirEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return nil, fmt.Errorf("native: %w: %v", ErrNotFound, err)
		}
		dir = filepath.Join(root, "native", "build", "emu")
	}
	d, err := OpenDeviceDir("cuda", dir)
	if err != nil {
		return nil, err
	}
	if !d.Emulated() {
		return nil, fmt.Errorf("native: %s is not the CUDA library emulated on the CPU (it lacks kvs_emulated)", d.File())
	}
	return d, nil
}

// moduleRoot returns the directory holding go.mod, walking up from the
// working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}
