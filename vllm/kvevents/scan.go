package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxDepth is the deepest nesting of msgpack containers a payload may have.
// vLLM's batches are 4 deep (extra_keys reach 5 or 6); the limit keeps a
// hostile payload from recursing the decoder's stack away.
const MaxDepth = 32

var errTruncated = errors.New("truncated msgpack")

// scan checks that p holds exactly one well-formed msgpack value, no deeper
// than MaxDepth, whose declared lengths fit in p. It walks iteratively, so
// it never recurses and never allocates more than the depth stack; after it
// passes, the real decoder cannot be made to over-allocate or overflow.
func scan(p []byte) error {
	var stack []uint64 // items still due at each enclosing level
	need := uint64(1)  // items still due at this level
	i := 0
	rest := func() uint64 { return uint64(len(p) - i) }
	for {
		for need == 0 {
			if len(stack) == 0 {
				if i != len(p) {
					return fmt.Errorf("%d trailing bytes after the msgpack value", len(p)-i)
				}
				return nil
			}
			need = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if i >= len(p) {
			return errTruncated
		}
		c := p[i]
		i++
		need--
		var skip, items uint64
		container := false
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			items, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			// Codes with a big-endian length or fixed size.
			lenBytes := 0
			switch c {
			case 0xc4, 0xd9: // bin8, str8
				lenBytes = 1
			case 0xc5, 0xda:
				lenBytes = 2
			case 0xc6, 0xdb:
				lenBytes = 4
			case 0xc7: // ext8: len, type
				lenBytes, skip = 1, 1
			case 0xc8:
				lenBytes, skip = 2, 1
			case 0xc9:
				lenBytes, skip = 4, 1
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 + type
				skip = 1 + 1<<(c-0xd4)
			case 0xdc, 0xde:
				lenBytes, container = 2, true
			case 0xdd, 0xdf:
				lenBytes, container = 4, true
			default: // 0xc1, never used
				return fmt.Errorf("invalid msgpack code 0x%02x at byte %d", c, i-1)
			}
			if lenBytes > 0 {
				if rest() < uint64(lenBytes) {
					return errTruncated
				}
				var n uint64
				switch lenBytes {
				case 1:
					n = uint64(p[i])
				case 2:
					n = uint64(binary.BigEndian.Uint16(p[i:]))
				case 4:
					n = uint64(binary.BigEndian.Uint32(p[i:]))
				}
				i += lenBytes
				if container {
					items = n
					if c == 0xde || c == 0xdf {
						items = 2 * n
					}
				} else {
					skip += n
				}
			}
		}
		if container {
			// Every item takes at least one byte.
			if items > rest() {
				return errTruncated
			}
			if items > 0 {
				if len(stack) >= MaxDepth {
					return fmt.Errorf("msgpack nested deeper than %d", MaxDepth)
				}
				stack = append(stack, need)
				need = items
			}
			continue
		}
		if skip > rest() {
			return errTruncated
		}
		i += int(skip)
	}
}
