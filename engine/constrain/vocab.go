package constrain

import (
	"math/bits"
	"slices"
	"strings"

	"kvscope/engine/tokenizer"
)

// Vocab is a tokenizer's vocabulary as tries of token byte strings, for
// computing token masks. It is immutable and safe for concurrent use.
type Vocab struct {
	size   int
	pieces []string
	// all is the trie of every usable token. Most tokens of a real
	// vocabulary are plain text: printable ASCII without a quote or a
	// backslash (textBytes). Where a state takes all of those bytes along
	// its plain run, as inside a string, text marks them from bitmaps by
	// length, and only the others, in rest (a trie of a few thousand
	// tokens), are walked.
	all, rest trie
	text      textTokens
}

// trie is a trie of token byte strings, node 0 its root. The children of
// a node lie side by side (nodes[kids:kids+nkids], in byte order), so that
// a walk reads a node's children in one run of memory and jumps only to go
// deeper.
type trie struct {
	nodes []trieNode
	// toks holds every token in trie preorder, so that the tokens of a
	// node's subtree are toks[tokLo:tokHi] and its own (one, or more for
	// tokens with the same bytes) the first own of them.
	toks  []int32
	lens  []uint16 // the byte length of each token of toks
	chars []uint16 // and its characters (bytes that start one: ASCII and UTF-8 leads)
	// A walk marks tokens in a bitmap in the order of toks, where a
	// subtree is a run of bits set a word at a time, and then moves the
	// bits to token ids. charsAtMost[c] is that bitmap of the tokens of
	// at most c characters (for c below maxCharLevels), for a subtree cut
	// at a bounded string's last character; usable has the bit of every
	// token id in toks, by id.
	charsAtMost [][]uint64
	usable      []uint64
}

// maxCharLevels bounds trie.charsAtMost (16 KiB each on a 128k
// vocabulary): a cut past that many characters, which only the rare
// longer tokens need, is made a token at a time.
const maxCharLevels = 48

// textTokens are the tokens of only textBytes, as masks by token id:
// atMost[n] has those of at most n bytes (count[n] of them) for n below
// textLevels, and long lists the longer ones by length.
type textTokens struct {
	atMost   [][]uint64
	count    []int
	long     []int32
	longLens []uint16
	longest  int
}

// textLevels bounds textTokens.atMost: 16 KiB each on a 128k vocabulary.
const textLevels = 33

// textBytes are the bytes of plain text tokens: printable ASCII but the
// quote and the backslash, so that every JSON string and free text takes
// them as they come.
var textBytes = func() summary {
	var c class
	c.add(0x20, 0x7e)
	c[0] &^= 1 << '"'
	c[1] &^= 1 << ('\\' - 64)
	return summarize(&c)
}()

// isText reports whether p is made of textBytes only.
func isText(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// trieNode is one trie node: the bytes on the edges below it (as a
// summary), where its children are, its tokens, how much deeper its
// subtree goes and the byte of the edge into it.
type trieNode struct {
	bytes        summary
	kids         int32
	tokLo, tokHi int32
	nkids        uint16
	below        uint16
	own          uint16
	label        byte
	utf8         uint8  // utf8Next's state after the node's bytes, | utf8Whole when the bytes below continue it validly
	chars        uint16 // the characters of the node's bytes (as trie.chars counts them)
}

// maxPiece bounds the pieces the trie holds (a longer one, which no real
// vocabulary has, is left out of constrained output).
const maxPiece = 1 << 15

// NewVocab builds the tries of pieces, the byte string of each token id;
// an empty piece marks a token that constrained output never uses
// (control, unknown and unused tokens).
func NewVocab(pieces []string) *Vocab {
	v := &Vocab{size: len(pieces), pieces: pieces}
	var all, rest []int32
	byLen := map[int][]int32{}
	for id, p := range pieces {
		if p == "" || len(p) >= maxPiece {
			continue
		}
		all = append(all, int32(id))
		if isText(p) {
			byLen[len(p)] = append(byLen[len(p)], int32(id))
		} else {
			rest = append(rest, int32(id))
		}
	}
	v.all = newTrie(pieces, all, v.MaskWords())
	v.rest = newTrie(pieces, rest, v.MaskWords())
	t := &v.text
	for n := range byLen {
		t.longest = max(t.longest, n)
	}
	t.atMost = make([][]uint64, min(t.longest+1, textLevels))
	t.count = make([]int, len(t.atMost))
	bits := make([]uint64, v.MaskWords())
	count := 0
	for n := range t.atMost {
		for _, id := range byLen[n] {
			bits[id>>6] |= 1 << (id & 63)
		}
		count += len(byLen[n])
		t.atMost[n], t.count[n] = slices.Clone(bits), count
	}
	for n := len(t.atMost); n <= t.longest; n++ {
		for _, id := range byLen[n] {
			t.long = append(t.long, id)
			t.longLens = append(t.longLens, uint16(n))
		}
	}
	return v
}

// newTrie builds the trie of the pieces of ids.
func newTrie(pieces []string, ids []int32, maskWords int) trie {
	var t trie
	order := slices.Clone(ids)
	slices.SortFunc(order, func(a, b int32) int {
		if c := strings.Compare(pieces[a], pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	type group struct {
		lo, hi int
		c      byte
	}
	// build fills node n, whose tokens are order[lo:hi] (sharing a prefix
	// of length depth), and its subtree, and returns the bytes below it
	// and how much deeper it goes.
	var build func(n, lo, hi, depth int, u8 uint8, chars int) (class, int, bool)
	build = func(n, lo, hi, depth int, u8 uint8, chars int) (class, int, bool) {
		t.nodes[n].tokLo = int32(len(t.toks))
		own := 0
		for lo < hi && len(pieces[order[lo]]) == depth {
			t.toks = append(t.toks, order[lo])
			t.lens = append(t.lens, uint16(depth))
			t.chars = append(t.chars, uint16(chars))
			lo++
			own++
		}
		var groups []group
		for lo < hi {
			c := pieces[order[lo]][depth]
			k := lo
			for k < hi && pieces[order[k]][depth] == c {
				k++
			}
			groups = append(groups, group{lo, k, c})
			lo = k
		}
		kids := len(t.nodes)
		for _, gr := range groups {
			t.nodes = append(t.nodes, trieNode{label: gr.c})
		}
		var below class
		deepest := 0
		whole := u8 != utf8Bad
		for j, gr := range groups {
			next := utf8Next(u8, gr.c)
			starts := chars
			if gr.c < 0x80 || gr.c >= 0xc0 {
				starts++
			}
			set, d, w := build(kids+j, gr.lo, gr.hi, depth+1, next, starts)
			below.or(set)
			below.add(gr.c, gr.c)
			deepest = max(deepest, d+1)
			whole = whole && w && next != utf8Bad
		}
		nd := &t.nodes[n]
		nd.kids, nd.nkids = int32(kids), uint16(len(groups))
		nd.tokHi = int32(len(t.toks))
		nd.own = uint16(min(own, 1<<16-1))
		nd.below = uint16(deepest)
		nd.bytes = summarize(&below)
		nd.utf8 = u8
		nd.chars = uint16(min(chars, 1<<16-1))
		if whole {
			nd.utf8 |= utf8Whole
		}
		return below, deepest, whole
	}
	t.nodes = []trieNode{{}}
	build(0, 0, len(order), 0, 0, 0)
	words := (len(t.toks) + 63) / 64
	most := 0
	for _, c := range t.chars {
		most = max(most, int(c))
	}
	t.charsAtMost = make([][]uint64, min(most+1, maxCharLevels))
	for c := range t.charsAtMost {
		bits := make([]uint64, words)
		for k, n := range t.chars {
			if int(n) <= c {
				bits[k>>6] |= 1 << (k & 63)
			}
		}
		t.charsAtMost[c] = bits
	}
	t.usable = make([]uint64, maskWords)
	for _, id := range t.toks {
		t.usable[id>>6] |= 1 << (id & 63)
	}
	return t
}

// Size is the number of token ids, usable or not.
func (v *Vocab) Size() int { return v.size }

// Nodes is the number of nodes of the trie of all tokens.
func (v *Vocab) Nodes() int { return len(v.all.nodes) }

// Piece is the byte string of token id ("" for an unusable one).
func (v *Vocab) Piece(id int) string {
	if id < 0 || id >= len(v.pieces) {
		return ""
	}
	return v.pieces[id]
}

// MaskWords is the length of a mask over v: one bit per token id.
func (v *Vocab) MaskWords() int { return (v.size + 63) / 64 }

// Allowed sets in mask (at least MaskWords long, all of it cleared here:
// a caller may size it for a larger model vocabulary) the bit of every
// token whose bytes keep the output valid, and returns how many there are.
// End-of-generation tokens are the caller's to add when Accepting.
func (m *Matcher) Allowed(v *Vocab, mask []uint64) int {
	clear(mask[v.MaskWords():])
	mask = mask[:v.MaskWords()]
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.st == 0 {
		clear(mask)
		return 0
	}
	g := m.g
	key := maskKey{v, m.st}
	g.uses++
	if c, ok := g.masks[key]; ok {
		c.used = g.uses
		c.put(mask)
		return c.n
	}
	n := g.fill(v, m.st, mask)
	g.keep(key, mask, n)
	return n
}

// maxMaskBytes bounds the memory of the masks a Grammar keeps (16 KiB
// for a mask of many tokens on a 128k vocabulary, 4 bytes a token for one
// of few), and maxMasks their number, the least recently used let go
// first: an output that comes back to a parse position (the next
// character of a string, say, or the same place in another request's
// output) reuses its mask instead of walking the trie.
const (
	maxMaskBytes = 4 << 20
	maxMasks     = 1024
)

type maskKey struct {
	v  *Vocab
	st int32
}

// cachedMask is a kept mask: its bits, or for one of few tokens their ids.
type cachedMask struct {
	bits []uint64
	ids  []int32
	n    int
	used uint64 // Grammar.uses when last used
}

func (c *cachedMask) bytes() int { return 8*len(c.bits) + 4*len(c.ids) }

// put writes c to mask.
func (c *cachedMask) put(mask []uint64) {
	if c.bits != nil {
		copy(mask, c.bits)
		return
	}
	clear(mask)
	for _, id := range c.ids {
		mask[id>>6] |= 1 << (id & 63)
	}
}

// keep adds the mask of key, with n tokens, to g's masks, letting go of
// the least recently used ones beyond maxMaskBytes or maxMasks.
func (g *Grammar) keep(key maskKey, mask []uint64, n int) {
	c := &cachedMask{n: n, used: g.uses}
	if 32*n < 8*len(mask) {
		c.ids = make([]int32, 0, n)
		for w, b := range mask {
			for b != 0 {
				c.ids = append(c.ids, int32(w<<6|bits.TrailingZeros64(b)))
				b &= b - 1
			}
		}
	} else {
		c.bits = slices.Clone(mask)
	}
	g.maskBytes += c.bytes()
	g.masks[key] = c
	for (g.maskBytes > maxMaskBytes || len(g.masks) > maxMasks) && len(g.masks) > 1 {
		var oldest maskKey
		first := true
		for k, m := range g.masks {
			if k != key && (first || m.used < g.masks[oldest].used) {
				oldest, first = k, false
			}
		}
		g.maskBytes -= g.masks[oldest].bytes()
		delete(g.masks, oldest)
	}
}

// forgetMasks lets go of every kept mask (for tests and benchmarks that
// time the walk).
func (g *Grammar) forgetMasks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.masks)
	g.maskBytes = 0
}

// fill sets mask to the tokens allowed from state st and returns how many
// there are. Where st takes every text byte along its plain run (inside a
// JSON string, say) for as far as the longest text token goes, or as far
// as a bound after which none of them can follow (a string's maxLength),
// the text tokens are marked by length from their bitmaps and only the
// rest trie is walked; elsewhere the trie of all tokens is.
func (g *Grammar) fill(v *Vocab, st int32, mask []uint64) int {
	t := &v.text
	if t.longest > 0 {
		d, end := g.spans(st, textBytes, t.longest)
		if d == t.longest || g.stops(end, textBytes) {
			return t.mark(mask, d) + g.walk(&v.rest, st, mask)
		}
	}
	clear(mask)
	return g.walk(&v.all, st, mask)
}

// mark sets mask to the text tokens of at most d bytes and returns how
// many there are.
func (t *textTokens) mark(mask []uint64, d int) int {
	if d == 0 {
		clear(mask)
		return 0
	}
	level := min(d, len(t.atMost)-1)
	copy(mask, t.atMost[level])
	n := t.count[level]
	for k, id := range t.long {
		if int(t.longLens[k]) > d {
			break
		}
		mask[id>>6] |= 1 << (id & 63)
		n++
	}
	return n
}

// walk walks trie tr depth first from state st, dropping the subtree of
// every dead prefix, adds the tokens it reaches to mask and returns how
// many there are. A subtree whose bytes all take the automaton along its
// plain run (spans) is marked whole without a walk: inside a JSON string,
// say, most of the vocabulary is marked that way, a subtree at a time.
// The marks go to a bitmap in the order of tr.toks, a subtree a run of
// words, and then to mask.
func (g *Grammar) walk(tr *trie, st int32, mask []uint64) int {
	type level struct{ next, end, st, depth int32 } // children left to visit, their parent's state and their depth
	root := &tr.nodes[0]
	if root.nkids == 0 {
		return 0
	}
	stack := append(g.walkStack[:0], level{root.kids, root.kids + int32(root.nkids), st, 1})
	defer func() { g.walkStack = stack[:0] }()
	words := (len(tr.toks) + 63) / 64
	if cap(g.order) < words {
		g.order = make([]uint64, words)
	}
	tb := g.order[:words]
	clear(tb)
	nodes := tr.nodes
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == top.end {
			stack = stack[:len(stack)-1]
			continue
		}
		n := &nodes[top.next]
		top.next++
		ns := g.trans[int(top.st)<<8|int(n.label)] - 1
		if ns < 0 {
			ns = g.compute(top.st, n.label)
		}
		if ns == 0 {
			continue
		}
		if n.below > 0 {
			// A small subtree of a state not yet planned is walked
			// rather than planned: the walk reaches many states once
			// (the whitespace after a token's quote, say), and a plan
			// costs the walk of a few dozen nodes.
			info := &g.states[ns]
			if n.tokHi-n.tokLo < smallSubtree && !info.planned {
				stack = append(stack, level{n.kids, n.kids + int32(n.nkids), ns, top.depth + 1})
				setBits(tb, n.tokLo, n.tokLo+int32(n.own))
				continue
			}
			// Most subtrees the walk meets lie wholly within a run
			// already worked out: one test says so (as spans would).
			if k := min(len(info.run), int(n.below)); k > 0 {
				last := &info.run[k-1]
				if (k == int(n.below) || last.loops) && n.bytes[0]&^last.common[0]|n.bytes[1]&^last.common[1] == 0 {
					setBits(tb, n.tokLo, n.tokHi)
					continue
				}
			}
			d, end := g.spans(ns, n.bytes, int(n.below))
			if d == int(n.below) {
				setBits(tb, n.tokLo, n.tokHi)
				continue
			}
			if n.utf8 == utf8Whole {
				// The same by characters, for text with multi-byte
				// characters in it (all valid UTF-8 from here).
				cd, cend := g.charSpans(ns, n.bytes, int(n.below))
				if cd == int(n.below) {
					setBits(tb, n.tokLo, n.tokHi)
					continue
				}
				if cd > 0 && g.stops(cend, n.bytes) {
					tr.markChars(tb, n.tokLo, n.tokHi, int(n.chars)+cd)
					continue
				}
			}
			if d > 0 && g.stops(end, n.bytes) {
				// The run takes every string of the subtree's bytes d
				// bytes deep, and none of them further (a string's
				// last characters before its maxLength, say): the
				// tokens up to d bytes below are in, the rest out.
				limit := top.depth + int32(d)
				for k := n.tokLo; k < n.tokHi; k++ {
					if int32(tr.lens[k]) <= limit {
						tb[k>>6] |= 1 << (k & 63)
					}
				}
				continue
			}
			if n.nkids > 0 {
				stack = append(stack, level{n.kids, n.kids + int32(n.nkids), ns, top.depth + 1})
			}
		}
		setBits(tb, n.tokLo, n.tokLo+int32(n.own))
	}
	return tr.addIDs(tb, mask)
}

// smallSubtree is the size (in tokens) under which a walk goes through
// the subtree of a state it has not planned rather than planning it.
const smallSubtree = 32

// setBits sets bits lo to hi-1 of b.
func setBits(b []uint64, lo, hi int32) {
	if lo >= hi {
		return
	}
	wl, wh := lo>>6, (hi-1)>>6
	first, last := ^uint64(0)<<(lo&63), ^uint64(0)>>(63-(hi-1)&63)
	if wl == wh {
		b[wl] |= first & last
		return
	}
	b[wl] |= first
	for w := wl + 1; w < wh; w++ {
		b[w] = ^uint64(0)
	}
	b[wh] |= last
}

// markChars sets in tb (in the order of toks) the bits of the tokens
// toks[lo:hi] of at most limit characters.
func (tr *trie) markChars(tb []uint64, lo, hi int32, limit int) {
	if limit >= len(tr.charsAtMost) {
		for k := lo; k < hi; k++ {
			if int(tr.chars[k]) <= limit {
				tb[k>>6] |= 1 << (k & 63)
			}
		}
		return
	}
	src := tr.charsAtMost[limit]
	wl, wh := lo>>6, (hi-1)>>6
	first, last := ^uint64(0)<<(lo&63), ^uint64(0)>>(63-(hi-1)&63)
	if wl == wh {
		tb[wl] |= src[wl] & first & last
		return
	}
	tb[wl] |= src[wl] & first
	for w := wl + 1; w < wh; w++ {
		tb[w] |= src[w]
	}
	tb[wh] |= src[wh] & last
}

// addIDs adds the tokens of tb (bits in the order of toks) to mask (by
// token id), where none of tr's tokens is yet, and returns how many there
// are. Where most of tr's tokens are in, it adds all of them and takes out
// the rest, so that it costs the fewer of the two.
func (tr *trie) addIDs(tb []uint64, mask []uint64) int {
	count := 0
	for _, w := range tb {
		count += bits.OnesCount64(w)
	}
	toks := tr.toks
	if 2*count <= len(toks) {
		for i, w := range tb {
			for w != 0 {
				id := toks[i<<6|bits.TrailingZeros64(w)]
				mask[id>>6] |= 1 << (id & 63)
				w &= w - 1
			}
		}
		return count
	}
	for i, u := range tr.usable {
		mask[i] |= u
	}
	for i, w := range tb {
		w = ^w
		if i == len(tb)-1 && len(toks)&63 != 0 {
			w &= 1<<(len(toks)&63) - 1
		}
		for w != 0 {
			id := toks[i<<6|bits.TrailingZeros64(w)]
			mask[id>>6] &^= 1 << (id & 63)
			w &= w - 1
		}
	}
	return count
}

// The states of a strict UTF-8 decoder (utf8Next): 0 between characters,
// 1-7 within one, utf8Bad after an invalid byte.
const (
	utf8Bad   = 8
	utf8Whole = 0x80 // trieNode.utf8: the bytes below are valid UTF-8 on from here
)

// utf8Next is the decoder's state after byte c in state u: 1 continuation
// byte left; 2 two left; 3 two left after E0 (A0-BF next); 4 two left
// after ED (80-9F next, no surrogates); 5 three left; 6 three left after
// F0 (90-BF next); 7 three left after F4 (80-8F next).
func utf8Next(u, c byte) byte {
	cont := c >= 0x80 && c <= 0xbf
	switch u {
	case 0:
		switch {
		case c < 0x80:
			return 0
		case c >= 0xc2 && c <= 0xdf:
			return 1
		case c == 0xe0:
			return 3
		case c == 0xed:
			return 4
		case c >= 0xe1 && c <= 0xef:
			return 2
		case c == 0xf0:
			return 6
		case c >= 0xf1 && c <= 0xf3:
			return 5
		case c == 0xf4:
			return 7
		}
	case 1:
		if cont {
			return 0
		}
	case 2:
		if cont {
			return 1
		}
	case 3:
		if c >= 0xa0 && c <= 0xbf {
			return 1
		}
	case 4:
		if c >= 0x80 && c <= 0x9f {
			return 1
		}
	case 5:
		if cont {
			return 2
		}
	case 6:
		if c >= 0x90 && c <= 0xbf {
			return 2
		}
	case 7:
		if c >= 0x80 && c <= 0x8f {
			return 2
		}
	}
	return utf8Bad
}

// FromTokenizer is the Vocab of tok: the bytes of its normal, byte and
// user-defined tokens (Piece), with control, unknown and unused tokens
// left out (end-of-generation tokens are the caller's).
func FromTokenizer(tok *tokenizer.Tokenizer) *Vocab {
	pieces := make([]string, tok.Size())
	for id := range pieces {
		switch tok.Type(id) {
		case tokenizer.TypeNormal, tokenizer.TypeByte, tokenizer.TypeUserDefined:
			pieces[id] = tok.Piece(id)
		}
	}
	return NewVocab(pieces)
}
