package app

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	echat "kvscope/engine/chat"
	"kvscope/internal/testshared"
)

// The model panel names a gemma3 file's sliding window; a model without
// one has no such row.
func TestModelInfoNamesTheSlidingWindow(t *testing.T) {
	row := func(l *loaded) string {
		for _, kv := range l.info() {
			if kv[0] == "sliding window" {
				return kv[1]
			}
		}
		return ""
	}
	l, _, err := loadModel(context.Background(), testshared.Path(t, "models/parity/parity-gemma3-F32.gguf"), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if got, want := row(l), "8 positions on 6 of 7 layers; the cache keeps every block (a block spans all layers)"; got != want {
		t.Errorf("sliding window row %q, want %q", got, want)
	}
	d, _, err := loadModel(context.Background(), DemoModel, "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if got := row(d); got != "" {
		t.Errorf("the demo model (llama) has a sliding window row %q", got)
	}
}

// The app loads through package loader as the CLI does: an absolute path,
// the file's name, a backend that does not load giving way (said), and the
// demo model as plain completion whatever its file's template.
func TestLoadModel(t *testing.T) {
	path := testshared.Path(t, "models/stories260K.gguf")
	l, problems, err := loadModel(context.Background(), path, "abacus", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if !filepath.IsAbs(l.path) || l.name == "" || l.tok == nil || l.backend == "" || l.format == nil {
		t.Errorf("loaded %+v", l)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "abacus") {
		t.Errorf("problems %q, want the unknown backend's", problems)
	}
	d, problems, err := loadModel(context.Background(), DemoModel, "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if d.path != DemoModel || d.format.Mode() != echat.ModeCompletion || d.problem == "" || len(problems) != 0 || d.size <= 0 {
		t.Errorf("demo: path %q, mode %v, problem %q, problems %q, %d bytes", d.path, d.format.Mode(), d.problem, problems, d.size)
	}
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	if _, _, err := loadModel(context.Background(), missing, "go", nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing file gave %v, want an error naming it", err)
	}
}
