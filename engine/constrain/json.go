package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonRules are the shared rules of JSON text.
type jsonRules struct {
	ws, value, object, array, str, char, number, integer, boolean, null int
}

// maxIndent bounds the indentation after a newline, as llama.cpp does, so
// that whitespace cannot go on for ever.
const maxIndent = 20

// json adds (once) the rules of JSON values.
func (b *builder) json() (*jsonRules, error) {
	j := &jsonRules{}
	var err error
	must := func(r int, e error) int {
		if err == nil {
			err = e
		}
		return r
	}
	indentChar := must(b.rule([]sym{b.cls(spaceTab())}))
	indent := must(b.repeat(indentChar, 0, maxIndent))
	j.ws = must(b.rule(nil, b.lit(" "), seq(b.lit("\n"), ref(indent))))
	j.char = must(b.jsonChar())
	chars := must(b.star(j.char))
	j.str = must(b.rule(seq(b.lit(`"`), ref(chars), b.lit(`"`))))
	digit := b.cls(byteRange('0', '9'))
	digitRule := must(b.rule([]sym{digit}))
	upTo15 := must(b.repeat(digitRule, 0, 15))
	frac := must(b.repeat(digitRule, 1, 16))
	exp := must(b.repeat(digitRule, 1, 3))
	intPart := must(b.rule(b.lit("0"), seq([]sym{b.cls(byteRange('1', '9'))}, ref(upTo15))))
	sign := must(b.rule(nil, b.lit("-")))
	j.integer = must(b.rule(seq(ref(sign), ref(intPart))))
	fracPart := must(b.rule(nil, seq(b.lit("."), ref(frac))))
	expSign := must(b.rule(nil, b.lit("-"), b.lit("+")))
	expPart := must(b.rule(nil, seq([]sym{b.cls(union(byteRange('e', 'e'), byteRange('E', 'E')))}, ref(expSign), ref(exp))))
	j.number = must(b.rule(seq(ref(j.integer), ref(fracPart), ref(expPart))))
	j.boolean = must(b.rule(b.lit("true"), b.lit("false")))
	j.null = must(b.litRule("null"))
	if err != nil {
		return nil, err
	}
	j.value = must(b.newRule())
	// object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
	kv := must(b.rule(seq(ref(j.str), ref(j.ws), b.lit(":"), ref(j.ws), ref(j.value), ref(j.ws))))
	moreKV := must(b.rule(seq(b.lit(","), ref(j.ws), ref(kv))))
	kvs := must(b.star(moreKV))
	j.object = must(b.rule(seq(b.lit("{"), ref(j.ws), b.lit("}")), seq(b.lit("{"), ref(j.ws), ref(kv), ref(kvs), b.lit("}"))))
	item := must(b.rule(seq(ref(j.value), ref(j.ws))))
	moreItem := must(b.rule(seq(b.lit(","), ref(j.ws), ref(item))))
	items := must(b.star(moreItem))
	j.array = must(b.rule(seq(b.lit("["), ref(j.ws), b.lit("]")), seq(b.lit("["), ref(j.ws), ref(item), ref(items), b.lit("]"))))
	if err != nil {
		return nil, err
	}
	b.rules[j.value] = [][]sym{ref(j.object), ref(j.array), ref(j.str), ref(j.number), ref(j.boolean), ref(j.null)}
	return j, nil
}

// jsonChar is one character of a JSON string: anything but the quote, the
// backslash and control characters, in UTF-8, or an escape.
func (b *builder) jsonChar() (int, error) {
	plain, err := b.runeClass([][2]rune{{0x20, unicode.MaxRune}}, jsonKeep)
	if err != nil {
		return 0, err
	}
	hex := b.cls(union(byteRange('0', '9'), byteRange('a', 'f'), byteRange('A', 'F')))
	var esc class
	for _, c := range `"\/bfnrt` {
		esc.add(byte(c), byte(c))
	}
	return b.rule(ref(plain), seq(b.lit(`\`), []sym{b.cls(esc)}), seq(b.lit(`\u`), []sym{hex, hex, hex, hex}))
}

// jsonKeep cuts a code point range to what a JSON string holds unescaped.
func jsonKeep(lo, hi rune) [][2]rune {
	var out [][2]rune
	for _, r := range [][2]rune{{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, unicode.MaxRune}} {
		a, z := max(lo, r[0]), min(hi, r[1])
		if a <= z {
			out = append(out, [2]rune{a, z})
		}
	}
	return out
}

// JSON returns a Grammar matching any JSON value (object is false) or any
// JSON object (object is true, OpenAI's json_object).
func JSON(object bool) *Grammar {
	b := newBuilder()
	j, err := b.json()
	if err != nil {
		panic(err) // a fixed grammar far below the limit
	}
	if object {
		return b.freeze(j.object)
	}
	return b.freeze(j.value)
}

// ordered is a JSON object with its keys in written order.
type ordered struct {
	keys []string
	vals map[string]any
}

// decodeOrdered decodes one JSON value, keeping object key order; numbers
// stay json.Number.
func decodeOrdered(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &ordered{vals: map[string]any{}}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				key := k.(string)
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[key]; !dup {
					o.keys = append(o.keys, key)
				}
				o.vals[key] = v
			}
			_, err := d.Token()
			return o, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
	}
	return t, nil
}

// canonical writes v as compact JSON, keys in their order.
func canonical(v any) string {
	var sb strings.Builder
	var w func(v any)
	w = func(v any) {
		switch v := v.(type) {
		case *ordered:
			sb.WriteByte('{')
			for i, k := range v.keys {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(jsonText(k))
				sb.WriteByte(':')
				w(v.vals[k])
			}
			sb.WriteByte('}')
		case []any:
			sb.WriteByte('[')
			for i, x := range v {
				if i > 0 {
					sb.WriteByte(',')
				}
				w(x)
			}
			sb.WriteByte(']')
		case json.Number:
			sb.WriteString(v.String())
		case nil:
			sb.WriteString("null")
		default:
			sb.WriteString(jsonText(v))
		}
	}
	w(v)
	return sb.String()
}

// jsonText is v's JSON as a model would write it: json.Marshal's, but with
// <, > and & as themselves, not HTML-safe escapes.
func jsonText(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "null" // only strings, numbers and booleans come here
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// Schema returns a Grammar matching the JSON texts that schema (a JSON
// Schema document) describes, in the subset the package doc lists. The
// schema is first compiled by github.com/santhosh-tekuri/jsonschema/v6,
// so an invalid one is refused with its error.
func Schema(schema []byte) (*Grammar, error) {
	if err := checkSchema(schema); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	root, err := decodeOrdered(d)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("json schema: text after the schema")
	}
	b := newBuilder()
	j, err := b.json()
	if err != nil {
		return nil, err
	}
	c := &schemaCompiler{b: b, j: j, root: root, refs: map[string]int{}}
	r, err := c.visit(root, "")
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return checked(b.freeze(r), "json schema: the schema")
}

// checkSchema compiles schema with the jsonschema library.
func checkSchema(schema []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("json schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(localOnly{}) // never the library's default, which reads file:// URLs
	const url = "mem://schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("json schema: %w", err)
	}
	if _, err := c.Compile(url); err != nil {
		return fmt.Errorf("json schema: %w", err)
	}
	return nil
}

// localOnly is the schema compiler's loader: a schema comes from a request
// or a user, so it may refer only to itself (and to the JSON Schema drafts'
// meta-schemas, which the library holds); a reference to a file or a web
// address is refused, never read.
type localOnly struct{}

// Load refuses url.
func (localOnly) Load(url string) (any, error) {
	return nil, fmt.Errorf("only references within the schema are followed, not %s", url)
}

type schemaCompiler struct {
	b    *builder
	j    *jsonRules
	root any
	refs map[string]int
}

// unsupported are the keywords that constrain a value in ways the grammar
// does not express; a schema using one is refused, never half-honoured.
var unsupported = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
	"not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains",
	"minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired",
	"dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "contentSchema"}

// visit returns the rule of schema s at path (for messages).
func (c *schemaCompiler) visit(s any, path string) (int, error) {
	j := c.j
	at := func(format string, a ...any) error {
		p := path
		if p == "" {
			p = "/"
		}
		return fmt.Errorf("at %s: %s", p, fmt.Sprintf(format, a...))
	}
	switch s := s.(type) {
	case bool:
		if s {
			return j.value, nil
		}
		return 0, at("the schema false matches nothing")
	case *ordered:
		return c.object(s, path, at)
	}
	return 0, at("a schema must be an object or a boolean")
}

func (c *schemaCompiler) object(s *ordered, path string, at func(string, ...any) error) (int, error) {
	b, j := c.b, c.j
	for _, k := range unsupported {
		if _, ok := s.vals[k]; ok {
			return 0, at("the keyword %s is not supported in constrained output", k)
		}
	}
	if err := alone(s, at); err != nil {
		return 0, err
	}
	if r, ok := s.vals["$ref"]; ok {
		ref, _ := r.(string)
		return c.ref(ref, at)
	}
	for _, k := range []string{"const", "enum"} {
		v, ok := s.vals[k]
		if !ok {
			continue
		}
		list, _ := v.([]any)
		if k == "const" {
			list = []any{v}
		}
		var alts [][]sym
		for _, x := range list {
			if ofType(x, s.vals["type"]) {
				alts = append(alts, b.lit(canonical(x)))
			}
		}
		if len(alts) == 0 {
			return 0, at("no value of %s has the schema's type", k)
		}
		return b.rule(alts...)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if v, ok := s.vals[k]; ok {
			list, _ := v.([]any)
			var alts [][]sym
			for i, x := range list {
				r, err := c.visit(x, fmt.Sprintf("%s/%s/%d", path, k, i))
				if err != nil {
					return 0, err
				}
				alts = append(alts, ref(r))
			}
			return b.rule(alts...)
		}
	}
	if v, ok := s.vals["allOf"]; ok {
		list, _ := v.([]any)
		if len(list) != 1 {
			return 0, at("allOf with %d schemas is not supported in constrained output (only one)", len(list))
		}
		return c.visit(list[0], path+"/allOf/0")
	}
	var types []string
	switch t := s.vals["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if name, ok := x.(string); ok {
				types = append(types, name)
			}
		}
	case nil:
		_, props := s.vals["properties"]
		_, addl := s.vals["additionalProperties"]
		_, items := s.vals["items"]
		_, prefix := s.vals["prefixItems"]
		switch {
		case props || addl:
			types = []string{"object"}
		case items || prefix:
			types = []string{"array"}
		default:
			return j.value, nil
		}
	}
	var alts [][]sym
	for _, t := range types {
		var r int
		var err error
		switch t {
		case "object":
			r, err = c.objectType(s, path, at)
		case "array":
			r, err = c.arrayType(s, path, at)
		case "string":
			r, err = c.stringType(s, at)
		case "number":
			r = j.number
		case "integer":
			r = j.integer
		case "boolean":
			r = j.boolean
		case "null":
			r = j.null
		default:
			err = at("unknown type %q", t)
		}
		if err != nil {
			return 0, err
		}
		alts = append(alts, ref(r))
	}
	return b.rule(alts...)
}

// whole are the keywords each of which decides the value by itself (the
// compiler returns on meeting one); beside one of them no other keyword
// that constrains a value may stand, or it would be ignored.
var whole = []string{"$ref", "const", "enum", "anyOf", "oneOf", "allOf"}

// constraining are the keywords the compiler honours. Others are
// annotations (title, description, default, $defs ...) or refused
// (unsupported).
var constraining = append(slices.Clone(whole), "type", "properties", "required",
	"additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format")

// alone refuses a schema that puts a constraining keyword beside one of
// whole's (type beside const or enum excepted: it filters their values),
// or a string's pattern or format beside its other string keywords:
// either would be silently ignored.
func alone(s *ordered, at func(string, ...any) error) error {
	check := func(k string, except ...string) error {
		if _, ok := s.vals[k]; !ok {
			return nil
		}
		for _, o := range constraining {
			if _, ok := s.vals[o]; ok && o != k && !slices.Contains(except, o) {
				return at("the keyword %s beside %s is not supported in constrained output", o, k)
			}
		}
		return nil
	}
	for _, k := range whole {
		var except []string
		if k == "const" || k == "enum" {
			except = []string{"type"}
		}
		if err := check(k, except...); err != nil {
			return err
		}
	}
	for _, k := range []string{"format", "pattern"} {
		if _, ok := s.vals[k]; !ok {
			continue
		}
		for _, o := range []string{"format", "pattern", "minLength", "maxLength"} {
			if _, ok := s.vals[o]; ok && o != k {
				return at("the keyword %s beside %s is not supported in constrained output", o, k)
			}
		}
	}
	return nil
}

// ofType reports whether the JSON value v has one of the types t names (a
// schema's type keyword: a name, a list of names, or nil for any).
func ofType(v any, t any) bool {
	var names []string
	switch t := t.(type) {
	case nil:
		return true
	case string:
		names = []string{t}
	case []any:
		for _, x := range t {
			if n, ok := x.(string); ok {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		switch x := v.(type) {
		case nil:
			if n == "null" {
				return true
			}
		case bool:
			if n == "boolean" {
				return true
			}
		case string:
			if n == "string" {
				return true
			}
		case json.Number:
			if n == "number" {
				return true
			}
			if _, err := x.Int64(); n == "integer" && err == nil {
				return true
			}
		case []any:
			if n == "array" {
				return true
			}
		case *ordered:
			if n == "object" {
				return true
			}
		}
	}
	return false
}

// ref resolves a local reference (#/$defs/NAME, #/definitions/NAME, #).
func (c *schemaCompiler) ref(ref string, at func(string, ...any) error) (int, error) {
	if r, ok := c.refs[ref]; ok {
		return r, nil
	}
	if !strings.HasPrefix(ref, "#") {
		return 0, at("only local references (#/...) are supported, not %q", ref)
	}
	target := c.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		o, ok := target.(*ordered)
		if !ok {
			return 0, at("reference %q does not resolve", ref)
		}
		if target, ok = o.vals[part]; !ok {
			return 0, at("reference %q does not resolve", ref)
		}
	}
	r, err := c.b.newRule()
	if err != nil {
		return 0, err
	}
	c.refs[ref] = r
	inner, err := c.visit(target, ref)
	if err != nil {
		return 0, err
	}
	c.b.rules[r] = [][]sym{{ruleRef(inner)}}
	return r, nil
}

func (c *schemaCompiler) objectType(s *ordered, path string, at func(string, ...any) error) (int, error) {
	b, j := c.b, c.j
	props, _ := s.vals["properties"].(*ordered)
	required := map[string]bool{}
	if list, ok := s.vals["required"].([]any); ok {
		for _, x := range list {
			if name, ok := x.(string); ok {
				required[name] = true
			}
		}
	}
	var keys []string
	if props != nil {
		keys = props.keys
	}
	var extra []string // required keys with no schema of their own take any value
	for name := range required {
		if props == nil || props.vals[name] == nil {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	keys = append(slices.Clone(keys), extra...)
	// additional properties: false when properties are given, unless set.
	var addl = -1
	switch a := s.vals["additionalProperties"].(type) {
	case bool:
		if a {
			addl = j.value
		}
	case *ordered:
		r, err := c.visit(a, path+"/additionalProperties")
		if err != nil {
			return 0, err
		}
		addl = r
	case nil:
		if props == nil {
			addl = j.value
		}
	}
	kvs := make([]int, len(keys))
	for i, k := range keys {
		var vs any = true
		if props != nil && props.vals[k] != nil {
			vs = props.vals[k]
		}
		v, err := c.visit(vs, path+"/properties/"+k)
		if err != nil {
			return 0, err
		}
		if kvs[i], err = b.rule(seq(b.lit(jsonText(k)), ref(j.ws), b.lit(":"), ref(j.ws), ref(v), ref(j.ws))); err != nil {
			return 0, err
		}
	}
	// rest(i, first): the keys from i on, first saying no comma is due.
	n := len(keys)
	rest := make([][2]int, n+1)
	comma := seq(b.lit(","), ref(j.ws))
	var err error
	// The tail: additional properties, if any.
	var addKV int
	if addl >= 0 {
		if addKV, err = b.rule(seq(ref(j.str), ref(j.ws), b.lit(":"), ref(j.ws), ref(addl), ref(j.ws))); err != nil {
			return 0, err
		}
		more, err := b.rule(seq(comma, ref(addKV)))
		if err != nil {
			return 0, err
		}
		moreStar, err := b.star(more)
		if err != nil {
			return 0, err
		}
		if rest[n][0], err = b.rule(nil, seq(ref(addKV), ref(moreStar))); err != nil {
			return 0, err
		}
		rest[n][1] = moreStar
	} else {
		if rest[n][0], err = b.rule(nil); err != nil {
			return 0, err
		}
		rest[n][1] = rest[n][0]
	}
	for i := n - 1; i >= 0; i-- {
		for f := 0; f < 2; f++ { // f == 0: first (no comma before)
			var sep []sym
			if f == 1 {
				sep = comma
			}
			take := seq(sep, ref(kvs[i]), ref(rest[i+1][1]))
			var r int
			if required[keys[i]] {
				r, err = b.rule(take)
			} else {
				r, err = b.rule(take, ref(rest[i+1][f]))
			}
			if err != nil {
				return 0, err
			}
			rest[i][f] = r
		}
	}
	return b.rule(seq(b.lit("{"), ref(j.ws), ref(rest[0][0]), b.lit("}")))
}

func (c *schemaCompiler) arrayType(s *ordered, path string, at func(string, ...any) error) (int, error) {
	b, j := c.b, c.j
	lo, hi := 0, -1
	for _, k := range []string{"minItems", "maxItems"} {
		v, ok := s.vals[k].(json.Number)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v.String())
		if err != nil || n < 0 {
			return 0, at("%s %s is not a count", k, v)
		}
		if k == "minItems" {
			lo = n
		} else {
			hi = n
		}
	}
	if hi >= 0 && hi < lo {
		return 0, at("maxItems %d is below minItems %d", hi, lo)
	}
	var prefix []int
	if list, ok := s.vals["prefixItems"].([]any); ok {
		for i, x := range list {
			r, err := c.visit(x, fmt.Sprintf("%s/prefixItems/%d", path, i))
			if err != nil {
				return 0, err
			}
			e, err := b.rule(seq(ref(r), ref(j.ws)))
			if err != nil {
				return 0, err
			}
			prefix = append(prefix, e)
		}
	}
	item := j.value // -1: no items after the prefix
	if it, ok := s.vals["items"]; ok {
		if it == false {
			item = -1
		} else {
			r, err := c.visit(it, path+"/items")
			if err != nil {
				return 0, err
			}
			item = r
		}
	}
	np := len(prefix)
	if lo > np && item < 0 {
		return 0, at("no array satisfies minItems %d here", lo)
	}
	canTake := func(k int) bool { return (hi < 0 || k < hi) && (k < np || item >= 0) }
	comma := seq(b.lit(","), ref(j.ws))
	// from(k) matches the elements from index k on, at least one, each
	// after a comma but the very first.
	var from func(k int) (int, error)
	from = func(k int) (int, error) {
		var sep []sym
		if k > 0 {
			sep = comma
		}
		if k < np {
			var alts [][]sym
			if k+1 >= lo {
				alts = append(alts, seq(sep, ref(prefix[k])))
			}
			if canTake(k + 1) {
				next, err := from(k + 1)
				if err != nil {
					return 0, err
				}
				alts = append(alts, seq(sep, ref(prefix[k]), ref(next)))
			}
			return b.rule(alts...)
		}
		one, err := b.rule(seq(ref(item), ref(j.ws)))
		if err != nil {
			return 0, err
		}
		more, err := b.rule(seq(comma, ref(one)))
		if err != nil {
			return 0, err
		}
		h := -1
		if hi >= 0 {
			h = hi - k - 1
		}
		rest, err := b.repeat(more, max(lo-k, 1)-1, h)
		if err != nil {
			return 0, err
		}
		return b.rule(seq(sep, ref(one), ref(rest)))
	}
	open := seq(b.lit("["), ref(j.ws))
	var alts [][]sym
	if canTake(0) {
		body, err := from(0)
		if err != nil {
			return 0, err
		}
		alts = append(alts, seq(open, ref(body), b.lit("]")))
	}
	if lo == 0 {
		alts = append(alts, seq(open, b.lit("]")))
	}
	return b.rule(alts...)
}

// formats are the string formats the grammar writes, as regular
// expressions over the string's characters (llama.cpp's set).
var formats = map[string]string{
	"date":      `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])`,
	"time":      `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"date-time": `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid":      `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
}

func (c *schemaCompiler) stringType(s *ordered, at func(string, ...any) error) (int, error) {
	b, j := c.b, c.j
	if f, ok := s.vals["format"].(string); ok {
		re, known := formats[f]
		if !known {
			return 0, at("the string format %q is not supported in constrained output (date, time, date-time, uuid are)", f)
		}
		r, err := b.regex(re, jsonKeep)
		if err != nil {
			return 0, err
		}
		return b.rule(seq(b.lit(`"`), ref(r), b.lit(`"`)))
	}
	if p, ok := s.vals["pattern"].(string); ok {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "^"), "$")
		r, err := b.regex(p, jsonKeep)
		if err != nil {
			return 0, at("%v", err)
		}
		return b.rule(seq(b.lit(`"`), ref(r), b.lit(`"`)))
	}
	lo, hi := 0, -1
	for _, k := range []string{"minLength", "maxLength"} {
		v, ok := s.vals[k].(json.Number)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v.String())
		if err != nil || n < 0 {
			return 0, at("%s %s is not a length", k, v)
		}
		if k == "minLength" {
			lo = n
		} else {
			hi = n
		}
	}
	if hi >= 0 && hi < lo {
		return 0, at("maxLength %d is below minLength %d", hi, lo)
	}
	if lo == 0 && hi < 0 {
		return j.str, nil
	}
	chars, err := b.repeat(j.char, lo, hi)
	if err != nil {
		return 0, err
	}
	return b.rule(seq(b.lit(`"`), ref(chars), b.lit(`"`)))
}

func union(cs ...class) class {
	var u class
	for _, c := range cs {
		for i := range u {
			u[i] |= c[i]
		}
	}
	return u
}

func spaceTab() class { return union(byteRange(' ', ' '), byteRange('\t', '\t')) }
