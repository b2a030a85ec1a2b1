package loader

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/engine"
	echat "kvscope/engine/chat"
	"kvscope/engine/synth"
	"kvscope/internal/testshared"
)

func TestOpenStories(t *testing.T) {
	path := testshared.Path(t, "models/stories260K.gguf")
	l, err := Open(path, Options{Backend: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !filepath.IsAbs(l.Path) || l.Size <= 0 || l.Name == "" || l.Tok == nil || l.Tok.Size() != 512 {
		t.Errorf("opened: path %q, %d bytes, name %q, tokenizer %v", l.Path, l.Size, l.Name, l.Tok)
	}
	if !strings.HasPrefix(l.Backend, "backend go") || len(l.Problems) != 0 {
		t.Errorf("backend %q, problems %q", l.Backend, l.Problems)
	}
	if l.Format == nil || l.Format.Mode() != echat.ModeCompletion || l.FormatErr != nil {
		t.Errorf("stories260K has no chat template: format %v, error %v", l.Format, l.FormatErr)
	}
	e, err := engine.New(l.Model, l.Tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
}

// A relative path is made absolute, so that what is saved opens from any
// folder.
func TestOpenMakesThePathAbsolute(t *testing.T) {
	path := testshared.Path(t, "models/stories260K.gguf")
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, path)
	if err != nil || filepath.IsAbs(rel) {
		t.Skipf("no relative path from %s to %s", wd, path)
	}
	l, err := Open(rel, Options{Backend: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if abs, _ := filepath.Abs(path); l.Path != abs {
		t.Errorf("path %q, want %q", l.Path, abs)
	}
}

func TestOpenErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("this is not a GGUF file at all, just text"), 0o644)
	missing := filepath.Join(dir, "missing.gguf")
	tests := []struct {
		name, path string
		want       string
		is         error
	}{
		{"missing", missing, "no such file", fs.ErrNotExist},
		{"a directory", dir, "is a directory", nil},
		{"not GGUF", junk, "GGUF", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(tc.path, Options{Backend: "go"})
			if err == nil {
				l.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want the file and %q", err, tc.want)
			}
			if strings.Count(err.Error(), tc.path) != 1 {
				t.Errorf("error %q names the file %d times", err, strings.Count(err.Error(), tc.path))
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
	if _, err := Open("", Options{}); err == nil {
		t.Error("no path opened something")
	}
}

// A backend that does not exist fails the CLI (no Fallback) before the
// file is read, and gives way in the app (Fallback), saying so.
func TestBackendChoice(t *testing.T) {
	path := testshared.Path(t, "models/stories260K.gguf")
	if _, err := Open(path, Options{Backend: "abacus"}); err == nil || !strings.Contains(err.Error(), "abacus") {
		t.Errorf("an unknown backend gave %v, want an error naming it", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.gguf"), Options{Backend: "abacus"}); err == nil || !strings.Contains(err.Error(), "abacus") {
		t.Errorf("the backend is checked first: %v", err)
	}
	l, err := Open(path, Options{Backend: "abacus", Fallback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Problems) != 1 || !strings.Contains(l.Problems[0], "abacus") || l.Backend == "" {
		t.Errorf("fallback: problems %q, backend %q", l.Problems, l.Backend)
	}
}

func TestFromMemory(t *testing.T) {
	data, err := synth.Generate(synth.Demo, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := FromMemory(data, "the demo model", Options{Backend: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Path != "" || l.Size != int64(len(data)) || l.Tok == nil || l.Format == nil || l.Name == "" {
		t.Errorf("demo: path %q, %d bytes, name %q", l.Path, l.Size, l.Name)
	}
	if _, err := FromMemory([]byte("junk"), "the demo model", Options{Backend: "go"}); err == nil || !strings.Contains(err.Error(), "the demo model") {
		t.Errorf("junk in memory: %v, want an error naming it", err)
	}
}

// ShortBackend cuts a compute library's path to its file name and leaves
// every other note as it is.
func TestShortBackend(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"backend cpu (avx512vnni path, /work/main/native/build/libkvscope_cpu.so): the fastest that loads", "backend cpu (avx512vnni path, libkvscope_cpu.so): the fastest that loads"},
		{"backend cuda (NVIDIA H200, /opt/k/native/build/libkvscope_cuda.so): chosen", "backend cuda (NVIDIA H200, libkvscope_cuda.so): chosen"},
		{`backend cpu (avx2 path, C:\kv\native\build\kvscope_cpu.dll): chosen`, "backend cpu (avx2 path, kvscope_cpu.dll): chosen"},
		{"backend go: the fallback", "backend go: the fallback"},
		{"backend cpu (avx2 path, libkvscope_cpu.so): chosen", "backend cpu (avx2 path, libkvscope_cpu.so): chosen"},
	} {
		if got := ShortBackend(c.in); got != c.want {
			t.Errorf("ShortBackend(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
