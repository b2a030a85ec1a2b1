package chat

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Markers: markOpen or markClose followed by one code point of plane 15's
// private use area holding the message's index.
const (
	markOpen      = '\uE000'
	markClose     = '\uE001'
	markIndexBase = 0xF0000
	markerIndexes = 0xFFFFE - markIndexBase
)

// isMarkerRune reports whether r is one of the runes markers are made of.
func isMarkerRune(r rune) bool {
	return r == markOpen || r == markClose || (r >= markIndexBase && r < markIndexBase+markerIndexes)
}

// core splits s into its leading white space, the rest up to its trailing
// white space, and that trailing white space.
func core(s string) (lead, mid, trail string) {
	mid = strings.TrimLeftFunc(s, unicode.IsSpace)
	lead = s[:len(s)-len(mid)]
	mid = strings.TrimRightFunc(mid, unicode.IsSpace)
	trail = s[len(lead)+len(mid):]
	return lead, mid, trail
}

// segments renders msgs with marked contents and splits the result into
// template and message text. It reports false when that cannot be done
// exactly: a content holds marker runes, or the marked rendering without its
// markers differs from plain (the template looked into the content).
func (f *Formatter) segments(msgs []Message, opt Options, plain string) ([]owned, bool) {
	contents := make([]string, len(msgs))
	cores := make([]string, len(msgs))
	anyMarked := false
	for i, m := range msgs {
		if strings.IndexFunc(m.Content, isMarkerRune) >= 0 {
			return nil, false
		}
		lead, mid, trail := core(m.Content)
		cores[i] = mid
		if mid == "" {
			contents[i] = m.Content
			continue
		}
		idx := string(rune(markIndexBase + i))
		contents[i] = lead + string(markOpen) + idx + mid + string(markClose) + idx + trail
		anyMarked = true
	}
	if !anyMarked {
		if plain == "" {
			return nil, true
		}
		return []owned{{Segment{Text: plain, Special: true}, -1, false}}, true
	}
	marked, err := f.render(msgs, opt, contents)
	if err != nil {
		return nil, false
	}
	segs := splitMarked(marked, cores, f.literals)
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	if b.String() != plain {
		return nil, false
	}
	return segs, true
}

// splitMarked splits a marked rendering into segments. Text between the
// open and close markers of message i is message text. A close marker
// without its open marker (the template kept the end of the content) makes
// message text of the longest end of the text before it that ends cores[i];
// an open marker without its close marker, of the longest start of the text
// after it that starts cores[i]. That match may run on into template text
// that happens to equal the content's text beside the part kept (">" of
// "</think>" before the answer): so where the content has one of the
// template's string literals (the separator it split on, most likely) at
// the edge of a shorter match, the longest such match is taken instead.
// Marker runes that form no marker are dropped. Each owned of message
// text says whose it is, and whether it is the whole of the content's core
// (both markers were found).
func splitMarked(s string, cores, literals []string) []owned {
	var segs []owned
	add := func(text string, special bool, msg int, whole bool) {
		if text == "" {
			return
		}
		if special {
			msg = -1
		}
		if n := len(segs); n > 0 && segs[n-1].Special == special && segs[n-1].msg == msg && !whole && !segs[n-1].whole {
			segs[n-1].Text += text
			return
		}
		segs = append(segs, owned{Segment{Text: text, Special: special}, msg, whole})
	}
	var buf strings.Builder
	open := -1 // the message whose content is being read, -1 for none
	// closeOpen ends an open marker whose close marker did not come: the
	// start of buf that starts the content is message text.
	closeOpen := func() {
		t := buf.String()
		n := keptPrefix(t, cores[open], literals)
		add(t[:n], false, open, false)
		add(t[n:], true, -1, false)
		buf.Reset()
		open = -1
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isMarkerRune(r) {
			buf.WriteString(s[i : i+size])
			i += size
			continue
		}
		i += size
		if r != markOpen && r != markClose {
			continue // a lone index rune
		}
		idx, isize := utf8.DecodeRuneInString(s[i:])
		if idx < markIndexBase || idx >= markIndexBase+markerIndexes || int(idx-markIndexBase) >= len(cores) {
			continue // a lone open or close rune
		}
		i += isize
		m := int(idx - markIndexBase)
		switch {
		case r == markOpen:
			if open >= 0 {
				closeOpen()
			}
			add(buf.String(), true, -1, false)
			buf.Reset()
			open = m
		case open == m:
			add(buf.String(), false, m, buf.String() == cores[m])
			buf.Reset()
			open = -1
		default: // a close marker without its open marker
			if open >= 0 {
				closeOpen()
			}
			t := buf.String()
			n := keptSuffix(t, cores[m], literals)
			add(t[:len(t)-n], true, -1, false)
			add(t[len(t)-n:], false, m, false)
			buf.Reset()
		}
	}
	if open >= 0 {
		closeOpen()
	}
	add(buf.String(), true, -1, false)
	return segs
}

// owned is a Segment with its owner: msg is the index of the message whose
// text it is (-1 for template text), and whole says it is all of that
// message's content between its leading and trailing white space.
type owned struct {
	Segment
	msg   int
	whole bool
}

// join merges adjacent pieces of the same kind into Segments.
func join(ps []owned) []Segment {
	var segs []Segment
	for _, p := range ps {
		if n := len(segs); n > 0 && segs[n-1].Special == p.Special {
			segs[n-1].Text += p.Text
			continue
		}
		segs = append(segs, p.Segment)
	}
	return segs
}

// commonPrefix is the length of the longest common start of a and b, in
// whole runes.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) {
		r, size := utf8.DecodeRuneInString(a[n:])
		r2, size2 := utf8.DecodeRuneInString(b[n:])
		if r != r2 || size != size2 {
			break
		}
		n += size
	}
	return n
}

// commonSuffix is the length of the longest common end of a and b, in
// whole runes.
func commonSuffix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) {
		r, size := utf8.DecodeLastRuneInString(a[:len(a)-n])
		r2, size2 := utf8.DecodeLastRuneInString(b[:len(b)-n])
		if r != r2 || size != size2 {
			break
		}
		n += size
	}
	return n
}

// keptSuffix is the length of the end of t that is the end of core that a
// template kept (see splitMarked).
func keptSuffix(t, core string, literals []string) int {
	n := commonSuffix(t, core)
	for k := n; k > 0; k-- {
		if !utf8.RuneStart(core[len(core)-k]) {
			continue
		}
		for _, l := range literals {
			if strings.HasSuffix(core[:len(core)-k], l) {
				return k
			}
		}
	}
	return n
}

// keptPrefix is the length of the start of t that is the start of core
// that a template kept (see splitMarked).
func keptPrefix(t, core string, literals []string) int {
	n := commonPrefix(t, core)
	for k := n; k > 0; k-- {
		if k < len(core) && !utf8.RuneStart(core[k]) {
			continue
		}
		for _, l := range literals {
			if strings.HasPrefix(core[k:], l) {
				return k
			}
		}
	}
	return n
}

// stringLiterals returns the non-empty quoted strings of a template's
// source, with the escapes \n, \t, \r and those of a quote or a
// backslash undone.
func stringLiterals(src string) []string {
	var out []string
	seen := map[string]bool{}
	for i := 0; i < len(src); i++ {
		q := src[i]
		if q != '\'' && q != '"' {
			continue
		}
		var b strings.Builder
		j := i + 1
		for ; j < len(src) && src[j] != q; j++ {
			c := src[j]
			if c == '\\' && j+1 < len(src) {
				j++
				switch src[j] {
				case 'n':
					c = '\n'
				case 't':
					c = '\t'
				case 'r':
					c = '\r'
				default:
					c = src[j]
				}
			}
			b.WriteByte(c)
		}
		if j == len(src) {
			break
		}
		if l := b.String(); l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
		i = j
	}
	return out
}
