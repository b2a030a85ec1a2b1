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
	// is the root, node i's subtree is i .. end[i]-1, its edge byte is
	// label[i], and the tokens whose bytes end there are
	// ids[tokLo[i]:tokLo[i+1]].
	label []byte
	end   []int32
	tokLo []int32
	ids   []int32
	depth int // the longest piece
}

// NewVocab builds the trie of pieces, the byte string of each token id;
// an empty piece marks a token that constrained output never uses
// (control, unknown and unused tokens).
func NewVocab(pieces []string) *Vocab {
	v := &Vocab{size: len(pieces), pieces: pieces}
	order := make([]int32, 0, len(pieces))
	for id, p := range pieces {
		if p != "" {
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
		n := len(v.label)
		v.label = append(v.label, label)
		v.end = append(v.end, 0)
		v.tokLo = append(v.tokLo, int32(len(v.ids)))
		for lo < hi && len(pieces[order[lo]]) == depth {
			v.ids = append(v.ids, order[lo])
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
		v.end[n] = int32(len(v.label))
	}
	node(0, len(order), 0, 0)
	v.tokLo = append(v.tokLo, int32(len(v.ids)))
	return v
}

// Size is the number of token ids, usable or not.
func (v *Vocab) Size() int { return v.size }

// Nodes is the number of trie nodes.
func (v *Vocab) Nodes() int { return len(v.label) }

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
	type frame struct{ end, st int32 }
	stack := make([]frame, 1, v.depth+1)
	stack[0] = frame{v.end[0], st}
	count := 0
	label, end, tokLo, ids := v.label, v.end, v.tokLo, v.ids
	for i := int32(1); i < int32(len(label)); {
		for i >= stack[len(stack)-1].end {
			stack = stack[:len(stack)-1]
		}
		ns := g.step(stack[len(stack)-1].st, label[i])
		if ns == 0 {
			i = end[i]
			continue
		}
		for _, id := range ids[tokLo[i]:tokLo[i+1]] {
			mask[id>>6] |= 1 << (id & 63)
			count++
		}
		if end[i] > i+1 {
			stack = append(stack, frame{end[i], ns})
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
