package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

// writeModel writes a small GGUF file with the metadata model.ReadConfig
// reads for arch and one embedding tensor of type typ.
func writeModel(t *testing.T, path, arch string, typ quant.Type, extra ...gguf.KV) []byte {
	t.Helper()
	kvs := []gguf.KV{
		gguf.NewKV("general.architecture", arch),
		gguf.NewKV("general.name", "test "+arch),
		gguf.NewKV(arch+".embedding_length", uint32(256)),
		gguf.NewKV(arch+".block_count", uint32(1)),
		gguf.NewKV(arch+".attention.head_count", uint32(2)),
		gguf.NewKV(arch+".feed_forward_length", uint32(512)),
		gguf.NewKV(arch+".context_length", uint32(128)),
	}
	kvs = append(kvs, extra...)
	rb, err := typ.RowBytes(256)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, []gguf.WriteTensor{
		{Name: "token_embd.weight", Dims: []uint64{256, 4}, Type: typ, Data: make([]byte, 4*rb)},
	}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, buf.Bytes())
	return buf.Bytes()
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
}

// setHome points every variable DefaultDirs reads at a fresh home folder,
// and returns it.
func setHome(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the folder conventions tested are Linux's")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", "")
	for _, k := range []string{"LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT"} {
		t.Setenv(k, "")
	}
	return home
}

// Scan finds models in each tool's folder of a home folder built here, with
// real GGUF files, the hub cache's links into blobs and broken files.
func TestScan(t *testing.T) {
	home := setHome(t)
	cache := filepath.Join(home, ".cache")

	tiny, err := synth.Generate(synth.Shape{Name: "tiny", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFDim: 128, Vocab: 512, Context: 256, Type: quant.Q8_0}, 1)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cache, "kvscope/models/org/tiny-GGUF/tiny-q8_0.gguf"), tiny)
	writeFile(t, filepath.Join(cache, "kvscope/models/org/tiny-GGUF/next.gguf.part"), []byte("GGUF partial"))
	writeFile(t, filepath.Join(cache, "kvscope/models/org/tiny-GGUF/next.gguf.lock"), nil)

	writeModel(t, filepath.Join(cache, "llama.cpp/ggml-org_gemma-4-E2B-it-GGUF_gemma-4-E2B-it-Q8_0.gguf"), "gemma4", quant.Q8_0,
		gguf.NewKV("general.file_type", uint32(7)))
	writeFile(t, filepath.Join(cache, "llama.cpp/ggml-org_gemma-4-E2B-it-GGUF_gemma-4-E2B-it-Q8_0.gguf.etag"), []byte(`"x"`))

	writeModel(t, filepath.Join(home, ".lmstudio/models/pub/m-GGUF/m-IQ2_XXS.gguf"), "llama", quant.IQ2_XXS,
		gguf.NewKV("general.file_type", uint32(19)))
	writeModel(t, filepath.Join(cache, "lm-studio/models/pub2/big-GGUF/big-00001-of-00002.gguf"), "llama", quant.F16,
		gguf.NewKV("split.count", uint16(2)), gguf.NewKV("split.no", uint16(0)))

	hub := filepath.Join(cache, "huggingface/hub")
	qwen := filepath.Join(hub, "models--Org--Qwen2-GGUF")
	tmp := filepath.Join(t.TempDir(), "q.gguf")
	blob := writeModel(t, tmp, "qwen2", quant.F16)
	sum := sha256.Sum256(blob)
	writeFile(t, filepath.Join(qwen, "blobs", hex.EncodeToString(sum[:])), blob)
	symlink(t, "../../blobs/"+hex.EncodeToString(sum[:]), filepath.Join(qwen, "snapshots/aaa/q.gguf"))
	symlink(t, "../../blobs/"+hex.EncodeToString(sum[:]), filepath.Join(qwen, "snapshots/bbb/q.gguf"))
	writeFile(t, filepath.Join(qwen, "refs/main"), []byte("aaa"))
	broken := filepath.Join(hub, "models--Org--Broken/snapshots/ccc")
	writeFile(t, filepath.Join(broken, "bad.gguf"), append([]byte("GGUF\x03\x00\x00\x00"), bytes.Repeat([]byte{0xff}, 40)...))
	writeFile(t, filepath.Join(broken, "empty.gguf"), nil)
	symlink(t, "../../blobs/missing", filepath.Join(broken, "dangling.gguf"))
	if err := os.MkdirAll(filepath.Join(broken, "folder.gguf"), 0o755); err != nil {
		t.Fatal(err)
	}

	want := []struct {
		path        string // relative to home
		src         Source
		repo, arch  string
		quant       string
		runnable    bool
		unsupported string // in Unsupported
		err         string // in Err
	}{
		{".cache/kvscope/models/org/tiny-GGUF/tiny-q8_0.gguf", SourceKvscope, "org/tiny-GGUF", "llama", "Q8_0", true, "", ""},
		{".cache/llama.cpp/ggml-org_gemma-4-E2B-it-GGUF_gemma-4-E2B-it-Q8_0.gguf", SourceLlamaCpp, "", "gemma4", "Q8_0", false, `architecture "gemma4" is not supported`, ""},
		{".lmstudio/models/pub/m-GGUF/m-IQ2_XXS.gguf", SourceLMStudio, "pub/m-GGUF", "llama", "IQ2_XXS", false, "tensor type IQ2_XXS is not supported", ""},
		{".cache/lm-studio/models/pub2/big-GGUF/big-00001-of-00002.gguf", SourceLMStudio, "pub2/big-GGUF", "llama", "F16", false, "part 1 of a model split into 2 files", ""},
		{".cache/huggingface/hub/models--Org--Broken/snapshots/ccc/bad.gguf", SourceHFHub, "Org/Broken", "", "", false, "", "malformed GGUF"},
		{".cache/huggingface/hub/models--Org--Broken/snapshots/ccc/dangling.gguf", SourceHFHub, "Org/Broken", "", "", false, "", "no such file"},
		{".cache/huggingface/hub/models--Org--Broken/snapshots/ccc/empty.gguf", SourceHFHub, "Org/Broken", "", "", false, "", "GGUF"},
		{".cache/huggingface/hub/models--Org--Qwen2-GGUF/snapshots/aaa/q.gguf", SourceHFHub, "Org/Qwen2-GGUF", "qwen2", "F16", true, "", ""},
	}
	got := Scan(context.Background(), DefaultDirs())
	if len(got) != len(want) {
		for _, l := range got {
			t.Logf("found %s (%s) err %v", l.Path, l.Source, l.Err)
		}
		t.Fatalf("found %d files, want %d", len(got), len(want))
	}
	for i, w := range want {
		l := got[i]
		if l.Path != filepath.Join(home, w.path) {
			t.Errorf("file %d is %s, want %s", i, l.Path, w.path)
			continue
		}
		if l.Source != w.src || l.Repo != w.repo || l.Arch != w.arch || l.Quant != w.quant || l.Runnable() != w.runnable {
			t.Errorf("%s: source %q repo %q arch %q quant %q runnable %v; want %q %q %q %q %v",
				w.path, l.Source, l.Repo, l.Arch, l.Quant, l.Runnable(), w.src, w.repo, w.arch, w.quant, w.runnable)
		}
		if w.unsupported != "" && !strings.Contains(l.Unsupported, w.unsupported) {
			t.Errorf("%s: Unsupported %q, want %q", w.path, l.Unsupported, w.unsupported)
		}
		if w.err == "" && l.Err != nil || w.err != "" && (l.Err == nil || !strings.Contains(l.Err.Error(), w.err)) {
			t.Errorf("%s: Err %v, want %q", w.path, l.Err, w.err)
		}
		if w.err == "" && (l.Size <= 0 || l.Params <= 0) {
			t.Errorf("%s: size %d, %d weights", w.path, l.Size, l.Params)
		}
	}
	if got[0].Size != int64(len(tiny)) || got[0].Name != "tiny" {
		t.Errorf("kvscope model: size %d name %q, want %d %q", got[0].Size, got[0].Name, len(tiny), "tiny")
	}

	// A cancelled scan stops, returning what it had.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := len(Scan(ctx, DefaultDirs())); n != 0 {
		t.Errorf("a cancelled scan found %d files", n)
	}
}

// A file downloaded into kvscope's folder is then found by Scan.
func TestScanFindsDownload(t *testing.T) {
	home := setHome(t)
	h := newFakeHub(t, 0)
	b := writeModel(t, filepath.Join(t.TempDir(), "m.gguf"), "llama", quant.Q8_0, gguf.NewKV("general.file_type", uint32(7)))
	h.setContent(b)
	dir, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, ".cache/kvscope/models"); dir != want {
		t.Fatalf("models folder %s, want %s", dir, want)
	}
	c := &Client{Endpoint: h.hub.URL, Dir: dir}
	if _, err := c.Download(context.Background(), h.ref(), nil); err != nil {
		t.Fatal(err)
	}
	got := Scan(context.Background(), DefaultDirs())
	if len(got) != 1 || got[0].Repo != h.repo || !got[0].Runnable() || got[0].Quant != "Q8_0" {
		t.Fatalf("scan after download: %+v", got)
	}
}

func TestDefaultDirs(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string // relative paths are under the home folder
		want Dirs
	}{
		{"defaults", nil, Dirs{
			Kvscope: ".cache/kvscope/models", LlamaCpp: ".cache/llama.cpp",
			LMStudio: []string{".lmstudio/models", ".cache/lm-studio/models"}, HFHub: ".cache/huggingface/hub",
		}},
		{"XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": "x"}, Dirs{
			Kvscope: "x/kvscope/models", LlamaCpp: "x/llama.cpp",
			LMStudio: []string{".lmstudio/models", ".cache/lm-studio/models"}, HFHub: "x/huggingface/hub",
		}},
		{"LLAMA_CACHE and HF_HOME", map[string]string{"LLAMA_CACHE": "l", "HF_HOME": "hf"}, Dirs{
			Kvscope: ".cache/kvscope/models", LlamaCpp: "l",
			LMStudio: []string{".lmstudio/models", ".cache/lm-studio/models"}, HFHub: "hf/hub",
		}},
		{"HF_HUB_CACHE over HF_HOME", map[string]string{"HF_HOME": "hf", "HF_HUB_CACHE": "c", "HUGGINGFACE_HUB_CACHE": "old"}, Dirs{
			Kvscope: ".cache/kvscope/models", LlamaCpp: ".cache/llama.cpp",
			LMStudio: []string{".lmstudio/models", ".cache/lm-studio/models"}, HFHub: "c",
		}},
		{"HUGGINGFACE_HUB_CACHE", map[string]string{"HUGGINGFACE_HUB_CACHE": "old"}, Dirs{
			Kvscope: ".cache/kvscope/models", LlamaCpp: ".cache/llama.cpp",
			LMStudio: []string{".lmstudio/models", ".cache/lm-studio/models"}, HFHub: "old",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := setHome(t)
			abs := func(p string) string { return filepath.Join(home, p) }
			for k, v := range tc.env {
				t.Setenv(k, abs(v))
			}
			w := tc.want
			w.Kvscope, w.LlamaCpp, w.HFHub = abs(w.Kvscope), abs(w.LlamaCpp), abs(w.HFHub)
			for i := range w.LMStudio {
				w.LMStudio[i] = abs(w.LMStudio[i])
			}
			got := DefaultDirs()
			if got.Kvscope != w.Kvscope || got.LlamaCpp != w.LlamaCpp || got.HFHub != w.HFHub || !slices.Equal(got.LMStudio, w.LMStudio) {
				t.Errorf("got %+v\nwant %+v", got, w)
			}
		})
	}
}

func TestEndpointAndToken(t *testing.T) {
	cases := []struct {
		name      string
		endpoint  string
		token     string
		tokenFile string // written as HF_HOME/token
		wantEnd   string
		wantErr   bool
		wantToken string
	}{
		{name: "defaults", wantEnd: DefaultEndpoint},
		{name: "mirror", endpoint: "https://hf-mirror.example/", wantEnd: "https://hf-mirror.example"},
		{name: "local", endpoint: "http://127.0.0.1:8080", wantEnd: "http://127.0.0.1:8080"},
		{name: "not http", endpoint: "ftp://example.org", wantErr: true},
		{name: "not a URL", endpoint: "huggingface.co", wantErr: true},
		{name: "token", token: "hf_abc", wantEnd: DefaultEndpoint, wantToken: "hf_abc"},
		{name: "token file", tokenFile: "hf_file\n", wantEnd: DefaultEndpoint, wantToken: "hf_file"},
		{name: "HF_TOKEN over the file", token: "hf_env", tokenFile: "hf_file", wantEnd: DefaultEndpoint, wantToken: "hf_env"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := setHome(t)
			t.Setenv("HF_HOME", filepath.Join(home, "hf"))
			t.Setenv("HF_ENDPOINT", tc.endpoint)
			t.Setenv("HF_TOKEN", tc.token)
			if tc.tokenFile != "" {
				writeFile(t, filepath.Join(home, "hf", "token"), []byte(tc.tokenFile))
			}
			e, err := Endpoint()
			if (err != nil) != tc.wantErr || e != tc.wantEnd {
				t.Errorf("Endpoint() = %q, %v; want %q (error: %v)", e, err, tc.wantEnd, tc.wantErr)
			}
			if got := Token(); got != tc.wantToken {
				t.Errorf("Token() = %q, want %q", got, tc.wantToken)
			}
			if c, err := NewClient(); (err != nil) != tc.wantErr || err == nil && (c.Endpoint != tc.wantEnd || c.Token != tc.wantToken || c.Retries == 0) {
				t.Errorf("NewClient() = %+v, %v", c, err)
			}
		})
	}
}

func TestCatalog(t *testing.T) {
	required := []string{"qwen3-0.6b", "qwen2.5-0.5b", "llama-3.2-1b", "smollm2-360m", "gemma-3-1b", "phi-3.5-mini"}
	ids := map[string]bool{}
	runnable := 0
	for _, e := range Catalog {
		t.Run(e.ID, func(t *testing.T) {
			if err := e.Ref.Check(); err != nil {
				t.Error(err)
			}
			if ids[e.ID] {
				t.Error("duplicate ID")
			}
			ids[e.ID] = true
			if e.Title == "" || e.Arch == "" || e.Quant == "" || e.Size < 100<<20 || e.Size > 4<<30 || len(e.Checked) < 20 {
				t.Errorf("incomplete entry %+v", e)
			}
			if !strings.HasSuffix(e.Ref.File, ".gguf") || !strings.Contains(strings.ToUpper(e.Ref.File), e.Quant) {
				t.Errorf("file %s is not a %s GGUF", e.Ref.File, e.Quant)
			}
			if e.Runnable() != slices.Contains(model.Supported, e.Arch) {
				t.Error("Runnable disagrees with model.Supported")
			}
			if f, ok := Find(e.ID); !ok || f.Ref != e.Ref {
				t.Errorf("Find(%q) = %+v, %v", e.ID, f, ok)
			}
		})
		if e.Runnable() {
			runnable++
		}
	}
	for _, id := range required {
		if !ids[id] {
			t.Errorf("no catalog entry %s", id)
		}
	}
	if runnable < 2 {
		t.Errorf("only %d catalog models run in kvscope", runnable)
	}
	if _, ok := Find("no-such-model"); ok {
		t.Error("Find found a model that is not there")
	}
}
