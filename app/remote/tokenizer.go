// This file holds the vLLM page's tokenizer: the served model's, read from
// a GGUF file or a tokenizer.json, to decode a selected chain's tokens.

package remote

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/storage"

	"kvscope/app/uithread"
	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
)

// openTokenizer asks for the served model's tokenizer, a GGUF or a
// tokenizer.json, and decodes chains with it.
func (p *vllmPanel) openTokenizer() {
	d := dialog.NewFileOpen(func(r fyne.URIReadCloser, err error) {
		if err != nil || r == nil {
			return
		}
		path := r.URI().Path()
		r.Close()
		p.openTokenizerPath(path)
	}, p.win)
	d.SetFilter(storage.NewExtensionFileFilter(tokenizerExtensions))
	d.Show()
}

// tokenizerExtensions are the files the open-tokenizer dialog lists.
var tokenizerExtensions = []string{".gguf", ".GGUF", ".json", ".JSON"}

// openTokenizerPath loads the tokenizer at path off the UI goroutine and
// then decodes chains with it, or says why it could not (UI goroutine).
func (p *vllmPanel) openTokenizerPath(path string) {
	p.tokName.SetText("Reading " + filepath.Base(path) + "…")
	go func() {
		tok, err := LoadTokenizer(path)
		uithread.Do(func() {
			if err != nil {
				p.tokName.SetText(err.Error())
				return
			}
			p.SetTokenizer(tok, path)
		})
	}()
}

// SetTokenizer decodes chains with tok from now on (UI goroutine); name
// says where it came from.
func (p *vllmPanel) SetTokenizer(tok *tokenizer.Tokenizer, name string) {
	p.tok = tok
	p.tokName.SetText("Tokenizer: " + name)
	p.showChain()
}

// LoadTokenizer reads the served model's tokenizer (or that of any model
// with the same vocabulary) from a GGUF file or a Hugging Face
// tokenizer.json, told apart by their first bytes: a GGUF starts with
// "GGUF", a tokenizer.json with "{".
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	kind, err := sniffTokenizer(path)
	if err != nil {
		return nil, err
	}
	if kind == "json" {
		return tokenizer.LoadHFJSON(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}

// sniffTokenizer says whether path holds a GGUF ("gguf") or JSON
// ("json"), from its first bytes.
func sniffTokenizer(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	head = head[:n]
	if bytes.HasPrefix(head, []byte("GGUF")) {
		return "gguf", nil
	}
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")) // a UTF-8 byte-order mark
	if t := bytes.TrimLeft(head, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return "json", nil
	}
	return "", fmt.Errorf("%s is neither a GGUF file nor a tokenizer.json", path)
}
