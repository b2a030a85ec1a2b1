package tokenizer

import (
	"slices"
	"testing"
)

// TestEndOfGenerationSets: each family's end-of-turn tokens end
// generation, as llama.cpp finds them (by text, whatever their type), and
// become control tokens that text without parseSpecial never spells and
// that neither Decode nor a Decoder shows.
func TestEndOfGenerationSets(t *testing.T) {
	const (
		N = TypeNormal
		C = TypeControl
		U = TypeUserDefined
	)
	tests := []struct {
		name     string
		extra    []string
		types    []int32
		eos      string // "" for none
		eog      []string
		eot      string // the EOT found by text
		notEOG   []string
		rendered []string // not end-of-generation tokens that Decode shows
	}{
		{"ChatML, <|im_end|> typed normal", []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, []int32{C, C, N},
			"<|endoftext|>", []string{"<|endoftext|>", "<|im_end|>"}, "<|im_end|>", []string{"<|im_start|>"}, nil},
		{"ChatML, <|im_end|> user-defined", []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, []int32{C, C, U},
			"<|endoftext|>", []string{"<|endoftext|>", "<|im_end|>"}, "<|im_end|>", []string{"<|im_start|>"}, nil},
		{"Llama 3", []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|eot_id|>", "<|eom_id|>"}, []int32{C, C, C, C, C},
			"<|end_of_text|>", []string{"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"}, "<|eot_id|>", []string{"<|begin_of_text|>", "<|start_header_id|>"}, nil},
		{"Gemma", []string{"<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"}, []int32{C, C, C, C},
			"<eos>", []string{"<eos>", "<end_of_turn>"}, "<end_of_turn>", []string{"<start_of_turn>"}, nil},
		{"Phi-3", []string{"<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"}, []int32{C, U, U, U},
			"<|endoftext|>", []string{"<|endoftext|>", "<|end|>"}, "<|end|>", nil, []string{"<|user|>", "<|assistant|>"}},
		{"gpt-oss: <|end|> ends a message", []string{"<|return|>", "<|call|>", "<|end|>", "<|start|>"}, []int32{C, C, C, C},
			"<|return|>", []string{"<|return|>", "<|call|>"}, "", []string{"<|end|>"}, []string{"<|end|>", "<|start|>"}},
		{"solar-open: <|end|> ends a message", []string{"<|calls|>", "<|flush|>", "<|end|>"}, []int32{C, C, C},
			"", []string{"<|calls|>", "<|flush|>"}, "", []string{"<|end|>"}, []string{"<|end|>"}},
		{"Gemma 4: </s> is text", []string{"<eos>", "<turn|>", "<|tool_response>", "</s>"}, []int32{C, C, C, C},
			"<eos>", []string{"<eos>", "<turn|>", "<|tool_response>"}, "", []string{"</s>"}, []string{"</s>"}},
		{"Kimi K2", []string{"[BOS]", "[EOS]", "[EOT]"}, []int32{C, C, C},
			"", []string{"[EOS]", "[EOT]"}, "[EOT]", []string{"[BOS]"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := bpeVocab("qwen2", nil, tt.extra, tt.types)
			id := func(s string) int {
				i := slices.Index(v.Tokens, s)
				if i < 0 {
					t.Fatalf("no token %q", s)
				}
				return i
			}
			if tt.eos != "" {
				v.EOS = id(tt.eos)
			}
			tok := mustNew(t, v)
			var want []int
			for _, s := range tt.eog {
				want = append(want, id(s))
			}
			slices.Sort(want)
			if got := tok.EOGs(); !slices.Equal(got, want) {
				t.Errorf("EOGs %v, want %v (%q)", got, want, tt.eog)
			}
			for _, s := range tt.notEOG {
				if tok.IsEOG(id(s)) {
					t.Errorf("IsEOG(%q) = true, want false", s)
				}
			}
			if tt.eot != "" && tok.EOT() != id(tt.eot) {
				t.Errorf("EOT %d (%q), want %q", tok.EOT(), tok.Token(tok.EOT()), tt.eot)
			}
			for _, e := range want {
				text := tok.Token(e)
				if tok.Type(e) != TypeControl {
					t.Errorf("%q has type %d, want control", text, tok.Type(e))
				}
				if ids := tok.Encode("a"+text, false, false); slices.Contains(ids, e) {
					t.Errorf("%q typed in text without parseSpecial became the token: %v", text, ids)
				}
				if ids := tok.Encode("a"+text, false, true); !slices.Contains(ids, e) {
					t.Errorf("%q with parseSpecial is not the token: %v", text, ids)
				}
				d := tok.NewDecoder()
				if got := d.Add('a') + d.Add(e) + d.Flush(); got != "a" {
					t.Errorf("a Decoder shows %q for a, %q; want a", got, text)
				}
				if got := tok.Decode([]int{'a', e}); got != "a" {
					t.Errorf("Decode shows %q for a, %q; want a", got, text)
				}
				if tok.Piece(e) != text {
					t.Errorf("Piece(%d) = %q, want %q", e, tok.Piece(e), text)
				}
			}
			for _, s := range tt.rendered {
				if got := tok.Decode([]int{id(s)}); got != s {
					t.Errorf("Decode(%q) = %q, want it shown", s, got)
				}
			}
		})
	}
}

// TestEndOfGenerationFromMetadata: the fill-in-the-middle ids the metadata
// names end generation; an id outside the vocabulary is refused.
func TestEndOfGenerationFromMetadata(t *testing.T) {
	v := bpeVocab("qwen2", nil, []string{"<|endoftext|>", "<fim_x>"}, []int32{TypeControl, TypeControl})
	v.EOS = 256
	v.EOG = []int{257}
	tok := mustNew(t, v)
	if got := tok.EOGs(); !slices.Equal(got, []int{256, 257}) {
		t.Errorf("EOGs %v, want [256 257]", got)
	}
	v.EOG = []int{len(v.Tokens)}
	if _, err := New(v); err == nil {
		t.Error("an end-of-generation id outside the vocabulary was accepted")
	}
}

// TestEndOfGenerationFromGGUF: tokenizer.ggml.fim_*_token_id name
// end-of-generation ids; one outside the vocabulary is ignored.
func TestEndOfGenerationFromGGUF(t *testing.T) {
	tests := []struct {
		name  string
		extra []ggufKV
		want  []int
	}{
		{"none", nil, []int{2}},
		{"fim pad", []ggufKV{{"tokenizer.ggml.fim_pad_token_id", uint32(260)}}, []int{2, 260}},
		{"fim repo and separator", []ggufKV{{"tokenizer.ggml.fim_rep_token_id", uint32(259)}, {"tokenizer.ggml.fim_sep_token_id", uint32(261)}}, []int{2, 259, 261}},
		{"outside the vocabulary", []ggufKV{{"tokenizer.ggml.fim_pad_token_id", uint32(4294967295)}}, []int{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := FromGGUF(parseGGUF(t, append(spmMetadata(), tt.extra...)))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.EOGs(); !slices.Equal(got, tt.want) {
				t.Errorf("EOGs %v, want %v", got, tt.want)
			}
		})
	}
}
