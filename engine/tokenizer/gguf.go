package tokenizer

import (
	"fmt"
	"math"
)

// Metadata is the GGUF metadata access FromGGUF needs. *gguf.File (package
// kvscope/engine/gguf) implements it. Each method returns a key's value and
// whether the key exists with that type.
type Metadata interface {
	Get(key string) (any, bool)
	String(key string) (string, bool)
	Uint(key string) (uint64, bool)
	Bool(key string) (bool, bool)
	Strings(key string) ([]string, bool)
	Float32s(key string) ([]float32, bool)
	Int32s(key string) ([]int32, bool)
}

// GGUF metadata keys read by VocabFromGGUF.
const (
	keyModel       = "tokenizer.ggml.model"
	keyPre         = "tokenizer.ggml.pre"
	keyTokens      = "tokenizer.ggml.tokens"
	keyScores      = "tokenizer.ggml.scores"
	keyTypes       = "tokenizer.ggml.token_type"
	keyMerges      = "tokenizer.ggml.merges"
	keyBOS         = "tokenizer.ggml.bos_token_id"
	keyEOS         = "tokenizer.ggml.eos_token_id"
	keyEOT         = "tokenizer.ggml.eot_token_id"
	keyEOM         = "tokenizer.ggml.eom_token_id"
	keyUNK         = "tokenizer.ggml.unknown_token_id"
	keyPAD         = "tokenizer.ggml.padding_token_id"
	keyAddBOS      = "tokenizer.ggml.add_bos_token"
	keyAddEOS      = "tokenizer.ggml.add_eos_token"
	keySpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyFIMPad      = "tokenizer.ggml.fim_pad_token_id"
	keyFIMRep      = "tokenizer.ggml.fim_rep_token_id"
	keyFIMSep      = "tokenizer.ggml.fim_sep_token_id"
)

// FromGGUF builds the Tokenizer described by a GGUF file's tokenizer.ggml.*
// metadata (see VocabFromGGUF).
func FromGGUF(f Metadata) (*Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// VocabFromGGUF reads a Vocab from GGUF metadata with llama.cpp's defaults
// for missing keys: SPM vocabularies default to BOS 1, EOS 2, UNK 0, adding
// BOS and a space prefix; BPE vocabularies default to BOS = EOS = 11 (as
// llama.cpp does), no space prefix, and add BOS only for Llama 3's
// pre-tokenizer. An id in the metadata that is outside the vocabulary is
// ignored, as llama.cpp ignores it (files often store -1 as 4294967295).
func VocabFromGGUF(f Metadata) (*Vocab, error) {
	if f == nil {
		return nil, fmt.Errorf("tokenizer: no GGUF metadata")
	}
	model, ok := f.String(keyModel)
	if !ok {
		return nil, missingOrWrong(f, keyModel, "a string")
	}
	pre := ""
	if _, has := f.Get(keyPre); has {
		if pre, ok = f.String(keyPre); !ok {
			return nil, missingOrWrong(f, keyPre, "a string")
		}
	}
	tokens, ok := f.Strings(keyTokens)
	if !ok {
		return nil, missingOrWrong(f, keyTokens, "an array of strings")
	}
	n := len(tokens)
	v := &Vocab{Model: model, Pre: pre, Tokens: tokens, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1}

	if _, has := f.Get(keyScores); has {
		if s, ok := f.Float32s(keyScores); ok {
			v.Scores = s
		} else if s, ok := f.Int32s(keyScores); ok {
			v.Scores = make([]float32, len(s))
			for i, x := range s {
				v.Scores[i] = float32(x)
			}
		} else {
			return nil, missingOrWrong(f, keyScores, "an array of numbers")
		}
	}
	if _, has := f.Get(keyTypes); has {
		if v.Types, ok = f.Int32s(keyTypes); !ok {
			return nil, missingOrWrong(f, keyTypes, "an array of integers")
		}
	}

	v.Name, _ = f.String("general.name")
	v.Arch, _ = f.String("general.architecture")

	switch model {
	case ModelSPM:
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case ModelBPE:
		if v.Merges, ok = f.Strings(keyMerges); !ok {
			return nil, missingOrWrong(f, keyMerges, "an array of strings")
		}
		v.BOS, v.EOS = 11, 11
		p, err := newPreTokenizer(pre)
		if err != nil {
			return nil, err
		}
		v.AddBOS = p.addBOS
	default:
		return nil, fmt.Errorf("tokenizer: tokenizer model %q (%s) is not supported; want %q or %q", model, keyModel, ModelSPM, ModelBPE)
	}

	for _, id := range []struct {
		key string
		dst *int
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyEOT, &v.EOT}, {keyEOM, &v.EOM}, {keyUNK, &v.UNK}, {keyPAD, &v.PAD}} {
		if *id.dst >= n {
			*id.dst = -1 // a default outside this vocabulary
		}
		if u, ok := f.Uint(id.key); ok && u < uint64(n) && u <= math.MaxInt32 {
			*id.dst = int(u)
		}
	}
	for _, key := range []string{keyFIMPad, keyFIMRep, keyFIMSep} {
		if u, ok := f.Uint(key); ok && u < uint64(n) && u <= math.MaxInt32 {
			v.EOG = append(v.EOG, int(u))
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}, {keySpacePrefix, &v.AddSpacePrefix}} {
		if _, has := f.Get(b.key); has {
			x, ok := f.Bool(b.key)
			if !ok {
				return nil, missingOrWrong(f, b.key, "a bool")
			}
			*b.dst = x
		}
	}
	return v, nil
}

func missingOrWrong(f Metadata, key, want string) error {
	v, has := f.Get(key)
	if !has {
		return fmt.Errorf("tokenizer: the model has no %s metadata", key)
	}
	return fmt.Errorf("tokenizer: metadata %s is %T, want %s", key, v, want)
}
