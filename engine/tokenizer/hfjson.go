package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// MaxHFJSONSize is the largest tokenizer.json LoadHFJSON reads. Real files
// are a few MB to about 35 MB (Gemma 3's); a larger file is refused before
// it is read.
const MaxHFJSONSize = 128 << 20

// maxHFTokens bounds the vocabulary a tokenizer.json may describe, so that
// a file naming an absurd id cannot make us allocate for it.
const maxHFTokens = 1 << 24

// LoadHFJSON reads a Hugging Face tokenizer.json at path and builds its
// Tokenizer (see VocabFromHFJSON). A file over MaxHFJSONSize is refused
// before it is read.
func LoadHFJSON(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("tokenizer: %s is not a regular file", path)
	}
	if st.Size() > MaxHFJSONSize {
		return nil, fmt.Errorf("tokenizer: %s is %d MB; a tokenizer.json is at most %d MB", path, st.Size()>>20, MaxHFJSONSize>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxHFJSONSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if len(data) > MaxHFJSONSize {
		return nil, fmt.Errorf("tokenizer: %s grew past %d MB while it was read", path, MaxHFJSONSize>>20)
	}
	tok, err := FromHFJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}

// FromHFJSON builds the Tokenizer described by the contents of a Hugging
// Face tokenizer.json (see VocabFromHFJSON).
func FromHFJSON(data []byte) (*Tokenizer, error) {
	v, err := VocabFromHFJSON(data)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// hfFile is the part of a tokenizer.json that VocabFromHFJSON reads.
type hfFile struct {
	AddedTokens []struct {
		ID      *int    `json:"id"`
		Content *string `json:"content"`
		Special bool    `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer  *hfStep `json:"pre_tokenizer"`
	PostProcessor *struct {
		Type   string `json:"type"`
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		} `json:"single"`
		// RobertaProcessing and BertProcessing name their tokens as
		// [text, id]; they are not read.
	} `json:"post_processor"`
	Decoder *hfStep `json:"decoder"`
	Model   *struct {
		Type         string          `json:"type"`
		Vocab        json.RawMessage `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
		UnkToken     *string         `json:"unk_token"`
		ByteFallback bool            `json:"byte_fallback"`
	} `json:"model"`
}

// hfStep is a decoder or pre-tokenizer: one step, or a Sequence of them.
type hfStep struct {
	Type          string    `json:"type"`
	Decoders      []*hfStep `json:"decoders"`      // Sequence decoder
	Pretokenizers []*hfStep `json:"pretokenizers"` // Sequence pre-tokenizer
	Pattern       *struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"` // Replace, Split
	Content        *string `json:"content"` // Replace, Strip
	Start          int     `json:"start"`   // Strip
	Replacement    string  `json:"replacement"`
	AddPrefixSpace *bool   `json:"add_prefix_space"` // Metaspace (old), ByteLevel
	PrependScheme  string  `json:"prepend_scheme"`   // Metaspace (new)
	UseRegex       *bool   `json:"use_regex"`        // ByteLevel
}

// steps returns s's steps, a Sequence's in order.
func (s *hfStep) steps() []*hfStep {
	if s == nil {
		return nil
	}
	if s.Type == "Sequence" {
		var out []*hfStep
		for _, x := range append(append([]*hfStep(nil), s.Decoders...), s.Pretokenizers...) {
			out = append(out, x.steps()...)
		}
		return out
	}
	return []*hfStep{s}
}

// VocabFromHFJSON reads a Vocab from the contents of a Hugging Face
// tokenizer.json whose model is BPE. Two families are understood, told
// apart by the decoder:
//
//   - ByteLevel (GPT-2, Llama 3, Qwen): tokens in GPT-2's byte alphabet;
//     the Vocab is ModelBPE, with the pre-tokenizer llama.cpp uses for the
//     file's split pattern (GPT-2's, Llama 3's or Qwen 2's; "default" for
//     others).
//   - Metaspace, or a Sequence of Replace "▁" → " ", ByteFallback, Fuse and
//     Strip (Llama 2, Mistral, TinyLlama, Gemma): tokens with "▁" for
//     spaces and <0xNN> byte tokens; the Vocab is ModelSPM, its space
//     prefix on where the decoder strips one leading space, and each
//     token scored by the rank of the first merge that makes it (earlier
//     merges score higher).
//
// Added tokens become control tokens when marked special, user-defined
// tokens otherwise; model.unk_token is the unknown token. BOS is the first
// special token of a TemplateProcessing post-processor's "single" template
// (and then AddBOS is set), else the token <s>, <|begin_of_text|> or <bos>
// where present; EOS is </s>, <|endoftext|>, <|end_of_text|> or <eos>.
//
// Decode of the result works as for the GGUF that llama.cpp converts from
// the same file: control tokens are left out (as Hugging Face's decode with
// skip_special_tokens leaves out special tokens), byte tokens become their
// bytes, and a Metaspace file's first piece loses the space its encoder
// put in front. Encode reuses the GGUF tokenizers' code: for ByteLevel
// files with one of the three recognised split patterns it is the
// tokenization llama.cpp gives the converted model (the tests check GPT-2's
// against llama.cpp's ids); for Metaspace files it merges by those derived
// scores, which follows the file's merge order but is not checked against
// Hugging Face's output, and the normalizer is not read.
func VocabFromHFJSON(data []byte) (*Vocab, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: not a tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, errors.New("tokenizer: the tokenizer.json has no model")
	}
	if f.Model.Type != "BPE" && !(f.Model.Type == "" && len(f.Model.Merges) > 0) {
		return nil, fmt.Errorf("tokenizer: tokenizer.json model type %q is not supported; want \"BPE\"", f.Model.Type)
	}

	// The family, from the decoder (or a ByteLevel pre-tokenizer when the
	// file has no decoder).
	byteLevel, meta, addSpace := false, false, false
	for _, s := range f.Decoder.steps() {
		switch s.Type {
		case "ByteLevel":
			byteLevel = true
		case "Metaspace":
			if s.Replacement != "" && s.Replacement != "▁" {
				return nil, fmt.Errorf("tokenizer: Metaspace decoder with replacement %q is not supported; want \"▁\"", s.Replacement)
			}
			meta = true
			switch {
			case s.PrependScheme != "":
				addSpace = s.PrependScheme != "never"
			case s.AddPrefixSpace != nil:
				addSpace = *s.AddPrefixSpace
			default:
				addSpace = true
			}
		case "Replace":
			if s.Pattern == nil || s.Pattern.String == nil || s.Content == nil {
				return nil, errors.New("tokenizer: a Replace decoder needs a string pattern and a content")
			}
			if *s.Pattern.String != "▁" || *s.Content != " " {
				return nil, fmt.Errorf("tokenizer: Replace decoder %q → %q is not supported; want \"▁\" → \" \"", *s.Pattern.String, *s.Content)
			}
			meta = true
		case "Strip":
			if s.Content != nil && *s.Content == " " && s.Start > 0 {
				addSpace = true
			}
		case "ByteFallback", "Fuse":
		default:
			return nil, fmt.Errorf("tokenizer: tokenizer.json decoder %q is not supported; want ByteLevel, Metaspace or Replace, ByteFallback, Fuse and Strip", s.Type)
		}
	}
	if f.Decoder == nil {
		for _, s := range f.PreTokenizer.steps() {
			byteLevel = byteLevel || s.Type == "ByteLevel"
		}
	}
	switch {
	case byteLevel && meta:
		return nil, errors.New("tokenizer: the tokenizer.json decoder mixes ByteLevel and Metaspace")
	case !byteLevel && !meta:
		return nil, errors.New("tokenizer: the tokenizer.json has no ByteLevel or Metaspace decoder, so its tokens' text is unknown")
	}

	// The vocabulary: model.vocab and added_tokens, by id.
	var vocab map[string]int64
	if len(f.Model.Vocab) == 0 || string(f.Model.Vocab) == "null" {
		return nil, errors.New("tokenizer: the tokenizer.json model has no vocab")
	}
	if err := json.Unmarshal(f.Model.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json model.vocab is not a map of token to id: %w", err)
	}
	entries := len(vocab) + len(f.AddedTokens)
	limit := int64(min(maxHFTokens, 2*entries+256))
	texts := map[int64]string{}
	put := func(id int64, text, where string) error {
		if id < 0 || id >= limit {
			return fmt.Errorf("tokenizer: %s %q has id %d, outside 0..%d for %d tokens", where, text, id, limit-1, entries)
		}
		if old, ok := texts[id]; ok && old != text {
			return fmt.Errorf("tokenizer: id %d is both %q and %q", id, old, text)
		}
		texts[id] = text
		return nil
	}
	// Map order is random: go through the vocab in id order, so that an
	// error names the same token each time.
	keys := make([]string, 0, len(vocab))
	for k := range vocab {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return vocab[keys[i]] < vocab[keys[j]] || vocab[keys[i]] == vocab[keys[j]] && keys[i] < keys[j]
	})
	for _, k := range keys {
		if err := put(vocab[k], k, "token"); err != nil {
			return nil, err
		}
	}
	special := map[int64]bool{}
	added := map[int64]bool{}
	for i, a := range f.AddedTokens {
		if a.ID == nil || a.Content == nil {
			return nil, fmt.Errorf("tokenizer: added_tokens[%d] has no id or no content", i)
		}
		if err := put(int64(*a.ID), *a.Content, "added token"); err != nil {
			return nil, err
		}
		added[int64(*a.ID)] = true
		special[int64(*a.ID)] = a.Special
	}
	n := int64(0)
	for id := range texts {
		n = max(n, id+1)
	}
	if n == 0 {
		return nil, errors.New("tokenizer: the tokenizer.json has no tokens")
	}

	v := &Vocab{Tokens: make([]string, n), Types: make([]int32, n), BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1}
	index := make(map[string]int, n)
	for id := range n {
		text, ok := texts[id]
		switch {
		case !ok:
			// A hole in the ids: a slot no text names.
			v.Tokens[id], v.Types[id] = fmt.Sprintf("[HOLE_%d]", id), TypeUnused
			continue
		case added[id] && special[id]:
			v.Types[id] = TypeControl
		case added[id]:
			v.Types[id] = TypeUserDefined
		case meta && f.Model.ByteFallback && isByteToken(text):
			v.Types[id] = TypeByte
		default:
			v.Types[id] = TypeNormal
		}
		v.Tokens[id] = text
		index[text] = int(id)
	}
	if u := f.Model.UnkToken; u != nil {
		if id, ok := index[*u]; ok {
			v.UNK = id
			v.Types[id] = TypeUnknown
		}
	}

	merges, err := hfMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	if byteLevel {
		v.Model = ModelBPE
		v.Merges = merges
		v.Pre = hfPre(f.PreTokenizer)
	} else {
		v.Model = ModelSPM
		v.AddSpacePrefix = addSpace
		// SPM merges the pair whose token scores highest: score each token
		// by the rank of the first merge that makes it, so that the merge
		// order is the file's.
		v.Scores = make([]float32, n)
		for i := range v.Scores {
			v.Scores[i] = -float32(len(merges) + i + 1)
		}
		for r, m := range merges {
			if id, ok := index[strings.Replace(m, " ", "", 1)]; ok && v.Scores[id] < -float32(r) {
				v.Scores[id] = -float32(r)
			}
		}
	}

	if pp := f.PostProcessor; pp != nil && pp.Type == "TemplateProcessing" {
		for _, piece := range pp.Single {
			if piece.SpecialToken == nil {
				break // the text comes first: no BOS
			}
			if id, ok := index[piece.SpecialToken.ID]; ok {
				v.BOS, v.AddBOS = id, true
			}
			break
		}
	}
	firstOf := func(texts ...string) int {
		for _, s := range texts {
			if id, ok := index[s]; ok {
				return id
			}
		}
		return -1
	}
	if v.BOS < 0 {
		v.BOS = firstOf("<s>", "<|begin_of_text|>", "<bos>")
	}
	v.EOS = firstOf("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>")
	return v, nil
}

// isByteToken reports whether text is a byte-fallback token, <0xNN>.
func isByteToken(text string) bool {
	const hexd = "0123456789ABCDEFabcdef"
	return len(text) == 6 && strings.HasPrefix(text, "<0x") && text[5] == '>' &&
		strings.IndexByte(hexd, text[3]) >= 0 && strings.IndexByte(hexd, text[4]) >= 0
}

// hfMerges reads model.merges, as "left right" strings or [left, right]
// pairs, into "left right" strings.
func hfMerges(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, errors.New("tokenizer: tokenizer.json model.merges is neither a list of \"a b\" strings nor of [a, b] pairs")
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("tokenizer: tokenizer.json merge %d has %d parts, want 2", i, len(p))
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// The split patterns of Hugging Face files whose pre-tokenizers llama.cpp
// has: Llama 3's (\p{N}{1,3}) and Qwen 2's (\p{N}), as the files spell them.
var (
	hfLlama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfQwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// hfPre names the llama.cpp pre-tokenizer of a ByteLevel file's
// pre_tokenizer: "gpt-2" for ByteLevel with its own (GPT-2) regex,
// "llama-bpe" or "qwen2" for a Split with their pattern, "default" else.
func hfPre(p *hfStep) string {
	pre := "default"
	for _, s := range p.steps() {
		switch {
		case s.Type == "ByteLevel" && (s.UseRegex == nil || *s.UseRegex):
			pre = "gpt-2"
		case s.Type == "Split" && s.Pattern != nil && s.Pattern.Regex != nil:
			switch *s.Pattern.Regex {
			case hfLlama3Pattern:
				return "llama-bpe"
			case hfQwen2Pattern:
				return "qwen2"
			}
		}
	}
	return pre
}
