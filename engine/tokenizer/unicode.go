package tokenizer

import "unicode"

// Code point classes as llama.cpp's unicode tables define them: one general
// category per code point plus the White_Space property. llama.cpp builds
// its tables from UnicodeData.txt; we use Go's unicode package, which holds
// the same categories (differences can only appear for code points assigned
// in a Unicode version newer than one of the two).
const (
	flagUndefined   uint16 = 0x0001 // Cn, or outside Unicode
	flagNumber      uint16 = 0x0002 // \p{N}
	flagLetter      uint16 = 0x0004 // \p{L}
	flagSeparator   uint16 = 0x0008 // \p{Z}
	flagMark        uint16 = 0x0010 // \p{M}
	flagPunctuation uint16 = 0x0020 // \p{P}
	flagSymbol      uint16 = 0x0040 // \p{S}
	flagControl     uint16 = 0x0080 // \p{C}: Cc, Cf, Co, Cs
	flagWhitespace  uint16 = 0x0100 // White_Space property
)

// asciiFlags caches the flags of the first 128 code points.
var asciiFlags = func() (t [128]uint16) {
	for r := range t {
		t[r] = computeFlags(rune(r))
	}
	return t
}()

func computeFlags(r rune) uint16 {
	var f uint16
	switch {
	case r < 0 || r > unicode.MaxRune:
		return flagUndefined
	case unicode.IsLetter(r):
		f = flagLetter
	case unicode.IsNumber(r):
		f = flagNumber
	case unicode.IsMark(r):
		f = flagMark
	case unicode.IsPunct(r):
		f = flagPunctuation
	case unicode.IsSymbol(r):
		f = flagSymbol
	case unicode.Is(unicode.Z, r):
		f = flagSeparator
	case unicode.Is(unicode.C, r):
		f = flagControl
	default:
		f = flagUndefined
	}
	if unicode.Is(unicode.White_Space, r) {
		f |= flagWhitespace
	}
	return f
}

// cptFlags returns the flags of code point r.
func cptFlags(r rune) uint16 {
	if r >= 0 && r < 128 {
		return asciiFlags[r]
	}
	return computeFlags(r)
}

// decodeCodepoints splits s into code points the way llama.cpp's
// unicode_cpts_from_utf8 does: the lead byte decides the length, only the
// continuation bytes are checked (so surrogates and overlong forms pass), and
// a byte that cannot start a valid sequence becomes U+FFFD. Values above
// U+10FFFF, which llama.cpp could not encode again, also become U+FFFD.
func decodeCodepoints(s string) []rune {
	out := make([]rune, 0, len(s))
	cont := func(i int) bool { return i < len(s) && s[i]&0xC0 == 0x80 }
	for i := 0; i < len(s); {
		b := s[i]
		switch {
		case b&0x80 == 0:
			out = append(out, rune(b))
			i++
		case b&0x40 == 0:
			out = append(out, unicode.ReplacementChar)
			i++
		case b&0x20 == 0:
			if !cont(i + 1) {
				out = append(out, unicode.ReplacementChar)
				i++
				continue
			}
			out = append(out, rune(b&0x1F)<<6|rune(s[i+1]&0x3F))
			i += 2
		case b&0x10 == 0:
			if !cont(i+1) || !cont(i+2) {
				out = append(out, unicode.ReplacementChar)
				i++
				continue
			}
			out = append(out, rune(b&0x0F)<<12|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
			i += 3
		case b&0x08 == 0:
			if !cont(i+1) || !cont(i+2) || !cont(i+3) {
				out = append(out, unicode.ReplacementChar)
				i++
				continue
			}
			r := rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
			if r > unicode.MaxRune {
				r = unicode.ReplacementChar
			}
			out = append(out, r)
			i += 4
		default:
			out = append(out, unicode.ReplacementChar)
			i++
		}
	}
	return out
}

// appendCodepoint appends the UTF-8 form of r without Go's surrogate check,
// as llama.cpp's unicode_cpt_to_utf8 does, so that decodeCodepoints followed
// by appendCodepoint gives back the bytes it read.
func appendCodepoint(b []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(b, byte(r))
	case r < 0x800:
		return append(b, 0xC0|byte(r>>6), 0x80|byte(r&0x3F))
	case r < 0x10000:
		return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	default:
		return append(b, 0xF0|byte(r>>18), 0x80|byte(r>>12&0x3F), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	}
}

// utf8SeqLen is llama.cpp's unicode_len_utf8: the sequence length announced
// by a lead byte's high nibble (1 for continuation bytes).
func utf8SeqLen(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// GPT-2's byte-level alphabet: each byte maps to one printable code point.
// Printable Latin-1 bytes map to themselves; the other 68 bytes map, in
// order, to U+0100 and up.
var byteToUnicode, unicodeToByte = func() ([256]string, map[rune]byte) {
	var enc [256]string
	dec := make(map[rune]byte, 256)
	printable := func(b int) bool {
		return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		enc[b] = string(r)
		dec[r] = byte(b)
	}
	return enc, dec
}()
