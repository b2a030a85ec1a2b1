package chat

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"kvscope/engine/tokenizer"
)

// Turn is one message of a conversation; IDs, for an assistant reply the
// model generated, are its generated token ids (nil: tokenize Content).
type Turn struct {
	// Role is "system", "user" or "assistant" (templates may know others).
	Role string
	// Content is the turn's text: for a reply, its ids decoded.
	Content string
	// IDs, when not nil, are the ids the model generated for the reply,
	// without the end-of-generation token that ended it. The prompts
	// after it hold them as they are.
	IDs []int
	// End, with IDs, holds the end-of-generation token the model ended
	// the reply on (engine.Chunk.End): nil where the reply was cut short.
	End []int
}

// continuer is an Encoder that can encode text continuing earlier tokens,
// with no SPM space prefix at its start. *tokenizer.Tokenizer implements
// it.
type continuer interface {
	EncodeContinuation(text string, parseSpecial bool) []int
}

// Reuse says how a conversation's prompt holds its history: the last
// reply's prompt as computed and the reply as generated (the ids the
// prefix cache holds from the last turn).
type Reuse struct {
	// Kept counts the history's ids at the prompt's start.
	Kept int
	// Recomputed counts the history's ids after those: where the
	// renderings stopped extending each other (a template that rewrites
	// an earlier turn, such as one that drops a reply's reasoning), the
	// prompt was tokenized afresh, and from the first id that changed the
	// prefix cache misses.
	Recomputed int
}

// PromptIDs is ConversationIDs without its Reuse.
func (f *Formatter) PromptIDs(turns []Turn, opt Options, enc Encoder, addBOS bool) ([]int, error) {
	ids, _, err := f.ConversationIDs(turns, opt, enc, addBOS)
	return ids, err
}

// ConversationIDs returns the prompt of turns as token ids: the
// conversation as the model saw it, followed by the tokens of what the
// newest turns add to the rendering.
//
// Re-tokenizing a conversation's rendering need not give the ids the
// model read and wrote: a reply tokenized again can split differently
// from the ids generated, and a template that trims a reply or puts a
// space before it ([INST] … [/INST] reply) changes the text around it, so
// SentencePiece merges that space into another token. Either way the
// prefix cache stops matching at that reply. So the prompt is built turn
// by turn, as the conversation went: the prompt before the first reply
// with IDs is its rendering tokenized (Tokenize); then, at each such
// reply, the ids so far are followed by the reply's IDs and End, and by
// the tokens of the text that the rendering up to the next reply (or, at
// last, the whole rendering) adds after it. The reply's own text is
// matched against the rendering with white space at its edges and before
// the end token's text ignored, as templates trim and re-space replies;
// an End the template does not write is dropped. The added text is
// tokenized as Tokenize does (control tokens from template text only),
// the first run as a continuation (no SPM space prefix).
//
// Where a rendering does not extend the previous one (the template
// rewrote an earlier turn, cut a reply, or a reply's prefix does not
// render), the prompt falls back to the fresh rendering tokenized from
// there on, and Reuse.Recomputed counts the last turn's ids that changed.
// llama.cpp's server and vLLM tokenize the whole rendering each turn, and
// their caches stop at the first changed token; keeping the ids keeps the
// whole history cached.
//
// Plain completion (ModeCompletion, a model with no chat format) makes the
// prompt the app's plain conversation text: the system turns' trimmed
// contents (joined by newlines) and a blank line, then the other turns'
// contents in order, each user turn after the first on a new line and each
// reply continuing the text before it (its IDs in place of its text; End
// is not part of that text). All of it is message text (control tokens
// stay text; user-defined tokens are still found), and
// opt.AddGenerationPrompt has nothing to add. With addBOS, BOS comes first
// when the vocabulary asks for it.
func (f *Formatter) ConversationIDs(turns []Turn, opt Options, enc Encoder, addBOS bool) ([]int, Reuse, error) {
	if len(turns) > maxMessages {
		return nil, Reuse{}, fmt.Errorf("%d messages: at most %d can be rendered", len(turns), maxMessages)
	}
	msgs := make([]Message, len(turns))
	for i, t := range turns {
		if t.Role == "" {
			return nil, Reuse{}, fmt.Errorf("message %d has no role", i)
		}
		msgs[i] = Message{Role: t.Role, Content: t.Content}
	}
	if f.mode == ModeCompletion {
		b := idBuilder{enc: enc}
		if addBOS && enc.AddBOS() && enc.BOS() >= 0 {
			b.ids = append(b.ids, enc.BOS())
		}
		kept := plainIDs(&b, turns)
		return b.finish(), Reuse{Kept: kept}, nil
	}
	h := history{enc: enc, addBOS: addBOS}
	gen := opt
	gen.AddGenerationPrompt = true
	for a, t := range turns {
		if t.Role != "assistant" || t.IDs == nil || a == 0 {
			continue
		}
		p, err := f.Render(msgs[:a], gen)
		if err != nil {
			continue // that prompt never was: the reply stays text
		}
		h.extend(p)
		h.reply(t)
	}
	p, err := f.Render(msgs, opt)
	if err != nil {
		return nil, Reuse{}, err
	}
	seen := slices.Clone(h.ids) // the last prompt and reply, as the model saw them
	h.extend(p)
	kept := 0
	for kept < len(seen) && kept < len(h.ids) && seen[kept] == h.ids[kept] {
		kept++
	}
	return h.ids, Reuse{Kept: kept, Recomputed: len(seen) - kept}, nil
}

// history is a conversation's ids as ConversationIDs builds them, and the
// text they stand for.
type history struct {
	enc    Encoder
	addBOS bool
	ids    []int
	// prompt is the rendering the ids stand for up to the last reply, and
	// content and endText that reply's text and its End's; end is End,
	// held back until the next rendering shows the template writes it.
	prompt, content, endText string
	end                      []int
	started                  bool
}

// reply adds a reply the model generated after the current prompt.
func (h *history) reply(t Turn) {
	h.ids = append(h.ids, t.IDs...)
	h.content, h.end, h.endText = t.Content, t.End, ""
	for _, id := range t.End {
		h.endText += h.enc.Token(id)
	}
}

// extend makes the ids stand for the rendering p: the tokens of what p
// adds after the reply are appended, or, where p does not extend the
// text so far, p is tokenized afresh.
func (h *history) extend(p *Prompt) {
	text := p.Text()
	if !h.started {
		h.started = true
		h.ids, h.prompt = Tokenize(p, h.enc, h.addBOS), text
		return
	}
	k, ok := -1, strings.HasPrefix(text, h.prompt)
	if ok {
		k, ok = alignReply(text, len(h.prompt), h.content)
	}
	ended := false // the reply's end token closes the ids so far
	if ok && h.endText != "" {
		if e, found := alignReply(text, k, h.endText); found {
			h.ids, k, ended = append(h.ids, h.end...), e, true
		}
	}
	h.end, h.content, h.endText = nil, "", ""
	if !ok {
		h.ids, h.prompt = Tokenize(p, h.enc, h.addBOS), text
		return
	}
	// What follows a reply continues its text; what follows its end token
	// is encoded as after any control token.
	b := idBuilder{enc: h.enc, ids: h.ids, after: !ended}
	if ended {
		_, b.strip = h.enc.Strips(h.ids[len(h.ids)-1])
	}
	for _, s := range segmentsFrom(p.Segments, k) {
		if s.Special {
			b.special(s.Text)
		} else {
			b.text(s.Text)
		}
	}
	h.ids, h.prompt = b.finish(), text
}

// alignReply matches want against text from byte at, ignoring white space
// on either side wherever the two differ (templates trim replies and put
// spaces around them), and returns where the match ends in text.
func alignReply(text string, at int, want string) (int, bool) {
	i, j := 0, at
	for i < len(want) {
		r, n := utf8.DecodeRuneInString(want[i:])
		if j < len(text) {
			r2, n2 := utf8.DecodeRuneInString(text[j:])
			if r == r2 {
				i, j = i+n, j+n2
				continue
			}
			if unicode.IsSpace(r2) {
				j += n2
				continue
			}
		}
		if !unicode.IsSpace(r) {
			return 0, false
		}
		i += n
	}
	return j, true
}

// segmentsFrom returns the segments after byte k of their joined text.
func segmentsFrom(segs []Segment, k int) []Segment {
	var out []Segment
	for _, s := range segs {
		switch {
		case k >= len(s.Text):
			k -= len(s.Text)
		case k > 0:
			out = append(out, Segment{Text: s.Text[k:], Special: s.Special})
			k = 0
		default:
			out = append(out, s)
		}
	}
	return out
}

// plainIDs adds the plain-completion prompt of turns to b (see
// ConversationIDs) and returns how many of its ids end with the last
// reply's.
func plainIDs(b *idBuilder, turns []Turn) (kept int) {
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
			kept = len(b.ids)
		} else {
			b.text(t.Content)
		}
	}
	return kept
}

// idBuilder collects a prompt's ids: text runs between control tokens
// and given ids.
type idBuilder struct {
	enc   Encoder
	ids   []int
	run   []byte // text since the last control token or given ids
	after bool   // the run continues given ids
	strip bool   // the last control token drops the white space after it
}

// text adds message text (no control tokens found in it).
func (b *idBuilder) text(s string) {
	if b.strip && len(b.run) == 0 {
		s = strings.TrimLeft(s, asciiSpace)
		b.strip = s == ""
	}
	b.run = append(b.run, s...)
}

// special adds template text: its control tokens end the run.
func (b *idBuilder) special(s string) {
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
		b.text(rest[:i])
		before, after := b.enc.Strips(id)
		if before {
			b.run = []byte(strings.TrimRight(string(b.run), asciiSpace))
		}
		b.flush()
		b.after = false
		b.ids = append(b.ids, id)
		b.strip = after
		rest = rest[i+len(text):]
	}
	b.text(rest)
}

// add adds ids as they are.
func (b *idBuilder) add(ids []int) {
	b.flush()
	b.strip = false
	b.ids = append(b.ids, ids...)
	b.after = true
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
