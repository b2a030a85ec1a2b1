package chat

import (
	"fmt"
	"strings"

	"kvscope/engine/tokenizer"
)

// Turn is one message of a conversation; IDs, for an assistant reply the
// model generated, are its generated token ids (nil: tokenize Content).
type Turn struct {
	// Role is "system", "user" or "assistant" (templates may know others).
	Role string
	// Content is the turn's text: for a reply, its ids decoded.
	Content string
	// IDs, when not nil, stand for Content's tokens in PromptIDs: the ids
	// the model generated for the reply, without the end-of-generation
	// token that ended it.
	IDs []int
}

// continuer is an Encoder that can encode text continuing earlier tokens,
// with no SPM space prefix at its start. *tokenizer.Tokenizer implements
// it.
type continuer interface {
	EncodeContinuation(text string, parseSpecial bool) []int
}

// PromptIDs renders turns with the template and returns the prompt's token
// ids, with each assistant turn's IDs in place of its content's tokens, so
// that the next turn's prompt starts with exactly the ids the cache already
// holds.
//
// Re-tokenizing a reply's text can split it differently from the ids the
// model generated, and then the prefix cache stops matching at that reply;
// llama.cpp's server, with cache_prompt, keeps the ids for that reason.
// Text is tokenized as Tokenize does (control tokens from template text
// only; the text between two control tokens as one piece) except that a
// turn's IDs end the piece before them, and the text after them is encoded
// as a continuation (with no SPM space prefix). The IDs are used where the
// rendering holds the turn's whole content (between its leading and
// trailing white space; white space the template trims off a reply's edges
// comes back with its IDs, as the model wrote them): where the template
// cut or changed the content, that text is tokenized instead, and where
// message text could not be told apart at all (Prompt.Tracked false), the
// whole prompt is tokenized as Tokenize does and no IDs are used. Where the
// template drops the system role, a user turn merged with system text
// loses its IDs (a reply never is merged).
//
// Plain completion (ModeCompletion, a model with no chat format) makes the
// prompt the app's plain conversation text: the system turns' trimmed
// contents (joined by newlines) and a blank line, then the other turns'
// contents in order, each user turn after the first on a new line and each
// reply continuing the text before it. All of it is message text (control
// tokens stay text; user-defined tokens are still found), and
// opt.AddGenerationPrompt has nothing to add. With addBOS, BOS comes first
// when the vocabulary asks for it.
func (f *Formatter) PromptIDs(turns []Turn, opt Options, enc Encoder, addBOS bool) ([]int, error) {
	msgs := make([]Message, len(turns))
	for i, t := range turns {
		msgs[i] = Message{Role: t.Role, Content: t.Content}
	}
	if len(msgs) > maxMessages {
		return nil, fmt.Errorf("%d messages: at most %d can be rendered", len(msgs), maxMessages)
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("message %d has no role", i)
		}
	}
	b := idBuilder{enc: enc}
	if addBOS && enc.AddBOS() && enc.BOS() >= 0 {
		b.ids = append(b.ids, enc.BOS())
	}
	if f.mode == ModeCompletion {
		plainIDs(&b, turns)
		return b.finish(), nil
	}
	ps, tracked, origin, err := f.pieces(msgs, opt)
	if err != nil {
		return nil, err
	}
	if !tracked {
		return Tokenize(&Prompt{Segments: join(ps), Tracked: false}, enc, addBOS), nil
	}
	for _, p := range ps {
		switch {
		case p.Special:
			b.special(p.Text)
		case p.whole && origin[p.msg] >= 0 && turns[origin[p.msg]].IDs != nil:
			t := turns[origin[p.msg]]
			lead, _, trail := core(t.Content)
			b.reply(t.IDs, lead, trail)
		default:
			b.text(p.Text)
		}
	}
	return b.finish(), nil
}

// plainIDs adds the plain-completion prompt of turns to b (see PromptIDs).
func plainIDs(b *idBuilder, turns []Turn) {
	var system []string
	for _, t := range turns {
		if t.Role == "system" {
			if s := strings.TrimSpace(t.Content); s != "" {
				system = append(system, s)
			}
		}
	}
	if len(system) > 0 {
		b.text(strings.Join(system, "\n") + "\n\n")
	}
	i := 0
	for _, t := range turns {
		if t.Role == "system" {
			continue
		}
		if t.Role == "user" && i > 0 {
			b.text("\n")
		}
		i++
		if t.IDs != nil {
			b.add(t.IDs)
		} else {
			b.text(t.Content)
		}
	}
}

// idBuilder collects a prompt's ids: text runs between control tokens
// and given ids.
type idBuilder struct {
	enc   Encoder
	ids   []int
	run   []byte // text since the last control token or given ids
	after bool   // the run continues given ids
	skip  string // white space the given ids already hold, to drop from the next text
}

// text adds message text (no control tokens found in it).
func (b *idBuilder) text(s string) { b.run = append(b.run, b.skipped(s)...) }

// skipped is s without the white space at its start that the last ids
// hold.
func (b *idBuilder) skipped(s string) string {
	if b.skip != "" {
		s = strings.TrimPrefix(s, b.skip)
		b.skip = ""
	}
	return s
}

// special adds template text: its control tokens end the run.
func (b *idBuilder) special(s string) {
	s = b.skipped(s)
	rest := s
	for _, id := range b.enc.Encode(s, false, true) {
		if b.enc.Type(id) != tokenizer.TypeControl {
			continue
		}
		text := b.enc.Token(id)
		i := strings.Index(rest, text)
		if text == "" || i < 0 {
			continue
		}
		b.run = append(b.run, rest[:i]...)
		b.flush()
		b.after = false
		b.ids = append(b.ids, id)
		rest = rest[i+len(text):]
	}
	b.run = append(b.run, rest...)
}

// add adds ids as they are.
func (b *idBuilder) add(ids []int) {
	b.skip = ""
	b.flush()
	b.ids = append(b.ids, ids...)
	b.after = true
}

// reply adds a reply's ids in place of its content, whose leading and
// trailing white space they hold: where the text beside them has that
// white space (the template kept it, or wrote the same), it is dropped.
func (b *idBuilder) reply(ids []int, lead, trail string) {
	if n := len(b.run) - len(lead); lead != "" && n >= 0 && string(b.run[n:]) == lead {
		b.run = b.run[:n]
	}
	b.add(ids)
	b.skip = trail
}

// flush encodes the run: as a continuation when it follows given ids.
func (b *idBuilder) flush() {
	if len(b.run) == 0 {
		return
	}
	s := string(b.run)
	b.run = b.run[:0]
	if c, ok := b.enc.(continuer); ok && b.after {
		b.ids = append(b.ids, c.EncodeContinuation(s, false)...)
	} else {
		b.ids = append(b.ids, b.enc.Encode(s, false, false)...)
	}
	b.after = false
}

// finish encodes what is left and returns the ids.
func (b *idBuilder) finish() []int {
	b.flush()
	return b.ids
}
