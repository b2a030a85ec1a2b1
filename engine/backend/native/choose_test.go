package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	junk := t.TempDir()
	if err := os.WriteFile(filepath.Join(junk, LibName()), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, libErr := Load("")
	_, cudaErr := OpenDevice("cuda") // nil on a machine with a GPU and make cuda run
	for _, tc := range []struct {
		name, env, dir string
		want           string // the backend's name; "" for an error
		note           string // in the note, or in the error
	}{
		{name: "go", want: "go", note: "backend go: chosen"},
		{name: "GO ", want: "go", note: "backend go"},
		{name: "", env: "go", want: "go", note: "(" + BackendEnv + ")"},
		{name: "bogus", note: "unknown backend"},
		{name: "metal", note: "etal"},
		{name: "", env: "metal", note: BackendEnv},
		// A broken library: auto falls back to Go and says why; cpu,
		// asked for by name, is an error.
		{name: "auto", dir: junk, want: "go", note: "not cpu: native: cannot load"},
		{name: "cpu", dir: junk, note: "cannot load"},
	} {
		t.Run(tc.name+"/"+tc.env, func(t *testing.T) {
			t.Setenv(BackendEnv, tc.env)
			t.Setenv(EnvDir, tc.dir)
			if tc.name == "auto" && cudaErr == nil {
				tc.want, tc.note = "cuda", "backend cuda" // CUDA comes before the broken CPU library
			}
			be, note, err := Choose(tc.name)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), tc.note) {
					t.Fatalf("got %v, %q, %v; want an error with %q", be, note, err, tc.note)
				}
				return
			}
			if err != nil || be.Name() != tc.want || !strings.Contains(note, tc.note) {
				t.Fatalf("got %v, %q, %v; want %s with %q", be, note, err, tc.want, tc.note)
			}
		})
	}
	t.Run("auto", func(t *testing.T) {
		t.Setenv(BackendEnv, "")
		be, note, err := Choose("")
		if err != nil {
			t.Fatal(err)
		}
		want := "cpu"
		if cudaErr == nil {
			want = "cuda" // a machine with a GPU and the CUDA library built
		} else if !strings.Contains(note, "not cuda: ") {
			t.Errorf("the note does not say why CUDA is not used: %q", note)
		} else if libErr != nil {
			want = "go" // the library is not built: Go, saying so
			if !strings.Contains(note, "not cpu") {
				t.Errorf("the fallback note does not say why the native library is not used: %q", note)
			}
		}
		if be.Name() != want {
			t.Errorf("auto chose %s (%s), want %s", be.Name(), note, want)
		}
		t.Log(note)
	})
}
