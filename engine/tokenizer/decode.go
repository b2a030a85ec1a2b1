package tokenizer

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// render is a token's text as llama.cpp's token_to_piece gives it with
// special tokens shown: SPM ▁ becomes a space, byte tokens become their
// byte, BPE text is mapped back through GPT-2's byte alphabet; control,
// unknown and user-defined tokens are their text; unused and undefined
// tokens are empty.
func (t *Tokenizer) render(id int) string {
	text, a := t.tokens[id], t.attrs[id]
	switch {
	case a&(attrUnknown|attrControl|attrUserDefined) != 0:
		return text
	case a&attrNormal != 0:
		if t.spm {
			return strings.ReplaceAll(text, "▁", " ")
		}
		return decodeByteLevel(text)
	case a&attrByte != 0:
		if len(text) == 6 && strings.HasPrefix(text, "<0x") && text[5] == '>' {
			if b, err := hex.DecodeString(text[3:5]); err == nil {
				return string(b)
			}
		}
		return text
	}
	return ""
}

// decodeByteLevel maps GPT-2 byte-alphabet text back to its bytes. A code
// point outside the alphabet is written as [UNK_BYTE_0x..] with its UTF-8
// bytes in hex, so that nothing is silently lost. (llama.cpp also appends
// the token's whole text to each, which makes a token of n such code points
// cost n² bytes; we leave it out.)
func decodeByteLevel(text string) string {
	const unk = len("[UNK_BYTE_0x]")
	n := 0
	for _, r := range text {
		if _, ok := unicodeToByte[r]; ok {
			n++
		} else {
			n += unk + 2*utf8.RuneLen(r)
		}
	}
	var b strings.Builder
	b.Grow(n)
	var buf [utf8.UTFMax]byte
	var hx [2 * utf8.UTFMax]byte
	for _, r := range text {
		if c, ok := unicodeToByte[r]; ok {
			b.WriteByte(c)
			continue
		}
		b.WriteString("[UNK_BYTE_0x")
		b.Write(hx[:hex.Encode(hx[:], buf[:utf8.EncodeRune(buf[:], r)])])
		b.WriteString("]")
	}
	return b.String()
}

// Piece returns the bytes that token id stands for, with control tokens
// shown as their text ("<s>", "<|im_end|>"). A byte token gives its single
// byte, which alone may not be valid UTF-8. Out-of-range ids give "".
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// text is the piece of id as Decode renders it: control and unknown
// tokens, and ids out of range, give nothing.
func (t *Tokenizer) text(id int) string {
	if id < 0 || id >= len(t.pieces) || t.attrs[id]&(attrControl|attrUnknown) != 0 {
		return ""
	}
	return t.pieces[id]
}

// Decode returns the text of ids: the pieces joined, control and unknown
// tokens left out (llama.cpp's detokenize with special=false). For SPM
// vocabularies with a space prefix, the space that Encode put before the
// text is removed: the first piece loses one leading space, whether or not
// a BOS comes first. The result is the exact bytes, which may be invalid
// UTF-8 if ids end inside a character; Decoder never returns such text.
func (t *Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	strip := t.spm && t.addSpace
	for i, id := range ids {
		if i == 0 && id == t.bos && t.bos >= 0 {
			continue // the space strip moves to the token after BOS
		}
		s := t.text(id)
		if strip {
			s = strings.TrimPrefix(s, " ")
			strip = false
		}
		b.WriteString(s)
	}
	return b.String()
}

// Decoder turns a stream of token ids into text, one id at a time. It
// never returns part of a UTF-8 character: bytes of an unfinished
// character are held until the rest arrives, and bytes that cannot form a
// character become U+FFFD. Make one with NewDecoder for each stream.
type Decoder struct {
	t       *Tokenizer
	pending []byte
	n       int  // ids seen
	strip   bool // strip one leading space from the next piece
}

// NewDecoder returns a Decoder for one stream of ids. If the stream starts
// with BOS, it is the start of a text: with an SPM space prefix, the first
// piece after BOS loses its leading space, as Decode does. A stream that
// does not start with BOS is a continuation (such as generated tokens after
// a prompt) and keeps every space.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Add feeds one id and returns the text that is now complete (maybe "").
func (d *Decoder) Add(id int) string {
	t := d.t
	first := d.n == 0
	d.n++
	if first && id == t.bos && t.bos >= 0 {
		d.strip = t.spm && t.addSpace
		return ""
	}
	s := t.text(id)
	if d.strip {
		s = strings.TrimPrefix(s, " ")
		d.strip = false
	}
	d.pending = append(d.pending, s...)
	return d.take(false)
}

// Flush returns what is held back at the end of the stream, with any
// unfinished character as U+FFFD.
func (d *Decoder) Flush() string { return d.take(true) }

// take returns the pending bytes that form whole characters (all of them
// when final) as valid UTF-8, and keeps the rest.
func (d *Decoder) take(final bool) string {
	p := d.pending
	end := len(p)
	if !final {
		end = completeLen(p)
	}
	if end == 0 {
		return ""
	}
	out := validUTF8(p[:end])
	d.pending = append(d.pending[:0], p[end:]...)
	return out
}

// completeLen returns how many leading bytes of p can be written out now:
// all but a final, still-unfinished UTF-8 sequence.
func completeLen(p []byte) int {
	// An unfinished sequence is at most 3 bytes: a lead byte and fewer
	// continuation bytes than it announces.
	for k := 1; k <= 3 && k <= len(p); k++ {
		b := p[len(p)-k]
		if b&0xC0 == 0x80 {
			continue // continuation byte: look further back
		}
		need := 0
		switch {
		case b&0xE0 == 0xC0:
			need = 2
		case b&0xF0 == 0xE0:
			need = 3
		case b&0xF8 == 0xF0:
			need = 4
		}
		if need > k && !utf8.FullRune(p[len(p)-k:]) {
			return len(p) - k
		}
		return len(p)
	}
	return len(p)
}

// validUTF8 returns p as a string with each byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD.
func validUTF8(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	var b strings.Builder
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n <= 1 {
			b.WriteRune(utf8.RuneError)
			p = p[1:]
			continue
		}
		b.Write(p[:n])
		p = p[n:]
	}
	return b.String()
}
