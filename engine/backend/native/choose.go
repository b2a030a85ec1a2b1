package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"kvscope/engine/backend"
)

// BackendEnv names the environment variable that forces a backend (go,
// cpu, cuda or metal) when the caller asks for none.
const BackendEnv = "KVSCOPE_BACKEND"

// Backends are the names Choose takes, in the order "auto" tries them.
var Backends = []string{"cuda", "metal", "cpu", "go"}

// Choose returns the backend called name and one sentence saying which
// backend runs and why, for the status line and `kvscope info`. An empty
// name means $KVSCOPE_BACKEND, and an unset one "auto": CUDA, then Metal,
// then the native CPU library, then pure Go, the first that loads; each one
// skipped is named with its reason (CUDA: libkvscope_cuda.so is missing, of
// another ABI version, finds no GPU, or is the CUDA library emulated on the
// CPU found elsewhere than $KVSCOPE_NATIVE_DIR), and pure Go always loads. A backend
// named explicitly that cannot load is an error, never a silent fallback.
func Choose(name string) (backend.Backend, string, error) {
	from := ""
	if name == "" {
		name, from = os.Getenv(BackendEnv), " ("+BackendEnv+")"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || name == "auto" {
		var skipped []string
		for _, n := range Backends {
			be, err := openBackend(n, true)
			if err == nil {
				why := "the best that loads"
				if len(skipped) > 0 {
					why += "; " + strings.Join(skipped, "; ")
				}
				return be, fmt.Sprintf("backend %s: %s", describe(be), why), nil
			}
			skipped = append(skipped, fmt.Sprintf("not %s: %v", n, err))
		}
		panic("the Go backend always loads")
	}
	be, err := openBackend(name, false)
	if err != nil {
		return nil, "", fmt.Errorf("backend %q%s: %w", name, from, err)
	}
	return be, fmt.Sprintf("backend %s: chosen%s", describe(be), from), nil
}

// openBackend opens the backend called name; auto: for Choose's "auto",
// which takes the CUDA library emulated on the CPU (make cuda-emu) only
// from $KVSCOPE_NATIVE_DIR, so that it is never taken for a GPU.
func openBackend(name string, auto bool) (backend.Backend, error) {
	switch name {
	case "go":
		return backend.Go(), nil
	case "cpu":
		lib, err := Load("")
		if err != nil {
			return nil, err
		}
		if !lib.Accelerated() {
			return nil, fmt.Errorf("%s runs only its scalar path on this CPU, slower than the Go kernels", lib.File())
		}
		return NewBackend(lib), nil
	case "cuda", "metal":
		// OpenDevice says why in one sentence: no library (make cuda),
		// another ABI version, or no usable GPU.
		d, err := OpenDevice(name)
		if err != nil {
			return nil, err
		}
		if auto && d.Emulated() && !inEnvDir(d.File()) {
			return nil, fmt.Errorf("%s is the CUDA library emulated on the CPU (HIP-CPU, make cuda-emu), which auto takes only from $%s", d.File(), EnvDir)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unknown backend (want one of %s, or auto)", strings.Join(Backends, ", "))
}

// inEnvDir reports whether file is in the directory $KVSCOPE_NATIVE_DIR
// names.
func inEnvDir(file string) bool {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return false
	}
	a, err1 := filepath.Abs(dir)
	b, err2 := filepath.Abs(filepath.Dir(file))
	return err1 == nil && err2 == nil && a == b
}

func describe(be backend.Backend) string {
	if nb, ok := be.(*Backend); ok {
		return fmt.Sprintf("cpu (%s path, %s)", nb.lib.PathName(nb.lib.Path()), nb.lib.Where())
	}
	if d, ok := be.(*Device); ok {
		return d.describe()
	}
	return be.Name()
}
