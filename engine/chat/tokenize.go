package chat

import (
	"strings"

	"kvscope/engine/tokenizer"
)

// Encoder is the tokenizer Tokenize needs. *tokenizer.Tokenizer implements
// it.
type Encoder interface {
	// Encode turns text into ids, adding BOS/EOS with addSpecial and
	// turning control-token texts into those tokens with parseSpecial.
	Encode(text string, addSpecial, parseSpecial bool) []int
	// Token returns the vocabulary text of id.
	Token(id int) string
	// Type returns the token type of id (tokenizer.TypeControl ...).
	Type(id int) int
	// BOS returns the beginning-of-sequence id, -1 if none.
	BOS() int
	// AddBOS reports whether the vocabulary asks for BOS first.
	AddBOS() bool
}

// Tokenize turns a prompt into token ids: control-token texts in template
// text become those tokens, message text never does. The text between
// control tokens is encoded as one piece across segment boundaries, so a
// prompt whose messages hold no control-token text gets exactly the ids of
// its whole text encoded with special-token parsing, as llama.cpp encodes a
// rendered template. With addBOS, BOS comes first when the vocabulary asks
// for it (EOS is never added).
func Tokenize(p *Prompt, enc Encoder, addBOS bool) []int {
	var ids []int
	if addBOS && enc.AddBOS() && enc.BOS() >= 0 {
		ids = append(ids, enc.BOS())
	}
	var run strings.Builder // text since the last control token
	flush := func() {
		if run.Len() > 0 {
			ids = append(ids, enc.Encode(run.String(), false, false)...)
			run.Reset()
		}
	}
	for _, s := range p.Segments {
		if !s.Special {
			run.WriteString(s.Text)
			continue
		}
		rest := s.Text
		for _, id := range enc.Encode(s.Text, false, true) {
			if enc.Type(id) != tokenizer.TypeControl {
				continue
			}
			text := enc.Token(id)
			i := strings.Index(rest, text)
			if text == "" || i < 0 {
				continue
			}
			run.WriteString(rest[:i])
			flush()
			ids = append(ids, id)
			rest = rest[i+len(text):]
		}
		run.WriteString(rest)
	}
	flush()
	return ids
}
