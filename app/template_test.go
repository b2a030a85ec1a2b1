package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/app/uithread"
	"kvscope/engine/synth"
)

// templateRow returns the model panel's chat template row.
func templateRow(a *App) string {
	for _, kv := range a.mdl.info() {
		if kv[0] == "chat template" {
			return kv[1]
		}
	}
	return ""
}

// A model file with a chat template gets it in the chat pane, and the
// model panel names it; the demo model stays plain completion.
func TestModelTemplateReachesThePane(t *testing.T) {
	data, err := synth.Generate(synth.Shape{
		Name: "kvscope template test (random weights)", Dim: 64, Layers: 1, Heads: 2, KVHeads: 1,
		FFDim: 128, Vocab: 1024, Context: 512, Type: synth.Small.Type, Pre: "llama-bpe",
	}, 3)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "templated.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(path); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if got := chatTemplate(a); got != "Template: from the file" {
			t.Errorf("the pane says %q, want the file's template", got)
		}
		if got := templateRow(a); got != "from the file" {
			t.Errorf("model panel: chat template %q", got)
		}
	})
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if got := chatTemplate(a); !strings.HasPrefix(got, "Plain completion") || !strings.Contains(got, "demo") {
			t.Errorf("on the demo model the pane says %q, want plain completion", got)
		}
		if got := templateRow(a); !strings.Contains(got, "plain completion") {
			t.Errorf("demo model panel: chat template %q", got)
		}
	})
}
