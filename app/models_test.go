package app

import (
	"testing"

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
	l, err := loadModel(testshared.Path(t, "models/parity/parity-gemma3-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if got, want := row(l), "8 positions on 6 of 7 layers; the cache keeps every block (a block spans all layers)"; got != want {
		t.Errorf("sliding window row %q, want %q", got, want)
	}
	d, err := loadModel(DemoModel)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if got := row(d); got != "" {
		t.Errorf("the demo model (llama) has a sliding window row %q", got)
	}
}
