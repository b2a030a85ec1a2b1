package tokenizer

import "strings"

// fragment is a piece of the input: raw text, or a special token that was
// split out of it.
type fragment struct {
	id   int32 // -1 for raw text
	text string
}

// Encode turns text into token ids. With addSpecial, BOS and EOS are added
// as the vocabulary's add_bos_token / add_eos_token say. With parseSpecial,
// text that spells a control token (such as "<s>" or "<|im_end|>") becomes
// that token; without it, it is ordinary text. User-defined tokens are
// always split out first, as in llama.cpp.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int {
	return t.encode(text, addSpecial, parseSpecial, true)
}

// EncodeContinuation encodes text that continues a sequence right after
// other tokens (a reply's generated ids, say), so that the ids of the
// pieces, joined, are a sequence the model could have read or written: no
// BOS or EOS is added, and an SPM vocabulary's space prefix is not put at
// the start of text (it still follows each special token inside text).
// Encode puts it there, as llama.cpp does at the start of an input.
func (t *Tokenizer) EncodeContinuation(text string, parseSpecial bool) []int {
	return t.encode(text, false, parseSpecial, false)
}

// encode is Encode; spaceFirst says whether SPM's space prefix goes
// before text that starts the input.
func (t *Tokenizer) encode(text string, addSpecial, parseSpecial, spaceFirst bool) []int {
	var frags []fragment
	if text != "" {
		frags = t.partition(text, parseSpecial)
	}
	out := make([]int, 0, len(text)/3+2)
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	if t.spm {
		prevSpecial := spaceFirst // prefix the first text with a space
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, int(f.id))
				prevSpecial = true
				continue
			}
			s := f.text
			if t.addSpace && prevSpecial {
				s = " " + s
			}
			out = t.encodeSPM(strings.ReplaceAll(s, " ", "▁"), out)
			prevSpecial = false
		}
	} else {
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, int(f.id))
				continue
			}
			out = t.encodeBPE(f.text, out)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// asciiSpace is the white space C's isspace finds, which llama.cpp strips
// beside a token with the lstrip or rstrip attribute.
const asciiSpace = " \t\n\v\f\r"

// partition splits the special tokens out of text, longest token text
// first, as llama.cpp's tokenizer_st_partition does. Without parseSpecial,
// control and unknown tokens stay text. A token with the lstrip (rstrip)
// attribute takes the white space before (after) it in its text fragment.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{id: -1, text: text}}
	for _, id := range t.specials {
		if !parseSpecial && t.attrs[id]&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		found := false
		for _, f := range frags {
			if f.id < 0 && strings.Contains(f.text, tok) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		next := make([]fragment, 0, len(frags)+2)
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			rest := f.text
			for {
				i := strings.Index(rest, tok)
				if i < 0 {
					break
				}
				left := rest[:i]
				if t.attrs[id]&attrLStrip != 0 {
					left = strings.TrimRight(left, asciiSpace)
				}
				if left != "" {
					next = append(next, fragment{id: -1, text: left})
				}
				next = append(next, fragment{id: id})
				rest = rest[i+len(tok):]
				if t.attrs[id]&attrRStrip != 0 {
					rest = strings.TrimLeft(rest, asciiSpace)
				}
			}
			if rest != "" {
				next = append(next, fragment{id: -1, text: rest})
			}
		}
		frags = next
	}
	return frags
}

// ---- SentencePiece-style merges ----

type spmSymbol struct {
	prev, next int
	start, n   int // bytes of the text
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmQueue pops the highest score first, and of equal scores the leftmost
// pair.
type spmQueue = queue[spmBigram]

func (a spmBigram) before(b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

// encodeSPM appends the tokens of text (spaces already turned into ▁):
// starting from single characters, it repeatedly merges the adjacent pair
// whose concatenation is the highest-scoring token, then emits each symbol
// as its token or, failing that, as byte tokens.
func (t *Tokenizer) encodeSPM(text string, out []int) []int {
	syms := make([]spmSymbol, 0, len(text))
	for off := 0; off < len(text); {
		n := min(utf8SeqLen(text[off]), len(text)-off)
		idx := len(syms)
		next := idx + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSymbol{prev: idx - 1, next: next, start: off, n: n})
		off += n
	}

	q := make(spmQueue, 0, len(syms))
	try := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left], syms[right]
		s := text[l.start : r.start+r.n]
		id, ok := t.index[s]
		if !ok {
			return
		}
		q.push(spmBigram{left: left, right: right, score: t.scores[id], size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for len(q) > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // one side already merged elsewhere
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}

	for i := 0; i != -1 && len(syms) > 0; i = syms[i].next {
		s := syms[i]
		piece := text[s.start : s.start+s.n]
		if id, ok := t.index[piece]; ok {
			out = append(out, int(id))
			continue
		}
		// Merges only ever form tokens, so a symbol that is not a token is
		// a single character: spell it in byte tokens.
		for j := 0; j < len(piece); j++ {
			switch id := t.byteTokens[piece[j]]; {
			case id >= 0:
				out = append(out, int(id))
			case t.unk >= 0:
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// ---- byte-level BPE ----

type bpeSymbol struct {
	prev, next int
	start, n   int
}

// bpeBigram is a candidate merge of symbols left and right, valid while
// their lengths are still ln and rn (which is llama.cpp's test that their
// texts are unchanged, since a live pair's start bytes never move).
type bpeBigram struct {
	left, right int
	ln, rn      int
	rank        int32
}

// bpeQueue pops the lowest rank first, and of equal ranks the leftmost
// pair.
type bpeQueue = queue[bpeBigram]

func (a bpeBigram) before(b bpeBigram) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

// encodeBPE appends the tokens of text: the pre-tokenizer cuts it into
// byte-encoded words, merges run inside each word by rank, and each final
// symbol becomes its token (or, failing that, its single-byte tokens).
func (t *Tokenizer) encodeBPE(text string, out []int) []int {
	var syms []bpeSymbol
	var q bpeQueue
	for _, word := range t.pre.split(text) {
		if t.pre.ignoreMerges {
			if id, ok := t.index[word]; ok {
				out = append(out, int(id))
				continue
			}
		}
		syms = syms[:0]
		for off := 0; off < len(word); {
			n := min(utf8SeqLen(word[off]), len(word)-off)
			idx := len(syms)
			next := idx + 1
			if off+n == len(word) {
				next = -1
			}
			syms = append(syms, bpeSymbol{prev: idx - 1, next: next, start: off, n: n})
			off += n
		}
		q = q[:0]
		add := func(left, right int) {
			if left < 0 || right < 0 {
				return
			}
			l, r := syms[left], syms[right]
			rank, ok := t.ranks[mergeKey{word[l.start : l.start+l.n], word[r.start : r.start+r.n]}]
			if !ok {
				return
			}
			q.push(bpeBigram{left: left, right: right, ln: l.n, rn: r.n, rank: rank})
		}
		for i := 1; i < len(syms); i++ {
			add(i-1, i)
		}
		for len(q) > 0 {
			b := q.pop()
			l, r := &syms[b.left], &syms[b.right]
			if l.n != b.ln || r.n != b.rn {
				continue // outdated
			}
			l.n += r.n
			r.n = 0
			l.next = r.next
			if r.next >= 0 {
				syms[r.next].prev = b.left
			}
			add(l.prev, b.left)
			add(b.left, l.next)
		}
		for i := 0; i != -1 && len(syms) > 0; i = syms[i].next {
			s := syms[i]
			piece := word[s.start : s.start+s.n]
			if id, ok := t.index[piece]; ok {
				out = append(out, int(id))
				continue
			}
			// As llama.cpp: look each byte up as a one-byte token; bytes
			// with no such token are dropped.
			for j := 0; j < len(piece); j++ {
				if id, ok := t.index[piece[j:j+1]]; ok {
					out = append(out, int(id))
				}
			}
		}
	}
	return out
}

// queue is a binary heap of merge candidates that pops first the one that
// comes before all others.
type queue[T interface{ before(T) bool }] []T

func (q *queue[T]) push(x T) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue[T]) pop() T {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	*q = h
	return top
}
