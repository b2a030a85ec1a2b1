package kvevents

import (
	"encoding/hex"
	"strconv"
)

// Hash is a block hash as vLLM publishes it: an integer (by default the low
// 64 bits of vLLM's hash) or a byte string. The zero Hash means "none" (a
// BlockStored with no parent). Hash is comparable and usable as a map key.
type Hash struct {
	n    uint64
	b    string
	kind uint8 // 0 none, 1 int, 2 bytes
}

// IntHash returns the integer hash n. A negative Python int (as early vLLM
// releases sent from hash()) is kept as its two's-complement 64 bits.
func IntHash(n uint64) Hash { return Hash{n: n, kind: 1} }

// BytesHash returns the byte-string hash b.
func BytesHash(b []byte) Hash { return Hash{b: string(b), kind: 2} }

// IsZero reports whether h is the zero Hash (no hash).
func (h Hash) IsZero() bool { return h.kind == 0 }

// IsBytes reports whether h was sent as a byte string.
func (h Hash) IsBytes() bool { return h.kind == 2 }

// Uint64 returns an integer hash's value and true, or 0 and false.
func (h Hash) Uint64() (uint64, bool) { return h.n, h.kind == 1 }

// Bytes returns a byte-string hash's bytes, or nil.
func (h Hash) Bytes() []byte {
	if h.kind != 2 {
		return nil
	}
	return []byte(h.b)
}

// String returns an integer hash in decimal (as Python prints it) and a
// byte-string hash in hex; the zero Hash is "none".
func (h Hash) String() string {
	switch h.kind {
	case 1:
		return strconv.FormatUint(h.n, 10)
	case 2:
		return hex.EncodeToString([]byte(h.b))
	}
	return "none"
}

// Short returns a short label for h: the last 8 hex digits of either form.
func (h Hash) Short() string {
	var s string
	switch h.kind {
	case 1:
		s = strconv.FormatUint(h.n, 16)
	case 2:
		s = hex.EncodeToString([]byte(h.b))
	default:
		return "none"
	}
	if len(s) > 8 {
		s = s[len(s)-8:]
	}
	return s
}
