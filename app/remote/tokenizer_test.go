package remote

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/storage"

	"kvscope/app/uithread"
	"kvscope/internal/testshared"
)

// writeTokenizerJSON writes a byte-level tokenizer.json of 510 tokens in
// which id i (past 259) is " w<i>", and returns its path.
func writeTokenizerJSON(t *testing.T, dir string) string {
	t.Helper()
	vocab := map[string]int{"<|endoftext|>": 0}
	for i := 1; i < 510; i++ {
		vocab[fmt.Sprintf("Ġw%d", i)] = i
	}
	b, err := json.Marshal(map[string]any{
		"version":      "1.0",
		"added_tokens": []any{map[string]any{"id": 0, "content": "<|endoftext|>", "special": true}},
		"decoder":      map[string]any{"type": "ByteLevel", "add_prefix_space": true},
		"model":        map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Opening a tokenizer.json decodes the selected chain to text; a file
// that is no tokenizer says so where the tokenizer's name goes.
func TestOpenTokenizerJSONDecodesChain(t *testing.T) {
	p, pub := watched(t)
	pub.Publish(stored([]uint64{1, 2, 3}, nil, 4))
	uithread.WaitFor(t, "the tree of 3 blocks", func() bool { return p.tree.Tree().Blocks == 3 })
	uithread.Locked(func() {
		v := p.tree
		c, _ := cellOf(t, v, 3)
		s := v.Size()
		v.Tapped(&fyne.PointEvent{Position: fyne.NewPos(float32(c.X0+c.X1)/2*s.Width, float32(c.Y0+c.Y1)/2*s.Height)})
		if !strings.HasPrefix(p.text.Text, "Chain of 3 blocks, 12 tokens: 264 265") {
			t.Fatalf("chain text %q", p.text.Text)
		}
	})
	dir := t.TempDir()
	bad := filepath.Join(dir, "notes.json")
	if err := os.WriteFile(bad, []byte("not a tokenizer"), 0o644); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() { p.openTokenizerPath(bad) })
	uithread.WaitFor(t, "the bad file's error", func() bool {
		return strings.Contains(p.tokName.Text, "neither a GGUF file nor a tokenizer.json")
	})

	path := writeTokenizerJSON(t, dir)
	uithread.Locked(func() { p.openTokenizerPath(path) })
	want := "Chain of 3 blocks, 12 tokens: “ w264 w265 w266 w267 w268 w269 w270 w271 w272 w273 w274 w275”"
	uithread.WaitFor(t, "the chain decoded through tokenizer.json", func() bool { return p.text.Text == want })
	uithread.Locked(func() {
		if p.tokName.Text != "Tokenizer: "+path {
			t.Errorf("tokenizer label %q", p.tokName.Text)
		}
	})
}

// LoadTokenizer tells a GGUF from a tokenizer.json by content, not by
// name, and the dialog lists both.
func TestLoadTokenizerSniffs(t *testing.T) {
	dir := t.TempDir()
	js := writeTokenizerJSON(t, dir)
	renamed := filepath.Join(dir, "tok.gguf")
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(renamed, append([]byte("\n  "), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{js, renamed} {
		tok, err := LoadTokenizer(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := tok.Decode([]int{0, 7, 8}); got != " w7 w8" {
			t.Errorf("%s: Decode = %q", path, got)
		}
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenizer(empty); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("an empty file: %v", err)
	}
	if _, err := LoadTokenizer(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file gave no error")
	}
	filter := storage.NewExtensionFileFilter(tokenizerExtensions)
	for _, name := range []string{"tokenizer.json", "model.gguf", "MODEL.GGUF"} {
		if !filter.Matches(storage.NewFileURI(filepath.Join(dir, name))) {
			t.Errorf("the open dialog does not list %s", name)
		}
	}
	// A GGUF (named .json, even) still opens as a GGUF.
	src, err := os.ReadFile(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	asJSON := filepath.Join(dir, "stories.json")
	if err := os.WriteFile(asJSON, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if tok, err := LoadTokenizer(asJSON); err != nil || tok.Size() != 512 {
		t.Errorf("a GGUF named .json: %v", err)
	}
}
