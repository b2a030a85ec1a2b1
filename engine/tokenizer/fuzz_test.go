package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Any input encodes without panicking, a Decoder turns the ids into valid
// UTF-8, and Decode gives valid UTF-8 input back. (Invalid input need not
// come back: BPE reads it as U+FFFD, and SPM, like llama.cpp, can cut an
// escaped space's bytes apart into byte tokens that decode as "▁".)
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", "hello world", " \n\t ", "a<s>b</s>", "日本語 😀", "\xff\xfe", "\xe2\x82", "I'LL 123456", "ab  ab\r\n"} {
		f.Add(s)
	}
	spm := spmVocab([]string{"▁", "a", "b", "▁a", "ab", "<", ">"}, []float32{-2, -2, -2, -1, -1, -3, -3})
	bpes := []*Vocab{}
	for _, pre := range []string{"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "starcoder"} {
		v := bpeVocab(pre, []string{"Ġ a", "a b", "Ġa b"}, []string{"<|endoftext|>"}, []int32{TypeControl})
		v.EOS = len(v.Tokens) - 1
		if pre == "llama-bpe" {
			v.BOS, v.AddBOS = v.EOS, true
		}
		bpes = append(bpes, v)
	}
	var toks []*Tokenizer
	for _, v := range append([]*Vocab{spm}, bpes...) {
		tok, err := New(v)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			for _, parse := range []bool{false, true} {
				ids := tok.Encode(s, true, parse)
				d := tok.NewDecoder()
				var b strings.Builder
				for _, id := range ids {
					b.WriteString(d.Add(id))
				}
				b.WriteString(d.Flush())
				if !utf8.ValidString(b.String()) {
					t.Fatalf("%s %s: Decoder gave invalid UTF-8 %q", tok.Model(), tok.Pre(), b.String())
				}
				if parse {
					continue // control tokens parsed from the text are not rendered
				}
				if !utf8.ValidString(s) {
					continue
				}
				if got := tok.Decode(ids); got != s {
					t.Fatalf("%s %s: Decode(Encode(%q)) = %q", tok.Model(), tok.Pre(), s, got)
				}
			}
		}
	})
}
