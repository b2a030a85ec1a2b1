package tokenizer

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// spmVocab builds a small SentencePiece-style vocabulary: <unk>, <s>, </s>,
// the 256 byte tokens, then the given pieces with their scores.
func spmVocab(pieces []string, scores []float32) *Vocab {
	v := &Vocab{Model: ModelSPM, BOS: 1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1, AddBOS: true, AddSpacePrefix: true}
	v.Tokens = []string{"<unk>", "<s>", "</s>"}
	v.Types = []int32{TypeUnknown, TypeControl, TypeControl}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<0x%02X>", b))
		v.Types = append(v.Types, TypeByte)
	}
	v.Scores = make([]float32, len(v.Tokens))
	for i, p := range pieces {
		v.Tokens = append(v.Tokens, p)
		v.Types = append(v.Types, TypeNormal)
		v.Scores = append(v.Scores, scores[i])
	}
	return v
}

// bpeVocab builds a byte-level BPE vocabulary: the 256 byte characters,
// then one token per merge result, then extra tokens with their types.
func bpeVocab(pre string, merges []string, extra []string, extraTypes []int32) *Vocab {
	v := &Vocab{Model: ModelBPE, Pre: pre, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1, Merges: merges}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, byteToUnicode[b])
		v.Types = append(v.Types, TypeNormal)
	}
	for _, m := range merges {
		v.Tokens = append(v.Tokens, strings.Replace(m, " ", "", 1))
		v.Types = append(v.Types, TypeNormal)
	}
	v.Tokens = append(v.Tokens, extra...)
	v.Types = append(v.Types, extraTypes...)
	return v
}

func mustNew(t *testing.T, v *Vocab) *Tokenizer {
	t.Helper()
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// pieces renders ids as their vocabulary texts, for readable comparisons.
func pieces(tok *Tokenizer, ids []int) string {
	var s []string
	for _, id := range ids {
		s = append(s, tok.Token(id))
	}
	return strings.Join(s, "|")
}

func TestSPMMergesByScore(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		scores []float32
		text   string
		want   string
	}{
		{"right pair scores higher", []string{"a", "b", "c", "ab", "bc"}, []float32{-5, -5, -5, -2, -1}, "abc", "a|bc"},
		{"left pair scores higher", []string{"a", "b", "c", "ab", "bc"}, []float32{-5, -5, -5, -1, -2}, "abc", "ab|c"},
		{"equal scores merge leftmost first", []string{"a", "b", "c", "ab", "bc"}, []float32{-5, -5, -5, -1, -1}, "abc", "ab|c"},
		{"merges chain into a long token", []string{"a", "b", "c", "ab", "abc"}, []float32{-5, -5, -5, -1, -3}, "abc", "abc"},
		{"a token reachable only through a non-token is not formed", []string{"a", "b", "c", "abc"}, []float32{-5, -5, -5, -1}, "abc", "a|b|c"},
		{"space becomes ▁", []string{"▁", "a", "b", "▁a"}, []float32{-5, -5, -5, -1}, "a b", "a|▁|b"},
		{"byte fallback for unknown characters", []string{"a"}, []float32{-1}, "aé", "a|<0xC3>|<0xA9>"},
		{"multi-byte token", []string{"é", "a"}, []float32{-1, -1}, "éa", "é|a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := spmVocab(tc.pieces, tc.scores)
			v.AddSpacePrefix = false
			tok := mustNew(t, v)
			ids := tok.Encode(tc.text, false, false)
			if got := pieces(tok, ids); got != tc.want {
				t.Errorf("Encode(%q) = %s, want %s", tc.text, got, tc.want)
			}
			if got := tok.Decode(ids); got != tc.text {
				t.Errorf("Decode = %q, want %q", got, tc.text)
			}
		})
	}
}

func TestSPMUnknownWithoutByteTokens(t *testing.T) {
	v := &Vocab{Model: ModelSPM, Tokens: []string{"<unk>", "a"}, Types: []int32{TypeUnknown, TypeNormal},
		BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: 0, PAD: -1}
	tok := mustNew(t, v)
	if got := tok.Encode("aé", false, false); fmt.Sprint(got) != "[1 0 0]" {
		t.Errorf("Encode = %v, want [1 0 0] (one <unk> per byte, as byte fallback does)", got)
	}
}

func TestBPEMergesByRank(t *testing.T) {
	tests := []struct {
		name   string
		merges []string
		text   string
		want   string
	}{
		{"lower rank merges first", []string{"e l", "h e"}, "hel", "h|el"},
		{"order of merges decides", []string{"h e", "e l"}, "hel", "he|l"},
		{"merges build up a word", []string{"l l", "h e", "he ll", "hell o"}, "hello", "hello"},
		{"leading space is Ġ", []string{"Ġ h", "Ġh i"}, " hi", "Ġhi"},
		{"no merges leaves bytes", nil, "hi!", "h|i|!"},
		{"multi-byte characters are byte-encoded", []string{"Ã ©"}, "é", "Ã©"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := mustNew(t, bpeVocab("gpt-2", tc.merges, nil, nil))
			ids := tok.Encode(tc.text, false, false)
			if got := pieces(tok, ids); got != tc.want {
				t.Errorf("Encode(%q) = %s, want %s", tc.text, got, tc.want)
			}
			if got := tok.Decode(ids); got != tc.text {
				t.Errorf("Decode = %q, want %q", got, tc.text)
			}
		})
	}
}

// Llama 3's pre-tokenizer takes a word that is a token whole, even when the
// merges would not build it.
func TestBPEIgnoreMerges(t *testing.T) {
	v := bpeVocab("llama-bpe", []string{"a b"}, []string{"abc"}, []int32{TypeNormal})
	v.BOS, v.AddBOS = 0, true
	tok := mustNew(t, v)
	if got := pieces(tok, tok.Encode("abc", false, false)); got != "abc" {
		t.Errorf("llama-bpe Encode(abc) = %s, want abc", got)
	}
	v.Pre, v.AddBOS = "gpt-2", false
	tok = mustNew(t, v)
	if got := pieces(tok, tok.Encode("abc", false, false)); got != "ab|c" {
		t.Errorf("gpt-2 Encode(abc) = %s, want ab|c", got)
	}
}

func TestPreTokenizerSplits(t *testing.T) {
	tests := []struct {
		pre, text string
		want      []string
	}{
		{"gpt-2", "Hello world's  123!!", []string{"Hello", " world", "'s", " ", " 123", "!!"}},
		{"gpt-2", "a  \n b", []string{"a", "  \n", " b"}},
		{"gpt-2", "I'LL", []string{"I", "'", "LL"}},
		{"llama-bpe", "I'LL 12345", []string{"I", "'LL", " ", "123", "45"}},
		{"llama-bpe", "x\n\n  y", []string{"x", "\n\n", " ", " y"}},
		{"llama-bpe", "(a) !?\n", []string{"(a", ")", " !?\n"}},
		{"qwen2", "I'LL 12345", []string{"I", "'LL", " ", "1", "2", "3", "4", "5"}},
		{"qwen2", "日本 語", []string{"日本", " 語"}},
		{"default", "a,b 1234", []string{"a", ",", "b", " ", "123", "4"}},
		{"starcoder", "x12", []string{"x", "1", "2"}},
		{"deepseek-coder", "ab 12,\n", []string{"ab", " ", "1", "2", ",", "\n"}},
		{"deepseek-llm", "Ab, 漢字 7\n", []string{"Ab", ",", " ", "漢字", " ", "7", "\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.pre+"/"+tc.text, func(t *testing.T) {
			p, err := newPreTokenizer(tc.pre)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range p.split(tc.text) {
				got = append(got, decodeByteLevel(w))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Errorf("split(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

func TestSpecialTokens(t *testing.T) {
	v := spmVocab([]string{"▁", "a", "b", "▁a", "▁b", "<", ">", "s", "/"}, []float32{-1, -1, -1, -0.5, -0.5, -1, -1, -1, -1})
	v.Tokens = append(v.Tokens, "<tool>")
	v.Types = append(v.Types, TypeUserDefined)
	v.Scores = append(v.Scores, 0)
	tok := mustNew(t, v)
	tests := []struct {
		name         string
		text         string
		addSpecial   bool
		parseSpecial bool
		want         string
	}{
		{"control token parsed", "a<s>b", false, true, "▁a|<s>|▁b"},
		{"control token kept as text", "a<s>b", false, false, "▁a|<|s|>|b"},
		{"user-defined token always split", "a<tool>b", false, false, "▁a|<tool>|▁b"},
		{"text that is only a special token", "</s>", false, true, "</s>"},
		{"BOS added", "a", true, false, "<s>|▁a"},
		{"empty text with BOS", "", true, false, "<s>"},
		{"empty text without BOS", "", false, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pieces(tok, tok.Encode(tc.text, tc.addSpecial, tc.parseSpecial))
			if got != tc.want {
				t.Errorf("Encode(%q, %v, %v) = %s, want %s", tc.text, tc.addSpecial, tc.parseSpecial, got, tc.want)
			}
		})
	}
	// Control tokens are not rendered by Decode, but Piece shows them.
	ids := tok.Encode("a<s>b", true, true)
	if got := tok.Decode(ids); got != "a b" {
		t.Errorf("Decode(%v) = %q, want %q", ids, got, "a b")
	}
	if got := tok.Piece(tok.BOS()); got != "<s>" {
		t.Errorf("Piece(BOS) = %q, want <s>", got)
	}
}

func TestAddBOSAndEOS(t *testing.T) {
	tests := []struct {
		addBOS, addEOS, addSpecial bool
		want                       string
	}{
		{true, false, true, "<s>|▁a"},
		{true, true, true, "<s>|▁a|</s>"},
		{false, true, true, "▁a|</s>"},
		{false, false, true, "▁a"},
		{true, true, false, "▁a"},
	}
	for _, tc := range tests {
		v := spmVocab([]string{"▁a"}, []float32{-1})
		v.AddBOS, v.AddEOS = tc.addBOS, tc.addEOS
		tok := mustNew(t, v)
		if got := pieces(tok, tok.Encode("a", tc.addSpecial, false)); got != tc.want {
			t.Errorf("AddBOS %v AddEOS %v addSpecial %v: %s, want %s", tc.addBOS, tc.addEOS, tc.addSpecial, got, tc.want)
		}
	}
}

func TestEndOfGeneration(t *testing.T) {
	v := bpeVocab("qwen2", nil, []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
		[]int32{TypeControl, TypeControl, TypeNormal})
	v.EOS = 256 // <|endoftext|>
	tok := mustNew(t, v)
	imEnd, _ := tok.ID("<|im_end|>")
	imStart, _ := tok.ID("<|im_start|>")
	for id, want := range map[int]bool{256: true, imEnd: true, imStart: false, 'a': false} {
		if got := tok.IsEOG(id); got != want {
			t.Errorf("IsEOG(%d %q) = %v, want %v", id, tok.Token(id), got, want)
		}
	}
	// No EOT id was given: it is found by text, <|im_end|> before <|endoftext|>.
	if tok.EOT() != imEnd {
		t.Errorf("EOT = %d, want %d (<|im_end|>)", tok.EOT(), imEnd)
	}
	if tok.Type(imEnd) != TypeControl {
		t.Errorf("<|im_end|> has type %d, want control (%d): llama.cpp makes end-of-generation tokens control", tok.Type(imEnd), TypeControl)
	}
}

// A Decoder fed a character's bytes one token at a time returns nothing
// until the character is whole, and never returns invalid UTF-8.
func TestDecoderHoldsPartialCharacters(t *testing.T) {
	tok := mustNew(t, spmVocab([]string{"▁", "a"}, []float32{-1, -1}))
	tests := []struct {
		name  string
		text  string // encoded with BOS, so spelled in byte tokens
		steps []string
		flush string
	}{
		{"two-byte character", "é", []string{"", "", "é"}, ""},
		{"emoji after ascii", "a😀a", []string{"", "a", "", "", "", "😀", "a"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids := tok.Encode(tc.text, true, false)
			d := tok.NewDecoder()
			var got []string
			for _, id := range ids {
				s := d.Add(id)
				if !utf8.ValidString(s) {
					t.Fatalf("Add(%d) returned invalid UTF-8 %q", id, s)
				}
				got = append(got, s)
			}
			// got[0] is BOS, got[1] the ▁ piece stripped after BOS.
			if fmt.Sprintf("%q", got[1:]) != fmt.Sprintf("%q", tc.steps) {
				t.Errorf("pieces %q, want %q (ids %s)", got[1:], tc.steps, pieces(tok, ids))
			}
			if f := d.Flush(); f != tc.flush {
				t.Errorf("Flush = %q, want %q", f, tc.flush)
			}
		})
	}
}

func TestDecoderInvalidBytes(t *testing.T) {
	tok := mustNew(t, spmVocab(nil, nil))
	b := func(x byte) int { return 3 + int(x) }
	tests := []struct {
		name string
		ids  []int
		want string
	}{
		{"stray continuation byte", []int{b(0x80), b('a')}, "\uFFFDa"},
		{"lead byte then ascii", []int{b(0xE2), b('a')}, "\uFFFDa"},
		{"unfinished at the end", []int{b('a'), b(0xE2), b(0x82)}, "a\uFFFD\uFFFD"},
		{"invalid byte 0xFF", []int{b(0xFF)}, "\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tok.NewDecoder()
			var s strings.Builder
			for _, id := range tc.ids {
				out := d.Add(id)
				if !utf8.ValidString(out) {
					t.Fatalf("invalid UTF-8 %q", out)
				}
				s.WriteString(out)
			}
			s.WriteString(d.Flush())
			if s.String() != tc.want {
				t.Errorf("got %q, want %q", s.String(), tc.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	spm := mustNew(t, spmVocab([]string{"▁", "▁a", "a", "b", "ab", "▁ab"}, []float32{-2, -1, -2, -2, -1.5, -0.5}))
	bpe := mustNew(t, bpeVocab("gpt-2", []string{"Ġ a", "a b", "Ġa b"}, nil, nil))
	inputs := []string{"", "a", " a", "ab ab  ab", "\n\tx y\n", "日本語 😀 ok", "  leading and trailing  ", "a\x00b"}
	for _, tok := range []*Tokenizer{spm, bpe} {
		for _, in := range inputs {
			for _, addSpecial := range []bool{false, true} {
				if got := tok.Decode(tok.Encode(in, addSpecial, false)); got != in {
					t.Errorf("%s: Decode(Encode(%q, %v)) = %q", tok.Model(), in, addSpecial, got)
				}
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	good := func() *Vocab { return spmVocab([]string{"a"}, []float32{0}) }
	tests := []struct {
		name   string
		modify func(v *Vocab) *Vocab
		want   string
	}{
		{"nil", func(*Vocab) *Vocab { return nil }, "nil vocabulary"},
		{"no tokens", func(v *Vocab) *Vocab { v.Tokens = nil; return v }, "no tokens"},
		{"unknown model", func(v *Vocab) *Vocab { v.Model = "bert"; return v }, `"bert"`},
		{"unknown pre", func(v *Vocab) *Vocab { v.Model, v.Pre = ModelBPE, "klingon"; return v }, `"klingon"`},
		{"duplicate token", func(v *Vocab) *Vocab { v.Tokens[len(v.Tokens)-1] = "<s>"; return v }, "duplicate token"},
		{"short scores", func(v *Vocab) *Vocab { v.Scores = v.Scores[:3]; return v }, "scores"},
		{"short types", func(v *Vocab) *Vocab { v.Types = v.Types[:3]; return v }, "token types"},
		{"BOS out of range", func(v *Vocab) *Vocab { v.BOS = 100000; return v }, "BOS id 100000"},
		{"AddBOS without BOS", func(v *Vocab) *Vocab { v.BOS = -1; return v }, "add_bos_token"},
		{"AddEOS without EOS", func(v *Vocab) *Vocab { v.EOS, v.AddEOS = -1, true; return v }, "add_eos_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.modify(good()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// One Tokenizer serves several goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	tok := mustNew(t, bpeVocab("qwen2", []string{"Ġ a", "a b"}, nil, nil))
	text := strings.Repeat("ab  ab\n12 日本 ", 50)
	want := fmt.Sprint(tok.Encode(text, false, false))
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			for range 20 {
				if got := fmt.Sprint(tok.Encode(text, false, false)); got != want {
					errs <- got
					return
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if got := <-errs; got != "" {
			t.Errorf("concurrent Encode gave %s, want %s", got, want)
		}
	}
}

// gpt-oss: <|end|> ends a message, not generation, when <|return|> and
// <|call|> exist; its structure tokens are rendered by Decode.
func TestGPTOSSEndOfGeneration(t *testing.T) {
	v := bpeVocab("gpt-2", nil, []string{"<|return|>", "<|call|>", "<|end|>", "<|channel|>"},
		[]int32{TypeControl, TypeControl, TypeControl, TypeControl})
	tok := mustNew(t, v)
	ret, call, end, channel := 256, 257, 258, 259
	if !tok.IsEOG(ret) || !tok.IsEOG(call) || tok.IsEOG(end) {
		t.Errorf("IsEOG(<|return|>, <|call|>, <|end|>) = %v %v %v, want true true false", tok.IsEOG(ret), tok.IsEOG(call), tok.IsEOG(end))
	}
	if got := tok.Decode([]int{channel, end, ret}); got != "<|channel|><|end|>" {
		t.Errorf("Decode = %q, want <|channel|><|end|> (user-defined tokens render, control tokens do not)", got)
	}
}
