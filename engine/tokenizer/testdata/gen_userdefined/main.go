// Command gen_userdefined fills in llama.cpp's ids in
// engine/tokenizer/testdata/userdefined.json: it writes each vocabulary the
// file describes (a shared vocabulary changed by its recipe) as a GGUF
// file, runs llama-tokenize on each case's text without and with
// --parse-special, and writes the ids back. The tests read the JSON only.
//
//	go run ./engine/tokenizer/testdata/gen_userdefined LLAMA-TOKENIZE
//
// run from the repository root, with the shared data at ../shared (or
// KVSCOPE_TESTDATA).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"kvscope/engine/gguf"
)

const file = "engine/tokenizer/testdata/userdefined.json"

type doc struct {
	Note     string  `json:"note"`
	LlamaCpp string  `json:"llama.cpp"`
	Vocabs   []vocab `json:"vocabs"`
}

type vocab struct {
	Name        string   `json:"name"`
	Base        string   `json:"base"`
	GeneralName string   `json:"general_name,omitempty"`
	UserDefined []string `json:"user_defined,omitempty"`
	Add         []struct {
		Text string `json:"text"`
		Type int32  `json:"type"`
	} `json:"add"`
	EOS   *uint32 `json:"eos,omitempty"`
	Cases []struct {
		Text    string `json:"text"`
		Plain   []int  `json:"plain"`
		Special []int  `json:"special"`
	} `json:"cases"`
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gen_userdefined LLAMA-TOKENIZE")
	}
	tool := os.Args[1]
	shared := os.Getenv("KVSCOPE_TESTDATA")
	if shared == "" {
		shared = "../shared"
	}
	b, err := os.ReadFile(file)
	if err != nil {
		log.Fatal(err)
	}
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "userdefined")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for i := range d.Vocabs {
		v := &d.Vocabs[i]
		path := filepath.Join(dir, fmt.Sprintf("vocab%d.gguf", i))
		if err := write(path, filepath.Join(shared, "testdata/tokenizer", v.Base), v); err != nil {
			log.Fatal(err)
		}
		for j := range v.Cases {
			c := &v.Cases[j]
			in := filepath.Join(dir, "input.txt")
			if err := os.WriteFile(in, []byte(c.Text), 0o644); err != nil {
				log.Fatal(err)
			}
			c.Plain = tokenize(tool, path, in, "--no-parse-special")
			c.Special = tokenize(tool, path, in)
		}
	}
	out, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
}

// write writes the vocabulary of base changed by v's recipe to path.
func write(path, base string, v *vocab) error {
	f, err := gguf.Open(base)
	if err != nil {
		return err
	}
	defer f.Close()
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	scores, hasScores := f.Float32s("tokenizer.ggml.scores")
	tokens, types, scores = slices.Clone(tokens), slices.Clone(types), slices.Clone(scores)
	for _, s := range v.UserDefined {
		i := slices.Index(tokens, s)
		if i < 0 {
			return fmt.Errorf("%s: no token %q", base, s)
		}
		types[i] = 4
	}
	for _, a := range v.Add {
		tokens = append(tokens, a.Text)
		types = append(types, a.Type)
		if hasScores {
			scores = append(scores, 0)
		}
	}
	var kvs []gguf.KV
	for _, k := range f.Keys() {
		x, _ := f.Get(k)
		switch k {
		case "tokenizer.ggml.tokens":
			x = tokens
		case "tokenizer.ggml.token_type":
			x = types
		case "tokenizer.ggml.scores":
			x = scores
		case "tokenizer.ggml.eos_token_id":
			if v.EOS != nil {
				x = *v.EOS
			}
		case "general.name":
			if v.GeneralName != "" {
				x = v.GeneralName
			}
		}
		kvs = append(kvs, gguf.NewKV(k, x))
	}
	var b bytes.Buffer
	if err := gguf.Write(&b, kvs, nil); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// tokenize runs llama-tokenize on the text in file in and returns its ids.
func tokenize(tool, model, in string, args ...string) []int {
	cmd := exec.Command(tool, append([]string{"-m", model, "-f", in, "--ids", "--no-bos", "--log-disable"}, args...)...)
	cmd.Dir = filepath.Dir(in) // ggml loads CPU variants from the current folder too
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("%s: %v", cmd, err)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var ids []int
	if err := json.Unmarshal(lines[len(lines)-1], &ids); err != nil {
		log.Fatalf("%s: output %q: %v", cmd, out, err)
	}
	if ids == nil {
		ids = []int{}
	}
	return ids
}
