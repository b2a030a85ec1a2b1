package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Token types, as stored in tokenizer.ggml.token_type.
const (
	TypeUndefined   = 0 // no type: never rendered
	TypeNormal      = 1 // an ordinary piece of text
	TypeUnknown     = 2 // the unknown token, <unk>
	TypeControl     = 3 // a control token such as <s>, </s>, <|im_end|>
	TypeUserDefined = 4 // added text that is always split out first
	TypeUnused      = 5 // a reserved slot
	TypeByte        = 6 // an SPM byte-fallback token, <0xNN>
)

// Model names, as stored in tokenizer.ggml.model.
const (
	ModelSPM = "llama" // SentencePiece-style: score-driven merges, ▁ for spaces
	ModelBPE = "gpt2"  // byte-level BPE: ranked merges, GPT-2 byte alphabet
)

// attribute bits of a token (llama.cpp's llama_token_attr).
const (
	attrUndefined uint16 = 1 << iota
	attrUnknown
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
	attrLStrip // Encode drops the white space before the token
	attrRStrip // Encode drops the white space after the token
)

// Vocab is everything a Tokenizer is built from: the vocabulary and its
// rules, as a GGUF file's tokenizer.ggml.* metadata holds them. FromGGUF
// fills one with llama.cpp's defaults for missing keys; New takes it as is.
type Vocab struct {
	// Model is ModelSPM ("llama") or ModelBPE ("gpt2").
	Model string
	// Pre names the BPE pre-tokenizer (tokenizer.ggml.pre): "default" (or
	// ""), "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder",
	// "starcoder" and the names llama.cpp treats as aliases of these. SPM
	// vocabularies ignore it.
	Pre string
	// Tokens holds each token's text; the index is the token id. BPE tokens
	// are in GPT-2's byte alphabet (a space is "Ġ"); SPM tokens use "▁".
	Tokens []string
	// Scores holds SPM merge scores (higher merges first); nil means all 0.
	Scores []float32
	// Types holds each token's type (TypeNormal ...); nil means all normal.
	Types []int32
	// Merges holds BPE merges, "left right", best first (BPE only).
	Merges []string
	// BOS, EOS, EOT, EOM, UNK and PAD are special token ids, -1 for none.
	// EOT -1 is looked up by text (<|eot_id|>, <|im_end|> ...), as
	// llama.cpp does.
	BOS, EOS, EOT, EOM, UNK, PAD int
	// EOG lists further end-of-generation ids the metadata names (the
	// fill-in-the-middle pad, repo and file-separator tokens); the others
	// are EOS, EOT, EOM and the tokens found by text (see IsEOG).
	EOG []int
	// AddBOS and AddEOS say whether Encode with addSpecial adds BOS / EOS.
	AddBOS, AddEOS bool
	// AddSpacePrefix (SPM) puts a space before text that starts the input
	// or follows a special token.
	AddSpacePrefix bool
	// Name and Arch are the model's general.name and general.architecture,
	// from which llama.cpp sets some tokens to take the white space beside
	// them (see stripRules).
	Name, Arch string
}

// Tokenizer turns text into token ids and back. It is immutable after New
// and safe for concurrent use.
type Tokenizer struct {
	model  string
	spm    bool
	pre    *preTokenizer // BPE only
	tokens []string
	scores []float32
	attrs  []uint16
	index  map[string]int32
	ranks  map[mergeKey]int32 // BPE only

	bos, eos, eot, eom, unk, pad int
	addBOS, addEOS, addSpace     bool

	specials   []int32 // control, user-defined and unknown ids, longest text first
	eog        map[int]bool
	pieces     []string // rendering of each token with special tokens shown
	byteTokens [256]int32
}

type mergeKey struct{ left, right string }

// eotTexts are the texts llama.cpp recognises as end-of-turn tokens when
// the metadata names none, in the order we prefer them.
var eotTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
}

// eogTexts are the texts llama.cpp treats as end of generation.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
	// fill-in-the-middle pad, repo and file-separator tokens
	"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
	"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
}

// New builds a Tokenizer from v. It checks v and returns an error naming
// what is wrong: an unknown model or pre-tokenizer, an empty vocabulary,
// duplicate tokens, arrays shorter than the vocabulary, special ids out of
// range, or AddBOS/AddEOS without a BOS/EOS id.
func New(v *Vocab) (*Tokenizer, error) {
	if v == nil {
		return nil, errors.New("tokenizer: nil vocabulary")
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, errors.New("tokenizer: the vocabulary has no tokens (tokenizer.ggml.tokens)")
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: %d tokens is more than a token id can hold", n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens (tokenizer.ggml.scores)", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens (tokenizer.ggml.token_type)", len(v.Types), n)
	}

	t := &Tokenizer{
		model:    v.Model,
		tokens:   make([]string, n),
		scores:   make([]float32, n),
		attrs:    make([]uint16, n),
		index:    make(map[string]int32, n),
		addBOS:   v.AddBOS,
		addEOS:   v.AddEOS,
		addSpace: v.AddSpacePrefix,
	}
	switch v.Model {
	case ModelSPM:
		t.spm = true
	case ModelBPE:
		pre, err := newPreTokenizer(v.Pre)
		if err != nil {
			return nil, err
		}
		t.pre = pre
	default:
		return nil, fmt.Errorf("tokenizer: tokenizer model %q (tokenizer.ggml.model) is not supported; want %q or %q", v.Model, ModelSPM, ModelBPE)
	}

	for i, text := range v.Tokens {
		if text == "" {
			text = "[EMPTY_" + strconv.Itoa(i) + "]" // as llama.cpp names empty tokens
		}
		if j, dup := t.index[text]; dup {
			return nil, fmt.Errorf("tokenizer: duplicate token %q has ids %d and %d", text, j, i)
		}
		t.index[text] = int32(i)
		t.tokens[i] = text
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		typ := int32(TypeNormal)
		if v.Types != nil {
			typ = v.Types[i]
		}
		t.attrs[i] = attrOfType(typ)
	}

	if !t.spm {
		t.ranks = make(map[mergeKey]int32, len(v.Merges))
		for i, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte.
			k := mergeKey{}
			if sp := strings.IndexByte(m[min(1, len(m)):], ' '); sp >= 0 {
				sp += min(1, len(m))
				k = mergeKey{m[:sp], m[sp+1:]}
			}
			if _, seen := t.ranks[k]; !seen {
				t.ranks[k] = int32(i)
			}
		}
	}

	ids := []struct {
		name string
		src  int
		dst  *int
	}{
		{"BOS", v.BOS, &t.bos}, {"EOS", v.EOS, &t.eos}, {"EOT", v.EOT, &t.eot},
		{"EOM", v.EOM, &t.eom}, {"UNK", v.UNK, &t.unk}, {"PAD", v.PAD, &t.pad},
	}
	for _, id := range ids {
		if id.src < -1 || id.src >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d is outside the vocabulary of %d tokens", id.name, id.src, n)
		}
		*id.dst = id.src
	}
	for _, id := range v.EOG {
		if id < 0 || id >= n {
			return nil, fmt.Errorf("tokenizer: end-of-generation id %d is outside the vocabulary of %d tokens", id, n)
		}
	}
	if t.addBOS && t.bos < 0 {
		return nil, errors.New("tokenizer: add_bos_token is true, but there is no BOS token id")
	}
	if t.addEOS && t.eos < 0 {
		return nil, errors.New("tokenizer: add_eos_token is true, but there is no EOS token id")
	}

	t.findEndOfGeneration(v.EOG)

	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.specials = append(t.specials, int32(id))
		}
	}
	sort.SliceStable(t.specials, func(i, j int) bool {
		return len(t.tokens[t.specials[i]]) > len(t.tokens[t.specials[j]])
	})
	t.stripRules(v)

	for b := range t.byteTokens {
		t.byteTokens[b] = -1
		if id, ok := t.index[fmt.Sprintf("<0x%02X>", b)]; ok {
			t.byteTokens[b] = id
		} else if id, ok := t.index[string([]byte{byte(b)})]; ok {
			t.byteTokens[b] = id
		}
	}

	t.pieces = make([]string, n)
	for id := range t.pieces {
		t.pieces[id] = t.render(id)
	}
	return t, nil
}

func attrOfType(typ int32) uint16 {
	switch typ {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	}
	return attrUndefined
}

// findEndOfGeneration finds the EOT token by text when none is given and
// builds the set of end-of-generation ids, as llama.cpp's vocabulary loader
// does: extra (the metadata's), EOS, EOT, EOM and every token whose text is
// one of eogTexts, whatever its type. Tokens found by text are made control
// tokens, so that they are never matched in text without parseSpecial nor
// shown by Decode.
func (t *Tokenizer) findEndOfGeneration(extra []int) {
	if t.eot < 0 {
		for _, s := range eotTexts {
			if id, ok := t.index[s]; ok {
				t.eot = int(id)
				t.attrs[id] |= attrControl
				break
			}
		}
	}
	t.eog = make(map[int]bool)
	for _, id := range extra {
		t.eog[id] = true
	}
	for _, s := range eogTexts {
		if id, ok := t.index[s]; ok {
			t.eog[int(id)] = true
			t.attrs[id] |= attrControl
		}
	}
	// gpt-oss: these structure tokens are always rendered.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.index[s]; ok {
			t.attrs[id] = attrUserDefined
		}
	}
	for _, id := range []int{t.eos, t.eot, t.eom} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	// gpt-oss and solar-open style vocabularies: <|end|> ends a message,
	// not generation.
	eog := func(s string) bool { id, ok := t.index[s]; return ok && t.eog[int(id)] }
	if end, ok := t.index["<|end|>"]; ok && eog("<|end|>") &&
		(eog("<|return|>") && eog("<|call|>") || (eog("<|call|>") || eog("<|calls|>")) && eog("<|flush|>")) {
		delete(t.eog, int(end))
		t.attrs[end] = attrUserDefined
	}
	// Gemma 4 style vocabularies: </s> is not an end of generation.
	if s, ok := t.index["</s>"]; ok && eog("</s>") && eog("<|tool_response>") {
		delete(t.eog, int(s))
		t.attrs[s] = attrNormal
	}
}

// stripRules sets the tokens that take the white space beside them, as
// llama.cpp's vocabulary loader does by model (the GGUF file does not say):
// for a model whose name holds "phi-3" or "phi3", every special token and
// </s> drop the white space after them, except <unk>, <s> and
// <|endoftext|>; the mask token of Jina v2 and Nomic/Jina BERT models
// (<mask>) and of ModernBERT ([MASK]) drops the white space before it.
func (t *Tokenizer) stripRules(v *Vocab) {
	set := func(text string, bit uint16, on bool) {
		if id, ok := t.index[text]; ok {
			if on {
				t.attrs[id] |= bit
			} else {
				t.attrs[id] &^= bit
			}
		}
	}
	holds := func(s string, subs ...string) bool {
		return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
	}
	name := strings.ToLower(v.Name)
	switch {
	case holds(v.Pre, "jina-v2-de", "jina-v2-es", "jina-v2-code") || holds(v.Arch, "nomic-bert-moe", "jina-bert-v3"):
		set("<mask>", attrLStrip, true)
	case holds(name, "phi-3", "phi3"):
		for _, id := range t.specials {
			t.attrs[id] |= attrRStrip
		}
		set("</s>", attrRStrip, true)
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			set(s, attrRStrip, false)
		}
	case holds(name, "modern-bert"):
		set("[MASK]", attrLStrip, true)
	}
}

// Strips reports whether Encode drops the white space before and after
// the special token id (its lstrip and rstrip attributes, and the per-model
// rules of stripRules); false for other ids.
func (t *Tokenizer) Strips(id int) (before, after bool) {
	if id < 0 || id >= len(t.tokens) {
		return false, false
	}
	a := t.attrs[id]
	return a&attrLStrip != 0, a&attrRStrip != 0
}

// Size returns the number of tokens in the vocabulary.
func (t *Tokenizer) Size() int { return len(t.tokens) }

// Model returns the tokenizer model: ModelSPM or ModelBPE.
func (t *Tokenizer) Model() string { return t.model }

// Pre returns the BPE pre-tokenizer's name ("" for SPM).
func (t *Tokenizer) Pre() string {
	if t.pre == nil {
		return ""
	}
	return t.pre.name
}

// BOS returns the beginning-of-sequence id, -1 if none.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sequence id, -1 if none.
func (t *Tokenizer) EOS() int { return t.eos }

// EOT returns the end-of-turn id, -1 if none.
func (t *Tokenizer) EOT() int { return t.eot }

// UNK returns the unknown token's id, -1 if none.
func (t *Tokenizer) UNK() int { return t.unk }

// PAD returns the padding token's id, -1 if none.
func (t *Tokenizer) PAD() int { return t.pad }

// AddBOS reports whether Encode with addSpecial puts BOS first.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial puts EOS last.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEOG reports whether id ends generation: EOS, EOT, EOM or a token whose
// text llama.cpp treats as such (</s>, <|im_end|>, <|eot_id|> ...).
func (t *Tokenizer) IsEOG(id int) bool { return t.eog[id] }

// EOGs returns the end-of-generation ids in increasing order.
func (t *Tokenizer) EOGs() []int {
	ids := make([]int, 0, len(t.eog))
	for id := range t.eog {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Token returns the vocabulary text of id ("" if id is out of range).
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Type returns the type of id (TypeNormal ...), as adjusted when the
// tokenizer was built (end-of-generation tokens become TypeControl), or
// TypeUndefined if id is out of range.
func (t *Tokenizer) Type(id int) int {
	if id < 0 || id >= len(t.tokens) {
		return TypeUndefined
	}
	a := t.attrs[id]
	switch {
	case a&attrControl != 0:
		return TypeControl
	case a&attrUserDefined != 0:
		return TypeUserDefined
	case a&attrUnknown != 0:
		return TypeUnknown
	case a&attrByte != 0:
		return TypeByte
	case a&attrUnused != 0:
		return TypeUnused
	case a&attrNormal != 0:
		return TypeNormal
	}
	return TypeUndefined
}

// ID returns the id of the token whose vocabulary text is text.
func (t *Tokenizer) ID(text string) (int, bool) {
	id, ok := t.index[text]
	return int(id), ok
}
