package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/hub"
)

// testHub is a local hub serving one file: resolve answers with the LFS
// headers and a redirect to a second server, which serves ranges.
type testHub struct {
	hub, cdn *httptest.Server
	content  []byte
	lie      atomic.Bool // send another file's sha256
	gets     atomic.Int32
}

func newTestHub(t *testing.T, content []byte) *testHub {
	h := &testHub{content: content}
	h.cdn = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.gets.Add(1)
		http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(h.content))
	}))
	h.hub = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/org/m-GGUF/resolve/main/m.gguf" {
			w.Header().Set("X-Error-Code", "EntryNotFound")
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		sum := sha256.Sum256(h.content)
		if h.lie.Load() {
			sum = sha256.Sum256([]byte("another file"))
		}
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(h.content)))
		w.Header().Set("Location", h.cdn.URL+"/blob")
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(func() { h.hub.Close(); h.cdn.Close() })
	return h
}

// hubEnv points the environment at h and at a fresh home folder, which it
// returns.
func hubEnv(t *testing.T, h *testHub) string {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	for _, k := range []string{"LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_TOKEN_PATH"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_ENDPOINT", h.hub.URL)
	return home
}

func tinyModel(t *testing.T) []byte {
	b, err := synth.Generate(synth.Shape{Name: "tiny", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFDim: 128, Vocab: 512, Context: 256, Type: quant.Q8_0}, 3)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runMain(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

// kvscope pull downloads into the models folder with a progress bar; then
// kvscope models lists the file as one kvscope runs, and pulling it again
// fetches nothing.
func TestPullThenModels(t *testing.T) {
	content := tinyModel(t)
	h := newTestHub(t, content)
	home := hubEnv(t, h)

	code, out, errOut := runMain("pull", "org/m-GGUF", "m.gguf")
	if code != 0 {
		t.Fatalf("pull: exit %d, stderr %q", code, errOut)
	}
	want := filepath.Join(home, ".cache/kvscope/models/org/m-GGUF/m.gguf")
	if strings.TrimSpace(out) != want {
		t.Errorf("stdout %q, want the path %s", out, want)
	}
	if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("downloaded file: %v (%d bytes, want %d)", err, len(got), len(content))
	}
	t.Logf("stderr of pull: %q", errOut)
	if !strings.Contains(errOut, "100%") || !strings.Contains(errOut, "sha256 checked") {
		t.Errorf("stderr %q: want a progress bar at 100%% and the hash checked", errOut)
	}

	code, out, errOut = runMain("models")
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "kvscope") || !strings.Contains(out, "Q8_0") {
		t.Errorf("models: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runMain("models", "--json")
	var list []localJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("models --json: exit %d, %v: %q", code, err, out)
	}
	if len(list) != 1 || list[0].Path != want || !list[0].Runnable || list[0].Repo != "org/m-GGUF" || list[0].Arch != "llama" {
		t.Errorf("models --json: %+v", list)
	}

	gets := h.gets.Load()
	code, out, errOut = runMain("pull", "org/m-GGUF", "m.gguf")
	if code != 0 || strings.TrimSpace(out) != want || !strings.Contains(errOut, "already downloaded") || h.gets.Load() != gets {
		t.Errorf("second pull: exit %d, stdout %q, stderr %q, %d more GETs", code, out, errOut, h.gets.Load()-gets)
	}
}

// A pull that goes wrong exits non-zero with one line on stderr.
func TestPullRefuses(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		lie      bool
		endpoint string
		code     int
		want     string
	}{
		{"no arguments", []string{"pull"}, false, "", 2, "give a repository and a file"},
		{"three arguments", []string{"pull", "a/b", "c", "d"}, false, "", 2, "give a repository and a file"},
		{"unknown name", []string{"pull", "gpt-17"}, false, "", 2, `"gpt-17" is not a catalog name`},
		{"bad repository", []string{"pull", "a/b/c", "x.gguf"}, false, "", 2, "not OWNER/NAME"},
		{"bad file", []string{"pull", "org/m-GGUF", "../x.gguf"}, false, "", 2, "not a path inside"},
		{"missing file", []string{"pull", "org/m-GGUF", "other.gguf"}, false, "", 1, `has no file "other.gguf"`},
		{"lying hash", []string{"pull", "org/m-GGUF", "m.gguf"}, true, "", 1, "sha256"},
		{"bad endpoint", []string{"pull", "org/m-GGUF", "m.gguf"}, false, "huggingface.co", 1, "not an http(s) URL"},
		{"unknown flag", []string{"pull", "--bogus", "org/m-GGUF", "m.gguf"}, false, "", 2, "flag provided but not defined"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHub(t, tinyModel(t))
			h.lie.Store(tc.lie)
			home := hubEnv(t, h)
			if tc.endpoint != "" {
				t.Setenv("HF_ENDPOINT", tc.endpoint)
			}
			code, out, errOut := runMain(tc.args...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if code != tc.code || out != "" || !strings.Contains(last, tc.want) || !strings.HasPrefix(last, "kvscope pull: ") {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q; want a last line with %q", code, tc.code, out, errOut, tc.want)
			}
			if _, err := os.Stat(filepath.Join(home, ".cache/kvscope/models/org/m-GGUF/m.gguf")); err == nil {
				t.Error("a file was put in place")
			}
		})
	}
}

func TestModelsCatalog(t *testing.T) {
	h := newTestHub(t, tinyModel(t))
	hubEnv(t, h)
	code, out, errOut := runMain("models", "--catalog")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, e := range hub.Catalog {
		if !strings.Contains(out, e.ID) || !strings.Contains(out, e.Ref.Repo+" "+e.Ref.File) {
			t.Errorf("catalog output lacks %s (%s)", e.ID, e.Ref)
		}
	}
	code, out, _ = runMain("models", "--catalog", "--json")
	var rows []catalogJSON
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != len(hub.Catalog) {
		t.Errorf("--catalog --json: exit %d, %v, %d rows", code, err, len(rows))
	}
	if code, _, errOut := runMain("models", "extra"); code != 2 || !strings.Contains(errOut, "unexpected argument") {
		t.Errorf("models extra: exit %d, %q", code, errOut)
	}
}
