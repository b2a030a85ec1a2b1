package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// BlockHash identifies the contents of a full block: the first 128 bits of
// SHA-256 over the parent block's hash followed by the block's token ids
// (little-endian uint32 each). The first block of a sequence uses the zero
// hash as its parent, so a hash names a whole prefix, not only one block.
//
// Collisions: 128 bits make an accidental collision practically impossible,
// and SHA-256 makes a crafted one infeasible. The pool still keeps each
// cached block's parent hash and token ids and compares them on every hit,
// so a collision can only cost a cache miss (counted in
// Metrics.HashCollisions), never a wrong reuse.
type BlockHash [16]byte

// String returns the hash as 32 hex digits.
func (h BlockHash) String() string { return hex.EncodeToString(h[:]) }

// HashBlock returns the hash of a full block with the given parent hash and
// token ids.
func HashBlock(parent BlockHash, tokens []int32) BlockHash {
	d := sha256.New()
	d.Write(parent[:])
	var buf [4 * 64]byte
	for len(tokens) > 0 {
		n := min(len(tokens), 64)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
		}
		d.Write(buf[:4*n])
		tokens = tokens[n:]
	}
	var sum [sha256.Size]byte
	var h BlockHash
	copy(h[:], d.Sum(sum[:0]))
	return h
}
