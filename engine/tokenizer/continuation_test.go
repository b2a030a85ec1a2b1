package tokenizer

import "testing"

// TestEncodeContinuation: text that continues earlier tokens gets no BOS
// and no SPM space prefix at its start, but one after a special token
// inside it, as Encode puts there.
func TestEncodeContinuation(t *testing.T) {
	spm := mustNew(t, spmVocab([]string{"▁", "a", "b", "▁a", "▁b"}, []float32{-1, -1, -1, -0.5, -0.5}))
	bpe := mustNew(t, bpeVocab("gpt-2", nil, []string{"<|endoftext|>"}, []int32{TypeControl}))
	tests := []struct {
		name         string
		tok          *Tokenizer
		text         string
		parseSpecial bool
		want, encode string // EncodeContinuation's, and Encode's with addSpecial
	}{
		{"SPM: no space first", spm, "a b", false, "a|▁b", "<s>|▁a|▁b"},
		{"SPM: a space after a special token", spm, "a</s>b", true, "a|</s>|▁b", "<s>|▁a|</s>|▁b"},
		{"SPM: a space the text has stays", spm, " a", false, "▁a", "<s>|▁|▁a"},
		{"BPE: as Encode without BOS", bpe, "ab", false, "a|b", "a|b"},
		{"empty", spm, "", false, "", "<s>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pieces(tt.tok, tt.tok.EncodeContinuation(tt.text, tt.parseSpecial)); got != tt.want {
				t.Errorf("EncodeContinuation(%q) = %s, want %s", tt.text, got, tt.want)
			}
			if got := pieces(tt.tok, tt.tok.Encode(tt.text, true, tt.parseSpecial)); got != tt.encode {
				t.Errorf("Encode(%q) = %s, want %s", tt.text, got, tt.encode)
			}
		})
	}
}
