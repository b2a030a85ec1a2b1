package native

import (
	"fmt"
	"os"
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
// another ABI version, or finds no GPU), and pure Go always loads. A backend
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
			be, err := openBackend(n)
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
	be, err := openBackend(name)
	if err != nil {
		return nil, "", fmt.Errorf("backend %q%s: %w", name, from, err)
	}
	return be, fmt.Sprintf("backend %s: chosen%s", describe(be), from), nil
}

func openBackend(name string) (backend.Backend, error) {
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
		return OpenDevice(name)
	}
	return nil, fmt.Errorf("unknown backend (want one of %s, or auto)", strings.Join(Backends, ", "))
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
