package constrain

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Regex returns a Grammar matching exactly the strings that pattern (Go's
// RE2 syntax, as regexp/syntax parses it with Perl flags) matches as a
// whole. Anchors (^, $, \A, \z) are accepted and mean nothing more, since
// the whole output must match; word boundaries are refused.
func Regex(pattern string) (*Grammar, error) {
	b := newBuilder()
	r, err := b.regex(pattern, nil)
	if err != nil {
		return nil, err
	}
	return checked(b.freeze(r), fmt.Sprintf("regular expression %q", pattern))
}

// regex adds a rule for pattern. When keep is not nil, every character
// class is cut to the bytes keep allows (JSON strings leave out the quote,
// the backslash and control characters).
func (b *builder) regex(pattern string, keep func(lo, hi rune) [][2]rune) (int, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("regular expression %q: %w", pattern, err)
	}
	re = re.Simplify()
	seqs, err := b.re(re, keep)
	if err != nil {
		return 0, fmt.Errorf("regular expression %q: %w", pattern, err)
	}
	return b.rule(seqs...)
}

// re returns the alternatives matching re.
func (b *builder) re(re *syntax.Regexp, keep func(lo, hi rune) [][2]rune) ([][]sym, error) {
	sub := func(x *syntax.Regexp) (int, error) {
		alts, err := b.re(x, keep)
		if err != nil {
			return 0, err
		}
		return b.rule(alts...)
	}
	switch re.Op {
	case syntax.OpNoMatch:
		return nil, nil
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return [][]sym{nil}, nil
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, fmt.Errorf("word boundaries (\\b, \\B) are not supported")
	case syntax.OpLiteral:
		var out []sym
		for _, r := range re.Rune {
			var ranges [][2]rune
			if re.Flags&syntax.FoldCase != 0 {
				for f := r; ; {
					ranges = append(ranges, [2]rune{f, f})
					if f = unicode.SimpleFold(f); f == r {
						break
					}
				}
			} else {
				ranges = [][2]rune{{r, r}}
			}
			cr, err := b.runeClass(ranges, keep)
			if err != nil {
				return nil, err
			}
			out = append(out, ruleRef(cr))
		}
		return [][]sym{out}, nil
	case syntax.OpCharClass:
		var ranges [][2]rune
		for i := 0; i+1 < len(re.Rune); i += 2 {
			ranges = append(ranges, [2]rune{re.Rune[i], re.Rune[i+1]})
		}
		cr, err := b.runeClass(ranges, keep)
		if err != nil {
			return nil, err
		}
		return [][]sym{ref(cr)}, nil
	case syntax.OpAnyCharNotNL:
		cr, err := b.runeClass([][2]rune{{0, '\n' - 1}, {'\n' + 1, unicode.MaxRune}}, keep)
		return [][]sym{ref(cr)}, err
	case syntax.OpAnyChar:
		cr, err := b.runeClass([][2]rune{{0, unicode.MaxRune}}, keep)
		return [][]sym{ref(cr)}, err
	case syntax.OpCapture:
		return b.re(re.Sub[0], keep)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		x, err := sub(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpQuest:
			return [][]sym{nil, ref(x)}, nil
		case syntax.OpStar:
			s, err := b.star(x)
			return [][]sym{ref(s)}, err
		}
		s, err := b.star(x)
		return [][]sym{seq(ref(x), ref(s))}, err
	case syntax.OpRepeat:
		x, err := sub(re.Sub[0])
		if err != nil {
			return nil, err
		}
		r, err := b.repeat(x, re.Min, re.Max)
		return [][]sym{ref(r)}, err
	case syntax.OpConcat:
		var out []sym
		for _, s := range re.Sub {
			r, err := sub(s)
			if err != nil {
				return nil, err
			}
			out = append(out, ruleRef(r))
		}
		return [][]sym{out}, nil
	case syntax.OpAlternate:
		var out [][]sym
		for _, s := range re.Sub {
			alts, err := b.re(s, keep)
			if err != nil {
				return nil, err
			}
			out = append(out, alts...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is not supported", re.Op)
}

// runeClass adds a rule matching one character in ranges, spelled in UTF-8.
func (b *builder) runeClass(ranges [][2]rune, keep func(lo, hi rune) [][2]rune) (int, error) {
	var alts [][]sym
	for _, r := range ranges {
		kept := [][2]rune{r}
		if keep != nil {
			kept = keep(r[0], r[1])
		}
		for _, k := range kept {
			for _, s := range utf8Ranges(k[0], k[1]) {
				var q []sym
				for _, br := range s {
					q = append(q, b.cls(byteRange(br[0], br[1])))
				}
				alts = append(alts, q)
			}
		}
	}
	return b.rule(alts...)
}

// utf8Ranges splits the code points lo..hi (surrogates left out) into
// sequences of byte ranges whose UTF-8 encodings match exactly those code
// points.
func utf8Ranges(lo, hi rune) [][][2]byte {
	var out [][][2]byte
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		if lo > hi {
			return
		}
		if lo < 0xD800 && hi > 0xDFFF {
			split(lo, 0xD7FF)
			split(0xE000, hi)
			return
		}
		if lo >= 0xD800 && hi <= 0xDFFF {
			return
		}
		lo, hi = skipSurrogates(lo, hi)
		if lo > hi {
			return
		}
		for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= m && hi > m {
				split(lo, m)
				split(m+1, hi)
				return
			}
		}
		n := utf8.RuneLen(lo)
		for i := 1; i < n; i++ {
			m := rune(1)<<(6*i) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, (hi&^m)-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		var a, z [4]byte
		utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(z[:], hi)
		s := make([][2]byte, n)
		for i := range n {
			s[i] = [2]byte{a[i], z[i]}
		}
		out = append(out, s)
	}
	split(lo, hi)
	return out
}

// skipSurrogates trims a range that starts or ends among the surrogates.
func skipSurrogates(lo, hi rune) (rune, rune) {
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	return lo, hi
}

// Choice returns a Grammar matching exactly one of options.
func Choice(options []string) (*Grammar, error) {
	if len(options) == 0 {
		return nil, fmt.Errorf("a choice needs at least one option")
	}
	b := newBuilder()
	alts := make([][]sym, len(options))
	for i, o := range options {
		alts[i] = b.lit(o)
	}
	r, err := b.rule(alts...)
	if err != nil {
		return nil, err
	}
	return b.freeze(r), nil
}
