package synth

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Token types of tokenizer.ggml.token_type (as package tokenizer numbers
// them).
const (
	typeNormal  = 1
	typeUnknown = 2
	typeControl = 3
	typeByte    = 6
)

// The special token ids.
const (
	unkID = 0
	bosID = 1
	eosID = 2
)

// minVocab is the smallest vocabulary: <unk>, <s>, </s> and the 256 byte
// tokens.
const minVocab = 3 + 256

// space is SentencePiece's word-boundary mark.
const space = "▁"

// chars are the single-character pieces: every text is split into these (or
// into byte tokens) before pieces are merged.
const chars = space + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?;:'\"-()[]/&%$#@*+=<>_"

// capitalized is how many of the most common words also get a capitalized
// whole-word piece ("▁The").
const capitalized = 100

// suffixes make derived words ("▁waters", "▁played") for vocabularies larger
// than the word list's pieces.
var suffixes = []string{"s", "ed", "ing", "er", "ly", "est", "ness", "ful"}

// Consonants and vowels of the made-up words that fill the rest of a large
// vocabulary ("▁kalo", "▁tesimu").
const (
	consonants = "bdfgklmnprstvz"
	vowels     = "aeiou"
)

// vocab is an SPM or BPE vocabulary as tokenizer.ggml.* metadata holds it.
type vocab struct {
	tokens []string
	scores []float32
	types  []int32
	merges []string // BPE only
}

// bpeSpecials is the number of control tokens that end a BPE vocabulary,
// as Llama 3's 256 do: <|begin_of_text|> (BOS), <|end_of_text|> (EOS), then
// reserved ones.
const bpeSpecials = 256

// minBPEVocab is the smallest BPE vocabulary: the 256 byte tokens, the
// control tokens and one more.
const minBPEVocab = 256 + bpeSpecials + 1

// byteChars is GPT-2's byte-level alphabet: the character that stands for
// each byte in a byte-level BPE vocabulary. Printable Latin-1 bytes stand
// for themselves; the others (controls, space, 127–160, 173) for U+0100 on,
// in byte order, so that a space is Ġ.
var byteChars = func() [256]string {
	var c [256]string
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			c[b] = string(rune(b))
		} else {
			c[b] = string(rune(256 + n))
			n++
		}
	}
	return c
}()

// buildBPEVocab returns a GPT-2 style byte-level BPE vocabulary of exactly
// n tokens (n >= minBPEVocab), the same for the same n: the 256 byte
// tokens, then the word pieces of buildVocab with their prefixes (Ġt, Ġth,
// Ġthe), each made by a merge of the one before and a letter, in
// word-frequency order, then made-up words without merges (which fill the
// size; the tokenizer reaches none of them), then bpeSpecials control
// tokens. So a text's words become whole-word tokens where the vocabulary
// has them, and bytes for anything else.
func buildBPEVocab(n int) vocab {
	v := vocab{tokens: make([]string, 0, n), types: make([]int32, 0, n)}
	seen := make(map[string]bool, n)
	words := n - bpeSpecials
	for b := range 256 {
		v.add(seen, words, byteChars[b], typeNormal, 0)
	}
	sp := byteChars[' ']
	piece := func(w string) {
		for k := 1; k <= len(w); k++ {
			if len(v.tokens) < words && !seen[sp+w[:k]] {
				v.merges = append(v.merges, sp+w[:k-1]+" "+w[k-1:k])
			}
			v.add(seen, words, sp+w[:k], typeNormal, 0)
		}
	}
	list := strings.Fields(commonWords)
	for _, w := range list {
		piece(w)
	}
	for _, w := range list[:capitalized] {
		piece(strings.ToUpper(w[:1]) + w[1:])
	}
	var syllables []string
	for _, c := range consonants {
		for _, vw := range vowels {
			syllables = append(syllables, string(c)+string(vw))
		}
	}
	// Made-up words of 3, 4, ... syllables (no common word is one), until
	// full.
	for length := 3; len(v.tokens) < words; length++ {
		idx := make([]int, length)
		for len(v.tokens) < words {
			var b strings.Builder
			b.WriteString(sp)
			for _, i := range idx {
				b.WriteString(syllables[i])
			}
			v.add(seen, words, b.String(), typeNormal, 0)
			j := length - 1
			for j >= 0 && idx[j] == len(syllables)-1 {
				idx[j] = 0
				j--
			}
			if j < 0 {
				break
			}
			idx[j]++
		}
	}
	specials := []string{"<|begin_of_text|>", "<|end_of_text|>"}
	for i := len(specials); i < bpeSpecials; i++ {
		specials = append(specials, fmt.Sprintf("<|reserved_special_token_%d|>", i-2))
	}
	for _, t := range specials {
		v.add(seen, n, t, typeControl, 0)
	}
	return v
}

// add appends a token unless the vocabulary is full or already holds it.
func (v *vocab) add(seen map[string]bool, n int, text string, typ int32, score float32) {
	if len(v.tokens) >= n || seen[text] {
		return
	}
	seen[text] = true
	v.tokens = append(v.tokens, text)
	v.types = append(v.types, typ)
	v.scores = append(v.scores, score)
}

// buildVocab returns a vocabulary of exactly n tokens (n > minVocab), the
// same for the same n, laid out as Llama's SPM vocabularies are: <unk>,
// <s>, </s>, the byte tokens <0x00>..<0xFF>, single characters, then
// multi-character pieces.
//
// Every multi-character piece starts with ▁, and the word pieces come with
// all their prefixes (▁t, ▁th, ▁the), added in word-frequency order. So the
// only merge the SPM tokenizer can make extends a word's leading piece by
// one character: a text's words become whole-word pieces where the
// vocabulary has them, the longest known prefix and single characters where
// it does not, and byte tokens for anything else. The pieces after the word
// list (derived and made-up words) complete a large vocabulary so that
// decoded output looks like words; the tokenizer reaches few of them.
// Normal pieces score -index, as SentencePiece's BPE vocabularies do.
func buildVocab(n int) vocab {
	v := vocab{tokens: make([]string, 0, n), scores: make([]float32, 0, n), types: make([]int32, 0, n)}
	seen := make(map[string]bool, n)
	v.add(seen, n, "<unk>", typeUnknown, 0)
	v.add(seen, n, "<s>", typeControl, 0)
	v.add(seen, n, "</s>", typeControl, 0)
	for b := range 256 {
		v.add(seen, n, fmt.Sprintf("<0x%02X>", b), typeByte, 0)
	}
	normal := func(text string) { v.add(seen, n, text, typeNormal, -float32(len(v.tokens)-minVocab)) }
	for _, c := range chars {
		normal(string(c))
	}
	words := strings.Fields(commonWords)
	withPrefixes := func(w string) {
		for k := 1; k <= len(w); k++ {
			normal(space + w[:k])
		}
	}
	for _, w := range words {
		withPrefixes(w)
	}
	for _, w := range words[:capitalized] {
		r, size := utf8.DecodeRuneInString(w)
		withPrefixes(string(unicode.ToUpper(r)) + w[size:])
	}
	for _, suf := range suffixes {
		for _, w := range words {
			normal(space + w + suf)
		}
	}
	// Made-up words of 2, 3, ... consonant-vowel syllables, until full.
	var syllables []string
	for _, c := range consonants {
		for _, vw := range vowels {
			syllables = append(syllables, string(c)+string(vw))
		}
	}
	for length := 2; len(v.tokens) < n; length++ {
		idx := make([]int, length)
		for len(v.tokens) < n {
			var b strings.Builder
			b.WriteString(space)
			for _, i := range idx {
				b.WriteString(syllables[i])
			}
			normal(b.String())
			// Next combination, last syllable fastest.
			j := length - 1
			for j >= 0 && idx[j] == len(syllables)-1 {
				idx[j] = 0
				j--
			}
			if j < 0 {
				break
			}
			idx[j]++
		}
	}
	return v
}
