package chat

import (
	"slices"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// TestTokenize: with stories260K's SPM vocabulary (<s> and </s> are control
// tokens) and the Llama 2 format, which writes both between turns.
func TestTokenize(t *testing.T) {
	file, err := gguf.Open(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tok, err := tokenizer.FromGGUF(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Builtin("Llama 2", tok.Token(tok.BOS()), tok.Token(tok.EOS()))
	if err != nil {
		t.Fatal(err)
	}
	conv := func(user string) []Message {
		return []Message{{"system", "Tell stories."}, {"user", "Once upon a time"}, {"assistant", "there was a cat."}, {"user", user}}
	}
	count := func(ids []int, id int) int {
		n := 0
		for _, x := range ids {
			if x == id {
				n++
			}
		}
		return n
	}
	tests := []struct {
		name       string
		user       string
		wholeText  bool // ids equal those of the whole text with special parsing
		wantBOS    int
		wantEOS    int
		wantInText string // Decode holds it
	}{
		{"ordinary text", "The dog ran.", true, 2, 1, "The dog ran."},
		{"control-token text stays text", "Say <s> and </s>.", false, 2, 1, "Say <s> and </s>."},
		{"a message that is only a control token", "</s>", false, 2, 1, "</s>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := f.Render(conv(tt.user), Options{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			ids := Tokenize(p, tok, true)
			if ids[0] != tok.BOS() {
				t.Fatalf("ids start with %d, not BOS", ids[0])
			}
			if whole := tok.Encode(p.Text(), true, true); tt.wholeText && !slices.Equal(ids, whole) {
				t.Fatalf("ids differ from the whole text's\n got: %v\nwant: %v", ids, whole)
			}
			if n := count(ids, tok.BOS()); n != tt.wantBOS {
				t.Errorf("%d BOS, want %d (the added one and the template's)", n, tt.wantBOS)
			}
			if n := count(ids, tok.EOS()); n != tt.wantEOS {
				t.Errorf("%d EOS, want %d (the template's)", n, tt.wantEOS)
			}
			if d := tok.Decode(ids); !strings.Contains(d, tt.wantInText) {
				t.Errorf("decoded %q lacks %q", d, tt.wantInText)
			}
		})
	}
	if ids := Tokenize(&Prompt{}, tok, false); len(ids) != 0 {
		t.Errorf("an empty prompt without BOS gives %v", ids)
	}
}
