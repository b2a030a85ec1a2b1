package chat

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
	// Strips reports whether encoding drops the white space before and
	// after the special token id, as phi-3's tokens do after them.
	Strips(id int) (before, after bool)
}

// asciiSpace is the white space a stripping token drops beside it (C's
// isspace, as llama.cpp and package tokenizer strip).
const asciiSpace = " \t\n\v\f\r"

// Tokenize turns a prompt into token ids: control-token texts in template
// text become those tokens, message text never does. The text between
// control tokens is encoded as one piece across segment boundaries, so a
// prompt whose messages hold no control-token text gets exactly the ids of
// its whole text encoded with special-token parsing, as llama.cpp encodes a
// rendered template. With addBOS, BOS comes first when the vocabulary asks
// for it (EOS is never added). A control token that strips the white space
// beside it (phi-3's drop what follows them) takes it from the text, as the
// tokenizer does.
func Tokenize(p *Prompt, enc Encoder, addBOS bool) []int {
	var ids []int
	if addBOS && enc.AddBOS() && enc.BOS() >= 0 {
		ids = append(ids, enc.BOS())
	}
	b := idBuilder{enc: enc, ids: ids}
	for _, s := range p.Segments {
		if s.Special {
			b.special(s.Text)
		} else {
			b.text(s.Text)
		}
	}
	return b.finish()
}
