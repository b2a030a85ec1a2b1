// Package testshared locates the project's shared, read-only test data
// (../shared beside the checkout, or $KVSCOPE_TESTDATA) for tests.
package testshared

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the shared test-data directory: $KVSCOPE_TESTDATA when set,
// otherwise ../shared relative to the module root (the folder holding go.mod).
// The directory may not exist; use Path to skip a test when a file is missing.
func Dir() string {
	if d := os.Getenv("KVSCOPE_TESTDATA"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return "../shared"
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "..", "shared")
		}
		if filepath.Dir(d) == d {
			return "../shared"
		}
	}
}

// Path returns the path of rel (slash-separated, such as
// "models/stories260K.gguf") inside the shared test data. When the file is
// missing it skips the test with a message saying where it looked.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(), filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared test data %s not found (set KVSCOPE_TESTDATA to the shared folder): %v", p, err)
	}
	return p
}
