package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"kvscope/engine/backend/native"
	"os"
	"strings"

	"github.com/dustin/go-humanize"

	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
)

func infoCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", "-m FILE", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	m, err := model.Load(*path)
	if err != nil {
		return fileErr("m", err)
	}
	defer m.Close()
	f := m.File
	c := m.Config
	name, _ := f.String("general.name")
	size := "size unknown"
	if st, err := os.Stat(*path); err == nil {
		size = humanize.IBytes(uint64(st.Size()))
	}
	fmt.Fprintf(stdout, "file:          %s (%s, GGUF v%d)\n", *path, size, f.Version)
	if name != "" {
		fmt.Fprintf(stdout, "name:          %s\n", name)
	}
	fmt.Fprintf(stdout, "architecture:  %s\n", c.Arch)
	if _, note, err := native.Choose(*be); err != nil {
		return err
	} else {
		fmt.Fprintf(stdout, "compute:       %s\n", note)
	}
	fmt.Fprintf(stdout, "parameters:    %s (%d)\n", humanize.SIWithDigits(float64(m.Params()), 2, ""), m.Params())
	fmt.Fprintf(stdout, "layers:        %d, dim %d, feed-forward %d\n", c.Layers, c.Dim, c.FFDim)
	fmt.Fprintf(stdout, "heads:         %d query, %d key/value, head dim %d\n", c.Heads, c.KVHeads, c.HeadDim)
	rope := "normal"
	if c.RopeNeoX {
		rope = "NeoX"
	}
	fmt.Fprintf(stdout, "rope:          %s, base %g, linear scale %g\n", rope, c.RopeBase, c.RopeScale)
	fmt.Fprintf(stdout, "context:       %d tokens\n", c.Context)

	types := map[string]int{}
	for _, t := range f.Tensors {
		types[t.Type.String()]++
	}
	var parts []string
	for _, k := range sortedKeys(types) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, types[k]))
	}
	fmt.Fprintf(stdout, "tensor types:  %s (%d tensors)\n", strings.Join(parts, ", "), len(f.Tensors))
	fmt.Fprintf(stdout, "weight memory: %s\n", weightMemory(f))

	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		fmt.Fprintf(stdout, "vocabulary:    unusable: %v\n", err)
	} else {
		pre := ""
		if tok.Model() == "gpt2" {
			pre = ", pre-tokenizer " + tok.Pre()
		}
		fmt.Fprintf(stdout, "vocabulary:    %d tokens, %s%s\n", tok.Size(), tok.Model(), pre)
		fmt.Fprintf(stdout, "special:       %s\n", specials(tok))
	}
	tmpl, ok := f.String("tokenizer.chat_template")
	if ok {
		fmt.Fprintf(stdout, "chat template: yes (%d characters)\n", len(tmpl))
	} else {
		fmt.Fprintln(stdout, "chat template: no")
	}
	return nil
}

// weightMemory says how much memory the model's weights take on each
// backend: the Go backend reads the mapped file in place; the CPU library
// holds a packed copy of the types it packs (and gives the file's pages
// back) and a copy of the rest; a device backend holds them in device
// memory.
func weightMemory(f *gguf.File) string {
	var file, cpu int64
	l, err := native.Load("")
	for _, t := range f.Tensors {
		file += int64(t.Size)
		if err != nil {
			continue
		}
		if len(t.Dims) < 2 {
			cpu += int64(t.Size)
			continue
		}
		rows := int64(1)
		for _, d := range t.Dims[1:] {
			rows *= int64(d)
		}
		cpu += l.WeightBytes(t.Type, int(rows), int(t.Dims[0]), int64(t.Size))
	}
	s := fmt.Sprintf("go %s (the mapped file, paged in as read)", humanize.IBytes(uint64(file)))
	if err == nil {
		s += fmt.Sprintf("; cpu %s (%.2f× the tensors: packed at load, the file's pages given back)", humanize.IBytes(uint64(cpu)), float64(cpu)/float64(max(file, 1)))
	} else {
		s += "; cpu unknown (the native library is not built)"
	}
	return s + "; cuda, metal: in device memory, as in the file (a type without a kernel as F16)"
}

func specials(t *tokenizer.Tokenizer) string {
	var parts []string
	for _, s := range []struct {
		name string
		id   int
	}{{"BOS", t.BOS()}, {"EOS", t.EOS()}, {"EOT", t.EOT()}, {"UNK", t.UNK()}, {"PAD", t.PAD()}} {
		if s.id >= 0 {
			parts = append(parts, fmt.Sprintf("%s %d %q", s.name, s.id, t.Token(s.id)))
		}
	}
	parts = append(parts, fmt.Sprintf("add BOS %v, add EOS %v", t.AddBOS(), t.AddEOS()))
	return strings.Join(parts, ", ")
}

func tokenizeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "-m FILE [--no-bos] [--parse-special] (TEXT | -f FILE)", stderr)
	path := fs.String("m", "", "GGUF model or vocabulary `file`")
	noBOS := fs.Bool("no-bos", false, "do not add BOS (or other special tokens the model adds)")
	special := fs.Bool("parse-special", false, "turn special-token text such as <s> into those tokens")
	file := fs.String("f", "", "read the text from `file`")
	if err := fs.parseArgs(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	var text string
	switch {
	case *file != "" && fs.NArg() > 0:
		return fmt.Errorf("give the text either as an argument or with -f, not both")
	case *file != "":
		var err error
		if text, err = readText(*file); err != nil {
			return err
		}
	case fs.NArg() > 0:
		text = strings.Join(fs.Args(), " ")
	default:
		return fmt.Errorf("no text given: pass TEXT or -f FILE")
	}
	tok, err := loadTokenizer(*path)
	if err != nil {
		return err
	}
	ids := tok.Encode(text, !*noBOS, *special)
	b, _ := json.Marshal(ids)
	if ids == nil {
		b = []byte("[]")
	}
	fmt.Fprintln(stdout, string(b))
	return nil
}

// loadTokenizer reads only the vocabulary of a GGUF file, so that
// vocabulary-only files work too.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fileErr("m", err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}
