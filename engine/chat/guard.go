package chat

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Before a template is compiled it is rewritten (see rewrite): its
// whitespace control is done here, as Jinja2 does it, and it is checked and
// guarded against the engine's recursion.
//
// Whitespace: ardanlabs/jinja v1.8.0 applies a tag's trim marks and
// trim_blocks / lstrip_blocks to the nearest text past any tags between,
// where Jinja2 touches only the text right beside the tag: so
// "{% for i in x %}{{ i }}\n{% endfor %}" loses its newlines, and
// "{{ 'q' }}   {% if %}" its spaces. It also keeps a template's final
// newline, which Jinja2 drops, and it ends a tag at the first "}}" even
// inside brackets. So the rewrite applies Jinja2's rules itself (with
// Hugging Face's trim_blocks and lstrip_blocks, the "+" marks that turn
// them off, raw blocks, white space as Python's str.isspace has it, and
// Jinja2's newline normalization; testdata/whitespace.json holds Jinja2's
// renderings of the cases) and writes every piece of text as a string
// literal in a {{ }} tag, and every tag without its marks and with its
// closing braces apart: the engine then has no text to trim.
//
// Recursion: the engine parses and evaluates by recursion, and a Go stack
// overflow kills the process (recover cannot catch it). So a template with
// blocks or brackets nested deeper than maxNesting, a tag larger than
// maxTagSize or a source larger than maxSourceSize is refused, and each
// macro body starts and ends with a call that counts the macros in
// progress, which stops a runaway recursion with an error.
const (
	maxSourceSize = 4 << 20 // bytes of template source
	maxTagSize    = 64 << 10
	maxNesting    = 64  // open blocks, or open brackets within a tag
	maxMacroDepth = 256 // macro calls in progress at once
)

// Names of the guard's callables; a template is not expected to use them.
const (
	guardEnter = "__kvscope_macro_enter"
	guardLeave = "__kvscope_macro_leave"
)

// blockOpeners are the statements that open a block an end tag closes.
var blockOpeners = map[string]bool{"if": true, "for": true, "macro": true, "call": true, "filter": true, "generation": true}

// endRaw finds the tag that ends a raw block.
var endRaw = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%\}`)

// piece is a run of text or a tag of a template's source.
type piece struct {
	start, end int    // source[start:end] is the whole piece
	kind       byte   // 0 for text, '{', '%' or '#' for a tag
	text       string // a text's text, a tag's content between marks
	// The marks: "-" (trim all white space on that side), "+" (no
	// lstrip_blocks / trim_blocks on that side) or "".
	left, right string
}

// block reports whether p is a tag that trim_blocks and lstrip_blocks
// apply to: a statement or a comment.
func (p *piece) block() bool { return p.kind == '%' || p.kind == '#' }

// scan cuts src into text and tags as Jinja2's lexer does: quotes and
// open brackets inside {{ }} and {% %} hide closers (so "{{ {'a': {'b':
// 1}} }}" is one tag), comments end at the first #}, and a raw block's body
// is text up to its endraw tag.
func scan(src string) ([]piece, error) {
	var out []piece
	text := 0 // start of the current text
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		if i > text {
			out = append(out, piece{start: text, end: i, text: src[text:i]})
		}
		t, err := scanTag(src, i)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		i, text = t.end, t.end
		if t.kind == '%' && keyword(t.text) == "raw" {
			m := endRaw.FindStringSubmatchIndex(src[i:])
			if m == nil {
				return nil, fmt.Errorf("chat template does not compile: unclosed raw block at byte %d", t.start)
			}
			if m[0] > 0 {
				out = append(out, piece{start: i, end: i + m[0], text: src[i : i+m[0]]})
			}
			out = append(out, piece{start: i + m[0], end: i + m[1], kind: '%', text: "endraw", left: src[i+m[2] : i+m[3]], right: src[i+m[4] : i+m[5]]})
			i, text = i+m[1], i+m[1]
		}
	}
	if text < len(src) {
		out = append(out, piece{start: text, end: len(src), text: src[text:]})
	}
	return out, nil
}

// scanTag reads the tag that starts at src[i].
func scanTag(src string, i int) (piece, error) {
	t := piece{start: i, kind: src[i+1]}
	closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[t.kind]
	j := i + 2
	if j < len(src) && (src[j] == '-' || src[j] == '+') {
		t.left = src[j : j+1]
		j++
	}
	cstart := j
	depth := 0 // open brackets: Jinja2 ends a tag only outside them
	for j < len(src) {
		c := src[j]
		if t.kind != '#' {
			switch c {
			case '\'', '"':
				for j++; j < len(src) && src[j] != c; j++ {
					if src[j] == '\\' {
						j++
					}
				}
				j++
				continue
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				if depth > 0 {
					depth--
					j++
					continue
				}
			}
			if depth > 0 {
				j++
				continue
			}
		}
		if (c == '-' || c == '+') && strings.HasPrefix(src[j+1:], closer) {
			t.right, t.text, t.end = src[j:j+1], src[cstart:j], j+3
			break
		}
		if strings.HasPrefix(src[j:], closer) {
			t.text, t.end = src[cstart:j], j+2
			break
		}
		j++
	}
	if t.end == 0 {
		return t, fmt.Errorf("chat template does not compile: unclosed tag at byte %d", i)
	}
	if len(t.text) > maxTagSize {
		return t, fmt.Errorf("chat template refused: a tag of %d bytes at byte %d (at most %d)", len(t.text), i, maxTagSize)
	}
	return t, nil
}

// keyword is a statement's first word.
func keyword(content string) string {
	s := strings.TrimSpace(content)
	if k := strings.IndexFunc(s, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') }); k >= 0 {
		s = s[:k]
	}
	return s
}

// normalizeNewlines does what Jinja2's lexer does first: every line end
// becomes "\n", and one final newline is dropped (keep_trailing_newline is
// off, as Hugging Face leaves it).
func normalizeNewlines(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	return strings.TrimSuffix(src, "\n")
}

// rewrite returns src rewritten for the engine (see the comment at the top
// of this file) or an error saying why it is refused.
func rewrite(src string) (string, error) {
	if len(src) > maxSourceSize {
		return "", fmt.Errorf("chat template refused: %d bytes (at most %d)", len(src), maxSourceSize)
	}
	src = normalizeNewlines(src)
	pieces, err := scan(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	depth := 0
	lineStart := true // the last tag's end took a newline (or none came yet)
	for i := range pieces {
		p := &pieces[i]
		if p.kind == 0 {
			text := p.text
			var prev, next *piece
			if i > 0 {
				prev = &pieces[i-1]
			}
			if i+1 < len(pieces) {
				next = &pieces[i+1]
			}
			text = trimText(text, prev, next, lineStart)
			if text != "" {
				b.WriteString(`{{ "`)
				b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(text))
				b.WriteString(`" }}`)
			}
			continue
		}
		// lineStart for the text after this tag: did the tag's end take a
		// newline?
		lineStart = false
		if i+1 < len(pieces) && pieces[i+1].kind == 0 {
			after := pieces[i+1].text
			switch {
			case p.right == "-":
				ws := after[:len(after)-len(strings.TrimLeftFunc(after, isSpace))]
				lineStart = strings.HasSuffix(ws, "\n")
			case p.block() && p.right != "+" && !isRaw(p):
				lineStart = strings.HasPrefix(after, "\n")
			}
		}
		if p.kind == '#' {
			continue
		}
		kw := ""
		if p.kind == '%' {
			kw = keyword(p.text)
		}
		if kw == "raw" || kw == "endraw" {
			continue // the body is text, written as a literal
		}
		if n := bracketDepth(p.text); n > maxNesting {
			return "", fmt.Errorf("chat template refused: brackets nested %d deep at byte %d (at most %d)", n, p.start, maxNesting)
		}
		switch {
		case blockOpeners[kw] || (kw == "set" && !strings.Contains(p.text, "=")):
			depth++
			if depth > maxNesting {
				return "", fmt.Errorf("chat template refused: blocks nested more than %d deep at byte %d", maxNesting, p.start)
			}
		case strings.HasPrefix(kw, "end"):
			depth--
		}
		if kw == "endmacro" {
			b.WriteString("{{ " + guardLeave + "() }}")
		}
		b.WriteString(map[byte]string{'{': "{{", '%': "{%"}[p.kind])
		b.WriteString(splitBraces(p.text))
		b.WriteString(map[byte]string{'{': "}}", '%': "%}"}[p.kind])
		if kw == "macro" {
			b.WriteString("{{ " + guardEnter + "() }}")
		}
	}
	return b.String(), nil
}

// isRaw reports whether p is a {% raw %} tag, after which Jinja2 applies
// no trim_blocks.
func isRaw(p *piece) bool { return p.kind == '%' && keyword(p.text) == "raw" }

// trimText applies Jinja2's whitespace control to a text between the tags
// prev and next (nil at the template's ends). lineStart says whether the
// text starts a line for lstrip_blocks: it is the template's first, or
// prev's end took a newline.
func trimText(text string, prev, next *piece, lineStart bool) string {
	if prev == nil {
		lineStart = true
	}
	if prev != nil {
		switch {
		case prev.right == "-":
			text = strings.TrimLeftFunc(text, isSpace)
		case prev.block() && prev.right != "+" && !isRaw(prev):
			text = strings.TrimPrefix(text, "\n")
		}
	}
	if next != nil {
		switch {
		case next.left == "-":
			text = strings.TrimRightFunc(text, isSpace)
		case next.block() && next.left != "+":
			// lstrip_blocks: white space from the start of the line to
			// the tag goes (Jinja2 3.1.6 strips all of \s; some older
			// versions only spaces and tabs).
			l := strings.LastIndexByte(text, '\n') + 1
			if (l > 0 || lineStart) && strings.TrimLeftFunc(text[l:], isSpace) == "" {
				text = text[:l]
			}
		}
	}
	return text
}

// splitBraces puts a space after a closing brace outside quotes that is
// followed by another or ends s ("{'a': {'b': 1}}" becomes "{'a': {'b':
// 1} } "), which means the same in an expression: the engine would take
// the first "}}" for the tag's end.
func splitBraces(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		b.WriteByte(c)
		switch {
		case c == '\'' || c == '"':
			for i++; i < len(s); i++ {
				b.WriteByte(s[i])
				if s[i] == '\\' && i+1 < len(s) {
					i++
					b.WriteByte(s[i])
				} else if s[i] == c {
					break
				}
			}
		case c == '}' && (i+1 == len(s) || s[i+1] == '}'):
			b.WriteByte(' ') // also before the closer written after s
		}
	}
	return b.String()
}

// isSpace reports whether r is white space as Python's str.isspace (and
// the \s of its re module) has it: Go's unicode.IsSpace and the
// separators U+001C to U+001F.
func isSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// bracketDepth is the deepest nesting of (), [] and {} in a tag's content,
// outside quotes.
func bracketDepth(s string) int {
	depth, most := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '(', '[', '{':
			depth++
			most = max(most, depth)
		case ')', ']', '}':
			depth--
		}
	}
	return most
}
