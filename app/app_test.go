package app

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

func TestPlaceholderNamesModel(t *testing.T) {
	test.NewTempApp(t)
	w := test.NewTempWindow(t, Placeholder("models/x.gguf"))
	found := false
	for _, o := range test.LaidOutObjects(w.Content()) {
		if l, ok := o.(*widget.Label); ok && strings.Contains(l.Text, "models/x.gguf") {
			found = true
		}
	}
	if !found {
		t.Error("the placeholder does not show the model path")
	}
}
