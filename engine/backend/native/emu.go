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
// $KVSCOPE_CUDA_EMU, else native/build/emu in the kvscope source tree holding
// the working directory. The error wraps ErrNotFound when
// the library is not built there; a library that is not an emulation is an
// error too, so that a GPU is never tested under the emulation's name.
func OpenEmulated() (*Device, error) {
	dir := os.Getenv(EmuDirEnv)
	if dir == "" {
		wd, _ := os.Getwd()
		root, ok := sourceRoot(wd)
		if !ok {
			return nil, fmt.Errorf("native: %w: no kvscope source tree above %s", ErrNotFound, wd)
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
