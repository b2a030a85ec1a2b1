package tokenizer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

// loadShared builds the tokenizer of a shared GGUF file (skipping the test
// when the shared data is absent).
func loadShared(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(testshared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return tok
}

// parseIDs parses space-separated token ids.
func parseIDs(t *testing.T, s string) []int {
	t.Helper()
	var ids []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad id %q: %v", f, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// readVocabCases reads llama.cpp's tokenizer test inputs (separated by
// lines "__ggml_vocab_test__", each input followed by one) and the expected
// ids, one line per input.
func readVocabCases(t *testing.T, base string) (inputs []string, want [][]int) {
	t.Helper()
	inp, err := os.ReadFile(testshared.Path(t, base+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(testshared.Path(t, base+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	parts := strings.Split(string(inp), sep)
	if last := parts[len(parts)-1]; last != "" {
		t.Fatalf("%s.inp: text after the last separator: %q", base, last)
	}
	inputs = parts[:len(parts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d expected lines", base, len(inputs), len(lines))
	}
	for _, l := range lines {
		want = append(want, parseIDs(t, l))
	}
	return inputs, want
}

func TestLlamaCppVocabCases(t *testing.T) {
	files := []string{
		"ggml-vocab-llama-spm.gguf",
		"ggml-vocab-gpt-2.gguf",
		"gpt2-vocab-pre-llama-bpe.gguf",
		"gpt2-vocab-pre-qwen2.gguf",
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			base := "testdata/tokenizer/" + name
			tok := loadShared(t, base)
			inputs, want := readVocabCases(t, base)
			pass := 0
			for i, in := range inputs {
				got := tok.Encode(in, false, false)
				if fmt.Sprint(got) != fmt.Sprint(want[i]) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
					continue
				}
				pass++
			}
			t.Logf("%s: %d/%d cases match llama.cpp", name, pass, len(inputs))
		})
	}
}

// Decode(Encode(x)) gives x back for every llama.cpp test input, with and
// without BOS. A Decoder fed one id at a time gives the same text after
// BOS; without BOS it decodes a continuation and keeps the SPM space prefix.
func TestLlamaCppVocabRoundTrip(t *testing.T) {
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "gpt2-vocab-pre-qwen2.gguf"} {
		t.Run(name, func(t *testing.T) {
			base := "testdata/tokenizer/" + name
			tok := loadShared(t, base)
			inputs, _ := readVocabCases(t, base)
			for _, in := range inputs {
				for _, addSpecial := range []bool{false, true} {
					ids := tok.Encode(in, addSpecial, false)
					if got := tok.Decode(ids); got != in {
						t.Errorf("Decode(Encode(%q, %v)) = %q", in, addSpecial, got)
					}
					d := tok.NewDecoder()
					var b strings.Builder
					for _, id := range ids {
						b.WriteString(d.Add(id))
					}
					b.WriteString(d.Flush())
					want := in
					if !addSpecial && in != "" && tok.Model() == ModelSPM {
						want = " " + in
					}
					if b.String() != want {
						t.Errorf("Decoder over Encode(%q, %v) = %q", in, addSpecial, b.String())
					}
				}
			}
		})
	}
}

// stories260K: the prompt ids of llama.cpp's greedy runs (BOS added), and
// the text of their outputs.
func TestStories260KGreedyReference(t *testing.T) {
	tok := loadShared(t, "models/stories260K.gguf")
	data, err := os.ReadFile(testshared.Path(t, "reference/stories260K-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		prompt, text string
		promptIDs    []int
		outputIDs    []int
	}
	var runs []run
	// Records are "prompt: ", "prompt_ids: ", "output_ids: ", "output_text: "
	// lines; output_text runs until the next "prompt: " line.
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "prompt: "):
			runs = append(runs, run{prompt: strings.TrimPrefix(l, "prompt: ")})
		case len(runs) == 0:
			continue
		case strings.HasPrefix(l, "prompt_ids: "):
			runs[len(runs)-1].promptIDs = parseIDs(t, strings.TrimPrefix(l, "prompt_ids: "))
		case strings.HasPrefix(l, "output_ids: "):
			runs[len(runs)-1].outputIDs = parseIDs(t, strings.TrimPrefix(l, "output_ids: "))
		case strings.HasPrefix(l, "output_text: "):
			text := []string{strings.TrimPrefix(l, "output_text: ")}
			for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "prompt: ") {
				i++
				text = append(text, lines[i])
			}
			// The record ends with a blank line before the next prompt.
			runs[len(runs)-1].text = strings.TrimRight(strings.Join(text, "\n"), "\n")
		}
	}
	if len(runs) != 3 {
		t.Fatalf("found %d runs in stories260K-greedy.txt, want 3", len(runs))
	}
	for _, r := range runs {
		if got := tok.Encode(r.prompt, true, false); fmt.Sprint(got) != fmt.Sprint(r.promptIDs) {
			t.Errorf("Encode(%q) = %v, want %v", r.prompt, got, r.promptIDs)
		}
		// Generated ids continue the prompt: a Decoder keeps their spaces.
		d := tok.NewDecoder()
		var b strings.Builder
		for _, id := range r.outputIDs {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if b.String() != r.text {
			t.Errorf("output of %q decodes to\n%q\nwant\n%q", r.prompt, b.String(), r.text)
		}
		// The whole sequence decodes to prompt + output.
		all := append(append([]int{}, r.promptIDs...), r.outputIDs...)
		if got := tok.Decode(all); got != r.prompt+r.text {
			t.Errorf("Decode(prompt+output) = %q, want %q", got, r.prompt+r.text)
		}
	}
}

// stories260K-textA.txt encodes (with BOS) to stories260K-textA.ids.
func TestStories260KTextA(t *testing.T) {
	tok := loadShared(t, "models/stories260K.gguf")
	text, err := os.ReadFile(testshared.Path(t, "reference/stories260K-textA.txt"))
	if err != nil {
		t.Fatal(err)
	}
	idsText, err := os.ReadFile(testshared.Path(t, "reference/stories260K-textA.ids"))
	if err != nil {
		t.Fatal(err)
	}
	want := parseIDs(t, string(idsText))
	if len(want) != 162 {
		t.Fatalf("stories260K-textA.ids holds %d ids, want 162", len(want))
	}
	got := tok.Encode(string(text), true, false)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Encode(textA) =\n%v\nwant\n%v", got, want)
	}
	if dec := tok.Decode(got); dec != string(text) {
		t.Errorf("Decode(Encode(textA)) = %q, want the text", dec)
	}
}
