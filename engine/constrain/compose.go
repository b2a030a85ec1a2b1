package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"unicode"
)

// A Part is a piece of a composed grammar (Compose): a literal, a JSON
// value of a schema, free text, or a sequence, choice or repetition of
// parts. Tool-call formats are built from these: a model's own markers
// around the JSON of each call.
type Part struct {
	build func(b *builder, c *composer) (int, error)
}

// composer holds what the parts of one grammar share.
type composer struct {
	j *jsonRules
}

// Literal is the part matching s exactly.
func Literal(s string) Part {
	return Part{func(b *builder, _ *composer) (int, error) { return b.litRule(s) }}
}

// JSONOf is the part matching a JSON value of schema (any JSON value for
// a nil schema). The schema is checked as Schema checks it.
func JSONOf(schema []byte) Part {
	return Part{func(b *builder, c *composer) (int, error) {
		if schema == nil {
			return c.j.value, nil
		}
		if err := checkSchema(schema); err != nil {
			return 0, err
		}
		d := json.NewDecoder(bytes.NewReader(schema))
		d.UseNumber()
		root, err := decodeOrdered(d)
		if err != nil {
			return 0, fmt.Errorf("json schema: %w", err)
		}
		if _, err := d.Token(); err != io.EOF {
			return 0, fmt.Errorf("json schema: text after the schema")
		}
		sc := &schemaCompiler{b: b, j: c.j, root: root, refs: map[string]int{}}
		r, err := sc.visit(root, "")
		if err != nil {
			return 0, fmt.Errorf("json schema: %w", err)
		}
		return r, nil
	}}
}

// Text is the part matching free text: any characters but NUL, none at
// all included, the first not one of the ASCII bytes in notFirst (so that
// text cannot start as another part of a choice does).
func Text(notFirst string) Part {
	return Part{func(b *builder, _ *composer) (int, error) {
		anyChar, err := b.runeClass([][2]rune{{1, unicode.MaxRune}}, nil)
		if err != nil {
			return 0, err
		}
		excluded := []byte(notFirst)
		slices.Sort(excluded)
		first, err := b.runeClass([][2]rune{{1, unicode.MaxRune}}, func(lo, hi rune) [][2]rune {
			var out [][2]rune
			for _, x := range excluded {
				if x := rune(x); x >= lo && x <= hi {
					if x > lo {
						out = append(out, [2]rune{lo, x - 1})
					}
					lo = x + 1
				}
			}
			if lo <= hi {
				out = append(out, [2]rune{lo, hi})
			}
			return out
		})
		if err != nil {
			return 0, err
		}
		rest, err := b.star(anyChar)
		if err != nil {
			return 0, err
		}
		return b.rule(nil, seq(ref(first), ref(rest)))
	}}
}

// Seq is the part matching its parts one after another.
func Seq(parts ...Part) Part {
	return Part{func(b *builder, c *composer) (int, error) {
		var body []sym
		for _, p := range parts {
			r, err := p.build(b, c)
			if err != nil {
				return 0, err
			}
			body = append(body, ruleRef(r))
		}
		return b.rule(body)
	}}
}

// OneOf is the part matching any one of its parts.
func OneOf(parts ...Part) Part {
	return Part{func(b *builder, c *composer) (int, error) {
		alts := make([][]sym, len(parts))
		for i, p := range parts {
			r, err := p.build(b, c)
			if err != nil {
				return 0, err
			}
			alts[i] = ref(r)
		}
		return b.rule(alts...)
	}}
}

// Repeat is the part matching p from lo to hi times (hi < 0: no bound),
// each after the first preceded by sep.
func Repeat(p, sep Part, lo, hi int) Part {
	return Part{func(b *builder, c *composer) (int, error) {
		if lo < 0 || hi >= 0 && hi < lo {
			return 0, fmt.Errorf("repeat %d to %d times", lo, hi)
		}
		one, err := p.build(b, c)
		if err != nil {
			return 0, err
		}
		s, err := sep.build(b, c)
		if err != nil {
			return 0, err
		}
		more, err := b.rule(seq(ref(s), ref(one)))
		if err != nil {
			return 0, err
		}
		if hi == 0 {
			return b.rule(nil)
		}
		// p, then lo-1 to hi-1 of (sep p); none at all where lo is 0.
		tailHi := hi - 1
		if hi < 0 {
			tailHi = -1
		}
		tail, err := b.repeat(more, max(lo-1, 0), tailHi)
		if err != nil {
			return 0, err
		}
		if lo == 0 {
			return b.rule(nil, seq(ref(one), ref(tail)))
		}
		return b.rule(seq(ref(one), ref(tail)))
	}}
}

// Compose compiles p into a Grammar. what names it in errors.
func Compose(what string, p Part) (*Grammar, error) {
	b := newBuilder()
	j, err := b.json()
	if err != nil {
		return nil, err
	}
	r, err := p.build(b, &composer{j: j})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return checked(b.freeze(r), what)
}
