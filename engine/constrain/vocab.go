package constrain

import (
	"slices"
	"strings"

	"kvscope/engine/tokenizer"
)

// Vocab is a tokenizer's vocabulary as a trie of token byte strings, for
// computing token masks. It is immutable and safe for concurrent use.
type Vocab struct {
	size   int
	pieces []string
	// The trie, node 0 its root. The children of a node lie side by side
	// (nodes[kids:kids+nkids], in byte order), so that a walk reads a
	// node's children in one run of memory and jumps only to go deeper.
	nodes []trieNode
	// toks holds every token in trie preorder, so that the tokens of a
	// node's subtree are toks[tokLo:tokHi] and its own (one, or more for
	// tokens with the same bytes) the first own of them.
	toks  []int32
	lens  []uint16 // the byte length of each token of toks
	chars []uint16 // and its characters (bytes that start one: ASCII and UTF-8 leads)
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
	chars        uint16 // the characters of the node's bytes (as Vocab.chars counts them)
}

// maxPiece bounds the pieces the trie holds (a longer one, which no real
// vocabulary has, is left out of constrained output).
const maxPiece = 1 << 15

// NewVocab builds the trie of pieces, the byte string of each token id;
// an empty piece marks a token that constrained output never uses
// (control, unknown and unused tokens).
func NewVocab(pieces []string) *Vocab {
	v := &Vocab{size: len(pieces), pieces: pieces}
	order := make([]int32, 0, len(pieces))
	for id, p := range pieces {
		if p != "" && len(p) < maxPiece {
			order = append(order, int32(id))
		}
	}
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
		v.nodes[n].tokLo = int32(len(v.toks))
		own := 0
		for lo < hi && len(pieces[order[lo]]) == depth {
			v.toks = append(v.toks, order[lo])
			v.lens = append(v.lens, uint16(depth))
			v.chars = append(v.chars, uint16(chars))
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
		kids := len(v.nodes)
		for _, gr := range groups {
			v.nodes = append(v.nodes, trieNode{label: gr.c})
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
		nd := &v.nodes[n]
		nd.kids, nd.nkids = int32(kids), uint16(len(groups))
		nd.tokHi = int32(len(v.toks))
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
	v.nodes = []trieNode{{}}
	build(0, 0, len(order), 0, 0, 0)
	return v
}

// Size is the number of token ids, usable or not.
func (v *Vocab) Size() int { return v.size }

// Nodes is the number of trie nodes.
func (v *Vocab) Nodes() int { return len(v.nodes) }

// Piece is the byte string of token id ("" for an unusable one).
func (v *Vocab) Piece(id int) string {
	if id < 0 || id >= len(v.pieces) {
		return ""
	}
	return v.pieces[id]
}

// MaskWords is the length of a mask over v: one bit per token id.
func (v *Vocab) MaskWords() int { return (v.size + 63) / 64 }

// Allowed sets in mask (MaskWords long, cleared here) the bit of every
// token whose bytes keep the output valid, and returns how many there are.
// End-of-generation tokens are the caller's to add when Accepting.
func (m *Matcher) Allowed(v *Vocab, mask []uint64) int {
	clear(mask)
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.st == 0 {
		return 0
	}
	g := m.g
	key := maskKey{v, m.st}
	if c, ok := g.masks[key]; ok {
		copy(mask, c.bits)
		return c.n
	}
	n := g.fill(v, m.st, mask)
	if len(g.masks) >= maxMasks {
		clear(g.masks)
	}
	g.masks[key] = cachedMask{slices.Clone(mask), n}
	return n
}

// maxMasks bounds the masks a Grammar keeps (16 KiB each on a 128k
// vocabulary): an output that comes back to a parse position (the next
// character of a string, say) reuses its mask instead of walking the trie.
const maxMasks = 64

type maskKey struct {
	v  *Vocab
	st int32
}

type cachedMask struct {
	bits []uint64
	n    int
}

// fill walks the trie depth first from state st, dropping the subtree of
// every dead prefix, and marks the tokens it reaches. A subtree whose
// bytes all take the automaton along its plain run (spans) is marked
// whole without a walk: inside a JSON string, say, most of the vocabulary
// is marked that way, a subtree at a time.
func (g *Grammar) fill(v *Vocab, st int32, mask []uint64) int {
	type level struct{ next, end, st, depth int32 } // children left to visit, their parent's state and their depth
	root := &v.nodes[0]
	stack := []level{{root.kids, root.kids + int32(root.nkids), st, 1}}
	count := 0
	nodes, toks := v.nodes, v.toks
	mark := func(lo, hi int32) {
		for _, id := range toks[lo:hi] {
			mask[id>>6] |= 1 << (id & 63)
		}
		count += int(hi - lo)
	}
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
			d, end := g.spans(ns, n.bytes, int(n.below))
			if d == int(n.below) {
				mark(n.tokLo, n.tokHi)
				continue
			}
			if n.utf8 == utf8Whole {
				// The same by characters, for text with multi-byte
				// characters in it (all valid UTF-8 from here).
				cd, cend := g.charSpans(ns, n.bytes, int(n.below))
				if cd == int(n.below) {
					mark(n.tokLo, n.tokHi)
					continue
				}
				if cd > 0 && g.stops(cend, n.bytes) {
					limit := uint16(int(n.chars) + cd)
					for k := n.tokLo; k < n.tokHi; k++ {
						if v.chars[k] <= limit {
							id := toks[k]
							mask[id>>6] |= 1 << (id & 63)
							count++
						}
					}
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
					if int32(v.lens[k]) <= limit {
						id := toks[k]
						mask[id>>6] |= 1 << (id & 63)
						count++
					}
				}
				continue
			}
			if n.nkids > 0 {
				stack = append(stack, level{n.kids, n.kids + int32(n.nkids), ns, top.depth + 1})
			}
		}
		mark(n.tokLo, n.tokLo+int32(n.own))
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
