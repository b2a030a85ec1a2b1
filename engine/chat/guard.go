package chat

import (
	"fmt"
	"strings"
)

// Limits on a template's shape. The Jinja engine parses and evaluates by
// recursion, and a Go stack overflow is fatal, not a panic that recover
// catches: so a template that would nest deeper is refused before it is
// compiled, and macros are made to count their calls.
const (
	maxSourceSize = 4 << 20 // bytes of template source
	maxTagSize    = 64 << 10
	maxNesting    = 64  // open blocks, or open brackets within a tag
	maxMacroDepth = 256 // macro calls in progress at once
)

// Names of the guard's callables and variable; a template is not expected
// to use them.
const (
	guardEnter = "__kvscope_macro_enter"
	guardLeave = "__kvscope_macro_leave"
)

// blockOpeners are the statements that open a block an end tag closes.
var blockOpeners = map[string]bool{"if": true, "for": true, "macro": true, "call": true, "filter": true, "generation": true}

// tag is one {{ }}, {% %} or {# #} of a template's source.
type tag struct {
	start, end          int // source[start:end] is the whole tag
	kind                byte
	trimLeft, trimRight bool
	content             string // between the delimiters and trim marks
}

// scanTags finds the tags of src as the engine's scanner does: quotes
// inside {{ }} and {% %} hide closers, comments end at the first #}.
func scanTags(src string) ([]tag, error) {
	var tags []tag
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		t := tag{start: i, kind: src[i+1]}
		closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[t.kind]
		j := i + 2
		if j < len(src) && src[j] == '-' {
			t.trimLeft = true
			j++
		}
		cstart := j
		found := false
		for j < len(src) {
			c := src[j]
			if t.kind != '#' && (c == '\'' || c == '"') {
				j++
				for j < len(src) && src[j] != c {
					if src[j] == '\\' {
						j++
					}
					j++
				}
				j++
				continue
			}
			if c == '-' && strings.HasPrefix(src[j+1:], closer) {
				t.trimRight, t.content, t.end = true, src[cstart:j], j+3
				found = true
				break
			}
			if strings.HasPrefix(src[j:], closer) {
				t.content, t.end = src[cstart:j], j+2
				found = true
				break
			}
			j++
		}
		if !found {
			return nil, fmt.Errorf("chat template does not compile: unclosed tag at byte %d", i)
		}
		if len(t.content) > maxTagSize {
			return nil, fmt.Errorf("chat template refused: a tag of %d bytes at byte %d (at most %d)", len(t.content), i, maxTagSize)
		}
		tags = append(tags, t)
		i = t.end
	}
	return tags, nil
}

// keyword is a statement's first word.
func keyword(content string) string {
	s := strings.TrimSpace(content)
	if k := strings.IndexFunc(s, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') }); k >= 0 {
		s = s[:k]
	}
	return s
}

// guard checks src's size and nesting and returns it with every macro
// body wrapped in calls that count the macros in progress: {{ }} tags,
// printing nothing, right after {% macro %} and right before
// {% endmacro %}. The engine applies a tag's trim marks and trim_blocks /
// lstrip_blocks to the nearest text, past any tags between, and never to
// text beside a {{ }} tag without trim marks, so the rendering is
// unchanged (a test checks it on every real template).
func guard(src string) (string, error) {
	if len(src) > maxSourceSize {
		return "", fmt.Errorf("chat template refused: %d bytes (at most %d)", len(src), maxSourceSize)
	}
	tags, err := scanTags(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	last, depth, raw := 0, 0, false
	for _, t := range tags {
		if t.kind == '#' {
			continue
		}
		kw := ""
		if t.kind == '%' {
			kw = keyword(t.content)
		}
		if raw {
			raw = kw != "endraw"
			continue
		}
		if kw == "raw" {
			raw = true
			continue
		}
		if n := bracketDepth(t.content); n > maxNesting {
			return "", fmt.Errorf("chat template refused: brackets nested %d deep at byte %d (at most %d)", n, t.start, maxNesting)
		}
		switch {
		case blockOpeners[kw] || (kw == "set" && !strings.Contains(t.content, "=")):
			depth++
			if depth > maxNesting {
				return "", fmt.Errorf("chat template refused: blocks nested more than %d deep at byte %d", maxNesting, t.start)
			}
		case strings.HasPrefix(kw, "end"):
			depth--
		}
		switch kw {
		case "macro":
			b.WriteString(src[last:t.end])
			b.WriteString("{{ " + guardEnter + "() }}")
			last = t.end
		case "endmacro":
			b.WriteString(src[last:t.start])
			b.WriteString("{{ " + guardLeave + "() }}")
			last = t.start
		}
	}
	b.WriteString(src[last:])
	return b.String(), nil
}

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
