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
	// The trie in preorder, so that a walk reads memory in order: node 0
	// is the root, and node i's subtree is nodes i .. nodes[i].end-1.
	nodes []trieNode
	dups  map[int32][]int32 // more tokens of a node whose bytes two tokens share
	depth int               // the longest piece
}

// trieNode is one trie node: the byte of the edge into it, its depth, the
// end of its subtree and the token whose bytes end there (-1: none).
type trieNode struct {
	label byte
	depth uint16
	end   int32
	tok   int32
}

// maxPiece bounds the pieces the trie holds (a longer one, which no real
// vocabulary has, is left out of constrained output).
const maxPiece = 1 << 15

// NewVocab builds the trie of pieces, the byte string of each token id;
// an empty piece marks a token that constrained output never uses
// (control, unknown and unused tokens).
func NewVocab(pieces []string) *Vocab {
	v := &Vocab{size: len(pieces), pieces: pieces, dups: map[int32][]int32{}}
	order := make([]int32, 0, len(pieces))
	for id, p := range pieces {
		if p != "" && len(p) < maxPiece {
			order = append(order, int32(id))
			v.depth = max(v.depth, len(p))
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := strings.Compare(pieces[a], pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	// node adds the node of order[lo:hi], which share a prefix of length
	// depth, then its children.
	var node func(lo, hi, depth int, label byte)
	node = func(lo, hi, depth int, label byte) {
		n := len(v.nodes)
		v.nodes = append(v.nodes, trieNode{label: label, depth: uint16(depth), tok: -1})
		for lo < hi && len(pieces[order[lo]]) == depth {
			if v.nodes[n].tok < 0 {
				v.nodes[n].tok = order[lo]
			} else {
				v.dups[int32(n)] = append(v.dups[int32(n)], order[lo])
			}
			lo++
		}
		for lo < hi {
			c := pieces[order[lo]][depth]
			k := lo
			for k < hi && pieces[order[k]][depth] == c {
				k++
			}
			node(lo, k, depth+1, c)
			lo = k
		}
		v.nodes[n].end = int32(len(v.nodes))
	}
	node(0, len(order), 0, 0)
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

// fill walks the trie in preorder from state st, skipping the subtree of
// every dead prefix, and marks the tokens it reaches.
func (g *Grammar) fill(v *Vocab, st int32, mask []uint64) int {
	states := make([]int32, v.depth+2) // states[d]: the state at the current node's parent of depth d
	states[0] = st
	count := 0
	nodes := v.nodes
	for i := int32(1); i < int32(len(nodes)); {
		n := &nodes[i]
		from := states[n.depth-1]
		ns := g.trans[int(from)<<8|int(n.label)] - 1
		if ns < 0 {
			ns = g.compute(from, n.label)
		}
		if ns == 0 {
			i = n.end
			continue
		}
		states[n.depth] = ns
		if id := n.tok; id >= 0 {
			mask[id>>6] |= 1 << (id & 63)
			count++
			if more, ok := v.dups[i]; ok {
				for _, id := range more {
					mask[id>>6] |= 1 << (id & 63)
				}
				count += len(more)
			}
		}
		i++
	}
	return count
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
