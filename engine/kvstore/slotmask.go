package kvstore

import (
	"fmt"
	"math/bits"
)

// SlotMask records which slots of one layer's block hold an Int8 or Int4
// key, bit t for slot t (MaskWords words). A key group is quantized once
// every slot of it is written and holds an f16 residual until then, so the
// mask says which groups are full and which partly filled. Store keeps one
// per layer and block; a backend keeping keys in Store's layout in memory
// of its own (engine/backend/native's device caches) keeps its own, and
// checks saved ones as Load does.
type SlotMask []uint64

// MaskWords returns the words of a SlotMask of c's blocks.
func MaskWords(c Config) int { return (c.BlockSize + 63) / 64 }

// KeyGroupSpan returns the first slot and the number of slots of key group
// g of c's blocks (the last group may be shorter).
func (c Config) KeyGroupSpan(g int) (lo, n int) {
	lo = g * c.keyGroup()
	return lo, min(c.keyGroup(), c.BlockSize-lo)
}

// Set marks slot t written.
func (m SlotMask) Set(t int) { m[t/64] |= 1 << uint(t%64) }

// Full reports whether slots lo..lo+n-1 are all written.
func (m SlotMask) Full(lo, n int) bool {
	for i := lo; i < lo+n; {
		w, sh := i/64, uint(i%64)
		k := min(64-int(sh), lo+n-i) // bits to test in this word
		want := (^uint64(0) >> uint(64-k)) << sh
		if m[w]&want != want {
			return false
		}
		i += k
	}
	return true
}

// Partial reports whether some but not all of slots lo..lo+n-1 are
// written: the state of a key group that holds a residual.
func (m SlotMask) Partial(lo, n int) bool {
	for i := lo; i < lo+n; i++ {
		if m[i/64]&(1<<uint(i%64)) != 0 {
			return !m.Full(lo, n)
		}
	}
	return false
}

// CheckSaved checks layer l's saved mask of c's blocks: no slot past the
// block size is marked.
func (m SlotMask) CheckSaved(c Config, l int) error {
	B, w := c.BlockSize, len(m)
	if last := m[w-1]; B%64 != 0 && last>>uint(B%64) != 0 {
		return fmt.Errorf("layer %d's slot mask marks slot %d, past the block size %d", l, 64*(w-1)+63-bits.LeadingZeros64(last), B)
	}
	return nil
}

// CheckResidual checks the saved residual flag of layer l's key group g
// against the mask: 1 exactly when the group is partly filled, else 0.
func (m SlotMask) CheckResidual(c Config, l, g int, flag byte) error {
	need := m.Partial(c.KeyGroupSpan(g))
	switch {
	case flag > 1:
		return fmt.Errorf("layer %d key group %d has residual flag %d, want 0 or 1", l, g, flag)
	case need && flag == 0:
		return fmt.Errorf("layer %d key group %d is partly filled but its f16 residual is missing", l, g)
	case !need && flag == 1:
		return fmt.Errorf("layer %d key group %d has an f16 residual but is empty or full", l, g)
	}
	return nil
}
