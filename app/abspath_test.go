package app

import (
	"os"
	"path/filepath"
	"testing"

	"kvscope/app/uithread"
)

// A model opened by a relative path is saved by its absolute one, so that
// the app finds it again when started from another folder.
func TestModelPathIsSavedAbsolute(t *testing.T) {
	abs := stories(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, abs)
	if err != nil || filepath.IsAbs(rel) {
		t.Skipf("no relative path to %s from %s", abs, wd)
	}
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(rel); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs(rel)
	uithread.Locked(func() {
		if a.settings.LastModel != want || a.settings.RecentModels[0] != want {
			t.Errorf("saved %q (recent %v), want the absolute %q", a.settings.LastModel, a.settings.RecentModels, want)
		}
	})
}
