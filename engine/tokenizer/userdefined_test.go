package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

// TestUserDefinedTokensOnSharedVocabularies adds user-defined tokens to
// llama.cpp's vocabularies and tokenizes each test input joined to the
// next by one of them: without parseSpecial, the token is split out and
// the text on either side gets llama.cpp's ids for it alone (an SPM text
// after a special token gets the space prefix, as at the start), while the
// vocabulary's control token stays text.
func TestUserDefinedTokensOnSharedVocabularies(t *testing.T) {
	tests := []struct {
		file    string
		control string
	}{
		{"ggml-vocab-llama-spm.gguf", "</s>"},
		{"ggml-vocab-gpt-2.gguf", "<|endoftext|>"},
		{"gpt2-vocab-pre-llama-bpe.gguf", "<|endoftext|>"},
		{"gpt2-vocab-pre-qwen2.gguf", "<|endoftext|>"},
	}
	added := []string{"<tool_call>", "</tool_call>", "[[two words]]"}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			base := "testdata/tokenizer/" + tt.file
			f, err := gguf.Open(testshared.Path(t, base))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			v, err := VocabFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			v.Tokens = slices.Clone(v.Tokens)
			v.Types = slices.Clone(v.Types)
			if v.Scores != nil {
				v.Scores = slices.Clone(v.Scores)
			}
			var ids []int
			for _, s := range added {
				ids = append(ids, len(v.Tokens))
				v.Tokens = append(v.Tokens, s)
				v.Types = append(v.Types, TypeUserDefined)
				if v.Scores != nil {
					v.Scores = append(v.Scores, 0)
				}
			}
			tok, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			inputs, want := readVocabCases(t, base)
			for i := range inputs {
				j := (i + 1) % len(inputs)
				k := i % len(added)
				text := inputs[i] + added[k] + inputs[j]
				exp := slices.Concat(want[i], []int{ids[k]}, want[j])
				for _, special := range []bool{false, true} {
					if got := tok.Encode(text, false, special); !slices.Equal(got, exp) {
						t.Errorf("case %d+%d, parseSpecial %v: %q\n got %v\nwant %v", i, j, special, text, got, exp)
					}
				}
				// Decode shows user-defined tokens (and, as llama.cpp, keeps
				// the SPM space put after them).
				if got, w := tok.Decode(exp), tok.Decode(want[i])+added[k]; !strings.HasPrefix(got, w) {
					t.Errorf("case %d: Decode gives %q, want it to start with %q", i, got, w)
				}
			}
			ctl, _ := tok.ID(tt.control)
			text := fmt.Sprintf("a%sb", tt.control)
			if slices.Contains(tok.Encode(text, false, false), ctl) || !slices.Contains(tok.Encode(text, false, true), ctl) {
				t.Errorf("the control token %q: %v without parseSpecial, %v with; want it only with", tt.control, tok.Encode(text, false, false), tok.Encode(text, false, true))
			}
		})
	}
}
