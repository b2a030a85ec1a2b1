package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
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

// llamaCppUserDefined is testdata/userdefined.json: vocabularies made from
// the shared ones by a recipe, and llama.cpp's ids for texts on them
// (written by testdata/gen_userdefined with llama-tokenize).
type llamaCppUserDefined struct {
	LlamaCpp string `json:"llama.cpp"`
	Vocabs   []struct {
		Name        string   `json:"name"`
		Base        string   `json:"base"`
		GeneralName string   `json:"general_name"`
		UserDefined []string `json:"user_defined"`
		Add         []struct {
			Text string `json:"text"`
			Type int32  `json:"type"`
		} `json:"add"`
		EOS   *int `json:"eos"`
		Cases []struct {
			Text    string `json:"text"`
			Plain   []int  `json:"plain"`
			Special []int  `json:"special"`
		} `json:"cases"`
	} `json:"vocabs"`
}

// TestUserDefinedLikeLlamaCpp encodes texts holding user-defined tokens
// (and control-token texts) on SPM and BPE vocabularies and wants
// llama.cpp's ids, without and with parseSpecial. Among them is phi-3's
// vocabulary, whose </s> is a user-defined token: llama.cpp makes it a
// control token (its text is an end-of-generation text), so typed as text
// without parseSpecial it stays "</", "s", ">". A phi-3 whose general.name
// holds "Phi3" also drops the white space after each special token but
// <s>, <unk> and <|endoftext|>; "Phi 3 Mini" does not.
func TestUserDefinedLikeLlamaCpp(t *testing.T) {
	b, err := os.ReadFile("testdata/userdefined.json")
	if err != nil {
		t.Fatal(err)
	}
	var d llamaCppUserDefined
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Vocabs) == 0 {
		t.Fatal("userdefined.json has no vocabularies")
	}
	for _, rv := range d.Vocabs {
		t.Run(rv.Name, func(t *testing.T) {
			f, err := gguf.Open(testshared.Path(t, "testdata/tokenizer/"+rv.Base))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			v, err := VocabFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			v.Tokens, v.Types, v.Scores = slices.Clone(v.Tokens), slices.Clone(v.Types), slices.Clone(v.Scores)
			for _, s := range rv.UserDefined {
				i := slices.Index(v.Tokens, s)
				if i < 0 {
					t.Fatalf("no token %q in %s", s, rv.Base)
				}
				v.Types[i] = TypeUserDefined
			}
			for _, a := range rv.Add {
				v.Tokens = append(v.Tokens, a.Text)
				v.Types = append(v.Types, a.Type)
				if v.Scores != nil {
					v.Scores = append(v.Scores, 0)
				}
			}
			if rv.EOS != nil {
				v.EOS = *rv.EOS
			}
			if rv.GeneralName != "" {
				v.Name = rv.GeneralName
			}
			tok, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rv.Cases {
				for _, m := range []struct {
					special bool
					want    []int
				}{{false, c.Plain}, {true, c.Special}} {
					if got := tok.Encode(c.Text, false, m.special); !slices.Equal(got, m.want) {
						t.Errorf("%q, parseSpecial %v:\n got %v\nwant %v (llama.cpp %.9s)", c.Text, m.special, got, m.want, d.LlamaCpp)
					}
				}
			}
		})
	}
}
