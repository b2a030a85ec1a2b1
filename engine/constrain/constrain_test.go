package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

func mustSchema(t testing.TB, s string) *Grammar {
	t.Helper()
	g, err := Schema([]byte(s))
	if err != nil {
		t.Fatalf("Schema(%s): %v", s, err)
	}
	return g
}

func TestMatch(t *testing.T) {
	anyJSON := JSON(false)
	object := JSON(true)
	re := func(p string) *Grammar {
		g, err := Regex(p)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	choice, err := Choice([]string{"yes", "no", "not sure"})
	if err != nil {
		t.Fatal(err)
	}
	person := mustSchema(t, `{"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"minItems":1,"maxItems":2}},"required":["name"]}`)
	cases := []struct {
		name string
		g    *Grammar
		text string
		want bool
	}{
		{"json number", anyJSON, `-12.5e+3`, true},
		{"json leading zero", anyJSON, `012`, false},
		{"json nested", anyJSON, `{"a": [1, true, null, "x\n\u00e9é"], "b": {}}`, true},
		{"json newline indent", anyJSON, "{\n  \"a\": 1\n}", true},
		{"json bad escape", anyJSON, `"\x"`, false},
		{"json control char", anyJSON, "\"a\tb\"", false},
		{"json trailing comma", anyJSON, `[1,]`, false},
		{"json too much indent", anyJSON, "[\n" + strings.Repeat(" ", 21) + "1]", false},
		{"json unclosed", anyJSON, `{"a": 1`, false},
		{"object", object, `{"k": "v"}`, true},
		{"object not array", object, `[1]`, false},
		{"choice", choice, "not sure", true},
		{"choice prefix", choice, "not", false},
		{"choice other", choice, "maybe", false},
		{"regex", re(`[a-c]+-\d{2,3}`), "abca-123", true},
		{"regex short", re(`[a-c]+-\d{2,3}`), "a-1", false},
		{"regex long", re(`[a-c]+-\d{2,3}`), "a-1234", false},
		{"regex anchors", re(`^(foo|bar)$`), "bar", true},
		{"regex unicode class", re(`[α-ω]{2}`), "λμ", true},
		{"regex unicode class ascii", re(`[α-ω]{2}`), "ab", false},
		{"regex fold", re(`(?i)hello`), "HeLLo", true},
		{"regex dot", re(`a.c`), "a€c", true},
		{"regex dot newline", re(`a.c`), "a\nc", false},
		{"regex nested stars", re(`(a*)*b`), "aaab", true},
		{"schema ok", person, `{"name": "Ann", "age": 31, "tags": ["a"]}`, true},
		{"schema optional left out", person, `{"name":"Bob"}`, true},
		{"schema required missing", person, `{"age": 3}`, false},
		{"schema order", person, `{"age": 3, "name": "Bob"}`, false},
		{"schema maxLength", person, `{"name": "Annabel"}`, false},
		{"schema enum", person, `{"name": "A", "tags": ["c"]}`, false},
		{"schema maxItems", person, `{"name": "A", "tags": ["a","b","a"]}`, false},
		{"schema minItems", person, `{"name": "A", "tags": []}`, false},
		{"schema no extra", person, `{"name": "A", "x": 1}`, false},
		{"schema wrong type", person, `{"name": 5}`, false},
		{"date", mustSchema(t, `{"type":"string","format":"date"}`), `"2024-02-29"`, true},
		{"date bad", mustSchema(t, `{"type":"string","format":"date"}`), `"2024-13-01"`, false},
		{"uuid", mustSchema(t, `{"type":"string","format":"uuid"}`), `"123e4567-e89b-12d3-a456-426614174000"`, true},
		{"date-time", mustSchema(t, `{"type":"string","format":"date-time"}`), `"2024-02-29T10:00:00Z"`, true},
		{"pattern", mustSchema(t, `{"type":"string","pattern":"^[A-Z]{2}[0-9]$"}`), `"AB1"`, true},
		{"pattern bad", mustSchema(t, `{"type":"string","pattern":"^[A-Z]{2}[0-9]$"}`), `"AB"`, false},
		{"anyOf", mustSchema(t, `{"anyOf":[{"type":"integer"},{"type":"null"}]}`), `null`, true},
		{"type list", mustSchema(t, `{"type":["string","boolean"]}`), `false`, true},
		{"type list no", mustSchema(t, `{"type":["string","boolean"]}`), `1`, false},
		{"const", mustSchema(t, `{"const":{"a":[1,2]}}`), `{"a":[1,2]}`, true},
		{"ref", mustSchema(t, `{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`), `{"next":{"next":{}}}`, true},
		{"additional", mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`), `{"a":1,"b":"x","c":"y"}`, true},
		{"additional wrong", mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`), `{"a":1,"b":2}`, false},
		{"prefixItems", mustSchema(t, `{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}`), `[1,"a"]`, true},
		{"prefixItems short ok", mustSchema(t, `{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}`), `[1]`, true},
		{"prefixItems too many", mustSchema(t, `{"type":"array","prefixItems":[{"type":"integer"}],"items":false}`), `[1,2]`, false},
		{"true schema", mustSchema(t, `true`), `[{"x":null}]`, true},
		{"optional middle", mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"]}`), `{"b":2,"c":3}`, true},
		{"enum filtered by type", mustSchema(t, `{"type":"string","enum":["a",1]}`), `"a"`, true},
		{"enum value of another type", mustSchema(t, `{"type":"string","enum":["a",1]}`), `1`, false},
		{"integer const", mustSchema(t, `{"type":"integer","const":3}`), `3`, true},
		{"annotations beside anyOf", mustSchema(t, `{"anyOf":[{"type":"string"},{"type":"null"}],"title":"T","description":"d","default":null}`), `null`, true},
		{"annotations beside $ref", mustSchema(t, `{"$defs":{"a":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/$defs/a","description":"an int"}},"required":["x"]}`), `{"x":4}`, true},
		{"enum text as written", mustSchema(t, `{"enum":["a<b&c"]}`), `"a<b&c"`, true},
		{"key text as written", mustSchema(t, `{"type":"object","properties":{"x>y":{"const":"<"}},"required":["x>y"]}`), `{"x>y":"<"}`, true},
		{"optional middle bad comma", mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"]}`), `{,"c":3}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.g.Match(c.text); got != c.want {
				t.Errorf("Match(%q) = %v, want %v", c.text, got, c.want)
			}
		})
	}
}

func TestSchemaRefused(t *testing.T) {
	cases := []struct{ schema, want string }{
		{`{"type":"integer","minimum":3}`, "minimum"},
		{`{"allOf":[{"type":"integer"},{"type":"number"}]}`, "allOf"},
		{`{"type":"string","format":"email"}`, "email"},
		{`{"type":"strin"}`, "json schema"}, // the library refuses it
		{`{"$ref":"http://example.com/s.json"}`, "json schema"},
		{`false`, "matches nothing"},
		{`{"type":"string","maxLength":100000000}`, "too large"},
		{`{"type":"array","items":false,"minItems":1}`, "minItems"},
		{`not json`, "json schema"},
		// A keyword beside one that decides the value alone would be ignored.
		{`{"type":"object","properties":{"a":{"type":"integer"}},"anyOf":[{"required":["a"]}]}`, "beside anyOf"},
		{`{"type":"string","pattern":"a+","maxLength":2}`, "maxLength beside pattern"},
		{`{"$defs":{"s":{"type":"string"}},"type":"object","properties":{"x":{"$ref":"#/$defs/s","maxLength":1}}}`, "maxLength beside $ref"},
		{`{"type":"string","format":"date","minLength":3}`, "minLength beside format"},
		{`{"type":"boolean","enum":["a",1]}`, "no value of enum"},
	}
	for _, c := range cases {
		_, err := Schema([]byte(c.schema))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Schema(%s) = %v, want an error naming %q", c.schema, err, c.want)
		}
	}
	// A schema never reads a file: not one it refers to, not its $schema
	// (a FIFO there would hang the request), and a draft's meta-schema URL
	// still works.
	dir := t.TempDir()
	file := filepath.Join(dir, "s.json")
	if err := os.WriteFile(file, []byte(`{"type":"integer"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{
		`{"$ref":"file://` + file + `"}`,
		`{"$schema":"file://` + fifo + `","type":"integer"}`,
		`{"type":"object","properties":{"a":{"$ref":"file://` + file + `#"}}}`,
	} {
		if _, err := Schema([]byte(schema)); err == nil || !strings.Contains(err.Error(), "only references within the schema") {
			t.Errorf("Schema(%s) = %v, want it refused without reading the file", schema, err)
		}
	}
	if _, err := Schema([]byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer"}`)); err != nil {
		t.Errorf("a draft's $schema: %v", err)
	}
	if _, err := Regex(`a\bb`); err == nil {
		t.Error("a word boundary was accepted")
	}
	if _, err := Regex(`a(`); err == nil {
		t.Error("a bad pattern was accepted")
	}
	if _, err := Choice(nil); err == nil {
		t.Error("an empty choice was accepted")
	}
}

// sharedVocab loads a tokenizer from the shared test data.
func sharedTokenizer(t testing.TB, rel string) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(testshared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestAllowedMatchesBruteForce checks each mask against feeding every
// token's bytes to a fresh copy of the matcher, along random valid paths,
// on a small hand-made vocabulary and on one with a sample of GPT-2's
// tokens and pieces of valid and invalid UTF-8 (the walk marks whole
// subtrees of text at once, so these are what it must get right).
func TestAllowedMatchesBruteForce(t *testing.T) {
	hand := []string{"", "{", "}", "\"", "\"a", "a", "ab", "b\"", ":", ": ", " ", ",", "\n", "1", "12", "-", "true", "tr", "ue", "null", "[", "]", "é"[:1], "é"[1:], "é", "\\", "\\n", "x\"}", "{\"", "\":", "name", "\"name\"", "<|end|>"}
	hand[len(hand)-1] = "" // a control token
	mixed := slices.Clone(hand)
	for _, p := range []string{"héllo", "\xed\x9f\xbf", "\xed\xa0\x80", "\xc0\xaf", "\xe0\x80\x80", "\xe0\xa0", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80",
		"\xf0\x9f\x98", "\x98\x80", "a\tb", "ab\x7f", "über\"", "日本語", "日本"[:4], "\u00e9\"}", "abcdefghijklmnopqrstuvwxyz", "\x01",
		"a\xed\xa0\x80", "a\xc0\xaf", "ab\x98", "é\x80", "aé", "aéé", "aébé", "abc日本", "ab日本"[:5], "abcdefx", "abcdefgx", "abcdefghx", "xxxx", "abcxxx", "abcdex", "121", "127", "1212", "98"} {
		mixed = append(mixed, p)
	}
	if f, err := gguf.Open(filepath.Join(testshared.Dir(), "testdata/tokenizer/ggml-vocab-gpt-2.gguf")); err == nil {
		tok, err := tokenizer.FromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 8))
		for range 3000 {
			mixed = append(mixed, tok.Piece(rng.IntN(tok.Size())))
		}
	} else {
		t.Log("the GPT-2 vocabulary is missing (KVSCOPE_TESTDATA): the mixed vocabulary has no sample of it")
	}
	vocabs := []struct {
		name   string
		pieces []string
	}{{"hand", hand}, {"mixed", mixed}}
	grammars := []struct {
		name string
		g    *Grammar
	}{
		{"json", JSON(false)},
		{"schema", mustSchema(t, `{"type":"object","properties":{"name":{"type":"string","maxLength":3},"n":{"type":"integer"}},"required":["name"]}`)},
		{"long string", mustSchema(t, `{"type":"array","items":{"type":"string","minLength":2,"maxLength":12}}`)},
		{"regex", mustRegex(t, `[a-z]{0,6}(x|é)*\.?.{0,3}`)},
		{"one é", mustRegex(t, `[a-z]*(é[a-z]*)?`)},
		{"run changes", mustRegex(t, `\d{2}[0-4]*`)},
		{"one other", mustRegex(t, `[ -~]*([^ -~][ -~]*)?`)},
		{"choice", mustChoice(t, []string{"yes", "no", "über", "日本語"})},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, vc := range vocabs {
		v := NewVocab(vc.pieces)
		mask := make([]uint64, v.MaskWords())
		for _, gc := range grammars {
			for walk := range 8 {
				m := gc.g.NewMatcher()
				for step := range 12 {
					n := m.Allowed(v, mask)
					var ok []int
					for id, p := range vc.pieces {
						probe := *m
						want := p != "" && probe.Advance(p)
						got := mask[id>>6]&(1<<(id&63)) != 0
						if got != want {
							t.Fatalf("%s/%s walk %d step %d: token %q allowed %v, brute force %v", vc.name, gc.name, walk, step, p, got, want)
						}
						if want {
							ok = append(ok, id)
						}
					}
					if n != len(ok) {
						t.Fatalf("%s/%s: Allowed counted %d, mask has %d", vc.name, gc.name, n, len(ok))
					}
					if len(ok) == 0 {
						break
					}
					if !m.Advance(vc.pieces[ok[rng.IntN(len(ok))]]) {
						t.Fatal("an allowed token was refused")
					}
				}
			}
		}
	}
}

func mustRegex(t *testing.T, re string) *Grammar {
	t.Helper()
	g, err := Regex(re)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustChoice(t *testing.T, c []string) *Grammar {
	t.Helper()
	g, err := Choice(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestUTF8Next checks the trie's UTF-8 decoder against utf8.Valid on
// every string of up to three bytes from an alphabet of boundary bytes.
func TestUTF8Next(t *testing.T) {
	alpha := []byte{0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff}
	var rec func(s []byte)
	rec = func(s []byte) {
		u := byte(0)
		for _, c := range s {
			if u != utf8Bad {
				u = utf8Next(u, c)
			}
		}
		if got, want := u == 0, utf8.Valid(s); got != want {
			t.Fatalf("% x: decoder ends between characters %v, utf8.Valid %v", s, got, want)
		}
		if len(s) < 4 {
			for _, c := range alpha {
				rec(append(slices.Clone(s), c))
			}
		}
	}
	rec(nil)
}

// generate draws random allowed tokens until the matcher is done, is
// accepting and a coin says stop, or max tokens; it returns the text.
func generate(t *testing.T, g *Grammar, v *Vocab, rng *rand.Rand, max int) (string, bool) {
	m := g.NewMatcher()
	mask := make([]uint64, v.MaskWords())
	var out strings.Builder
	for range max {
		if m.Done() || m.Accepting() && rng.IntN(4) == 0 {
			return out.String(), true
		}
		n := m.Allowed(v, mask)
		if n == 0 {
			t.Fatalf("no token continues %q (accepting %v)", out.String(), m.Accepting())
		}
		k := rng.IntN(n)
		for id := range v.Size() {
			if mask[id>>6]&(1<<(id&63)) != 0 {
				if k == 0 {
					if !m.Advance(v.Piece(id)) {
						t.Fatalf("allowed token %q refused", v.Piece(id))
					}
					out.WriteString(v.Piece(id))
					break
				}
				k--
			}
		}
	}
	return out.String(), m.Accepting()
}

// TestGeneratedValidates draws random constrained outputs on the GPT-2
// vocabulary and checks each against the schema with the jsonschema
// library, so the grammar is checked by an independent validator.
func TestGeneratedValidates(t *testing.T) {
	tok := sharedTokenizer(t, "testdata/tokenizer/ggml-vocab-gpt-2.gguf")
	v := FromTokenizer(tok)
	schemas := []string{
		`{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},"ok":{"type":"boolean"},"kind":{"enum":["cat","dog",null,3]},"tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3}},"required":["name","kind"]}`,
		`{"type":"array","items":{"anyOf":[{"type":"number"},{"type":"string","format":"date"},{"type":"null"}]},"minItems":2,"maxItems":4}`,
		`{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2}$"}},"required":["id","at","code"],"additionalProperties":false}`,
		`{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/t"}`,
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i, s := range schemas {
		g := mustSchema(t, s)
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(s))
		c := jsonschema.NewCompiler()
		if err := c.AddResource("mem://s.json", doc); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("mem://s.json")
		if err != nil {
			t.Fatal(err)
		}
		validated := 0
		for k := range 20 {
			text, complete := generate(t, g, v, rng, 400)
			if !complete {
				continue // cut at max tokens: nothing to validate
			}
			validated++
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
			if err != nil {
				t.Fatalf("schema %d output %d is not JSON: %v\n%s", i, k, err, text)
			}
			if err := sch.Validate(inst); err != nil {
				t.Fatalf("schema %d output %d does not validate: %v\n%s", i, k, err, text)
			}
		}
		if validated < 5 {
			t.Errorf("schema %d: %d of 20 outputs were complete, too few to check", i, validated)
		}
	}
}

// TestUTF8Ranges checks the UTF-8 range splitter against utf8.EncodeRune.
func TestUTF8Ranges(t *testing.T) {
	for _, r := range [][2]rune{{0, 0x10FFFF}, {0x7F, 0x80}, {0x700, 0x900}, {0xD000, 0xE100}, {0x1F600, 0x1F64F}, {'a', 'z'}} {
		g := newBuilder()
		cr, err := g.runeClass([][2]rune{r}, nil)
		if err != nil {
			t.Fatal(err)
		}
		gr := g.freeze(cr)
		rng := rand.New(rand.NewPCG(uint64(r[0]), 9))
		for range 500 {
			c := r[0] + rune(rng.IntN(int(r[1]-r[0]+1)))
			want := c < 0xD800 || c > 0xDFFF
			if got := gr.Match(string(c)); got != want && want {
				t.Fatalf("range %x-%x: %U matched %v", r[0], r[1], c, got)
			}
		}
		if gr.Match(string(rune(r[1]+1))) && r[1] < 0x10FFFF {
			t.Fatalf("range %x-%x matched %U", r[0], r[1], r[1]+1)
		}
	}
}

// synthVocab is a 128k-token vocabulary: GPT-2's 50k tokens and pairs of
// them, as a stand-in for Llama 3's.
func synthVocab(tb testing.TB) *Vocab {
	tok := sharedTokenizer(tb, "testdata/tokenizer/ggml-vocab-gpt-2.gguf")
	base := FromTokenizer(tok)
	pieces := make([]string, 0, 128256)
	for id := range base.Size() {
		pieces = append(pieces, base.Piece(id))
	}
	seen := map[string]bool{}
	for _, p := range pieces {
		seen[p] = true
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for len(pieces) < 128256 {
		p := pieces[rng.IntN(base.Size())] + pieces[rng.IntN(base.Size())]
		if len(p) > 16 || seen[p] {
			continue
		}
		seen[p] = true
		pieces = append(pieces, p)
	}
	return NewVocab(pieces)
}

// BenchmarkAllowed measures one step's mask on a 128k-token vocabulary at
// the costliest points of a JSON schema: inside a string (nearly every
// token allowed) and after a key (few allowed).
func BenchmarkAllowed(b *testing.B) {
	v := synthVocab(b)
	g := mustSchema(b, `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}`)
	mask := make([]uint64, v.MaskWords())
	for _, at := range []string{`{"name": "abc`, `{"name": "abc", `, `{"name": "abc", "age": 1`} {
		b.Run(fmt.Sprintf("after %q", at), func(b *testing.B) {
			m := g.NewMatcher()
			if !m.Advance(at) {
				b.Fatal("prefix refused")
			}
			n := m.Allowed(v, mask) // the first call builds the automaton's tables
			for b.Loop() {
				g.forgetMasks() // time the walk, not the mask cache
				m.Allowed(v, mask)
			}
			b.ReportMetric(float64(n), "allowed")
			b.ReportMetric(float64(v.Nodes()), "trie-nodes")
		})
	}
}

func TestCanonical(t *testing.T) {
	d := json.NewDecoder(bytes.NewReader([]byte(`{"b": [1, 2.50, "x"], "a": {"z": null, "y": true}}`)))
	d.UseNumber()
	v, err := decodeOrdered(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := canonical(v), `{"b":[1,2.50,"x"],"a":{"z":null,"y":true}}`; got != want {
		t.Errorf("canonical = %s, want %s", got, want)
	}
}

// FuzzConstraints: no schema or pattern makes a panic or a grammar that
// accepts text its own matcher refuses.
func FuzzConstraints(f *testing.F) {
	for _, s := range []string{`{"type":"object","properties":{"a":{"type":"string","maxLength":3}}}`, `{"enum":[1,"x",null]}`,
		`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `{"type":"array","prefixItems":[true],"minItems":2,"maxItems":3}`, `[a-z]+\d*`, `(a|b)*c{2,4}`} {
		f.Add(s, `{"a":"xy"}`)
	}
	f.Fuzz(func(t *testing.T, spec, text string) {
		for _, mk := range []func(string) (*Grammar, error){func(s string) (*Grammar, error) { return Schema([]byte(s)) }, Regex} {
			g, err := mk(spec)
			if err != nil {
				continue
			}
			m := g.NewMatcher()
			ok := m.Advance(text)
			if g.Match(text) && !ok {
				t.Fatalf("%q: Match and Advance disagree on %q", spec, text)
			}
		}
	})
}

// TestSummarize checks a class's summary (a group's bit where any of its
// bytes is in the class) and inner summary (where all are) against their
// definitions, on classes of single bytes and of ranges.
func TestSummarize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 400 {
		var c class
		for range rng.IntN(6) {
			lo := byte(rng.IntN(256))
			hi := lo
			if i%2 == 1 {
				hi = byte(min(int(lo)+rng.IntN(40), 255))
			}
			c.add(lo, hi)
		}
		var want, wantInner summary
		for b := range 256 {
			k := summaryBit(byte(b))
			if c.has(byte(b)) {
				want[k>>6] |= 1 << (k & 63)
			}
			whole := true
			for o := range 256 {
				if summaryBit(byte(o)) == k && !c.has(byte(o)) {
					whole = false
				}
			}
			if whole {
				wantInner[k>>6] |= 1 << (k & 63)
			}
		}
		if got := summarize(&c); got != want {
			t.Fatalf("summary of %x = %x, want %x", c, got, want)
		}
		if got := inner(&c); got != wantInner {
			t.Fatalf("inner summary of %x = %x, want %x", c, got, wantInner)
		}
	}
}

// TestCompose checks composed grammars: a tool-call shape of literals
// around a schema's JSON, repeated with bounds, or free text.
func TestCompose(t *testing.T) {
	call := Seq(Literal("<c>"), JSONOf([]byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)), Literal("</c>"))
	calls, err := Compose("calls", OneOf(Repeat(call, Literal("\n"), 1, 2), Text("<")))
	if err != nil {
		t.Fatal(err)
	}
	anyJSON, err := Compose("any", Seq(Literal("x="), JSONOf(nil)))
	if err != nil {
		t.Fatal(err)
	}
	none, err := Compose("none", Repeat(Literal("a"), Literal(","), 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		g    *Grammar
		text string
		want bool
	}{
		{calls, `<c>{"n": 1}</c>`, true},
		{calls, "<c>{\"n\": 1}</c>\n<c>{\"n\":2}</c>", true},
		{calls, "<c>{\"n\": 1}</c>\n<c>{\"n\":2}</c>\n<c>{\"n\":3}</c>", false},
		{calls, `<c>{"m": 1}</c>`, false},
		{calls, "", true},
		{calls, "hello <c> there\n", true},
		{calls, "<hello", false},
		{calls, "a\x00b", false},
		{anyJSON, `x=[1, {"a": null}]`, true},
		{anyJSON, `x=`, false},
		{none, "", true},
		{none, "a,a,a", true},
		{none, "a,a,a,a", false},
	}
	for _, c := range cases {
		if got := c.g.Match(c.text); got != c.want {
			t.Errorf("%q: match %v, want %v", c.text, got, c.want)
		}
	}
	if _, err := Compose("bad", JSONOf([]byte(`{"type":"integer","minimum":1}`))); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("a schema with minimum: %v, want it refused by name", err)
	}
}

// TestAllowedMatchesReferenceGenerated checks masks against feeding every
// token to a copy of the matcher, on generated vocabularies (text tokens
// short and past the length bitmaps, quotes, escapes, control bytes,
// multi-byte and broken UTF-8) and generated grammars (bounded and
// unbounded strings, schemas, regular expressions, free text), along
// random valid paths, with the mask cache both used and emptied.
func TestAllowedMatchesReferenceGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	parts := []string{"a", "b", "x", "Z", "1", "7", " ", "-", ".", "\"", "\\", "{", "}", "[", "]", ":", ",", "\n", "\t", "é", "日", "\xe6", "\x97", "\xc3", "n", "u", "ll", "true"}
	genVocab := func(n int) []string {
		seen := map[string]bool{}
		pieces := []string{""}
		for len(pieces) < n {
			var p string
			switch rng.IntN(8) {
			case 0: // a long text token, past textLevels
				p = strings.Repeat(string(rune('a'+rng.IntN(3))), 20+rng.IntN(60))
			default:
				for range 1 + rng.IntN(6) {
					p += parts[rng.IntN(len(parts))]
				}
			}
			if !seen[p] {
				seen[p] = true
				pieces = append(pieces, p)
			}
		}
		return pieces
	}
	genGrammar := func() (string, *Grammar) {
		lo := rng.IntN(4)
		hi := lo + rng.IntN(50)
		var g *Grammar
		var err error
		var what string
		switch rng.IntN(7) {
		case 0:
			what = fmt.Sprintf(`{"type":"string","minLength":%d,"maxLength":%d}`, lo, hi)
			g, err = Schema([]byte(what))
		case 1:
			what = fmt.Sprintf(`{"type":"object","properties":{"s":{"type":"string","maxLength":%d},"n":{"type":"integer"},"a":{"type":"array","items":{"type":"string"},"maxItems":%d}},"required":["s"]}`, hi, 1+lo)
			g, err = Schema([]byte(what))
		case 2:
			what = fmt.Sprintf(`[a-z ]{%d,%d}(x|é)*`, lo, hi)
			g, err = Regex(what)
		case 3:
			what = fmt.Sprintf(`.{%d,%d}"?`, lo, hi)
			g, err = Regex(what)
		case 4:
			what = "free text"
			g, err = Compose(what, Seq(Text("{"), Literal("\n")))
		case 5:
			what = "json"
			g = JSON(rng.IntN(2) == 0)
		default:
			what = fmt.Sprintf(`[ -~]{0,%d}`, hi)
			g, err = Regex(what)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return what, g
	}
	for round := range 4 {
		pieces := genVocab(400 + 200*round)
		v := NewVocab(pieces)
		mask := make([]uint64, v.MaskWords())
		for range 8 {
			what, g := genGrammar()
			for walk := range 4 {
				m := g.NewMatcher()
				for step := range 30 {
					if walk%2 == 1 {
						g.forgetMasks()
					}
					n := m.Allowed(v, mask)
					var ok []int
					for id, p := range pieces {
						probe := *m
						want := p != "" && probe.Advance(p)
						if got := mask[id>>6]&(1<<(id&63)) != 0; got != want {
							t.Fatalf("round %d %s walk %d step %d: token %q allowed %v, by feeding it %v", round, what, walk, step, p, got, want)
						}
						if want {
							ok = append(ok, id)
						}
					}
					if n != len(ok) {
						t.Fatalf("%s: Allowed counted %d, the mask has %d", what, n, len(ok))
					}
					if len(ok) == 0 {
						break
					}
					if !m.Advance(pieces[ok[rng.IntN(len(ok))]]) {
						t.Fatal("an allowed token was refused")
					}
				}
			}
		}
	}
}

// TestMaskCache checks the kept masks: a mask asked for again comes from
// the cache the same, and past maxMasks the least recently used go first
// while the memory stays within maxMaskBytes.
func TestMaskCache(t *testing.T) {
	pieces := []string{"", "a", "b", "ab", "ba", "aaa", "x", "\"", "é"}
	v := NewVocab(pieces)
	g := mustSchema(t, `{"type":"string","maxLength":1500}`)
	m := g.NewMatcher()
	if !m.Advance(`"`) {
		t.Fatal("the string's quote was refused")
	}
	mask := make([]uint64, v.MaskWords())
	first := m.st
	firstN := m.Allowed(v, mask)
	firstMask := slices.Clone(mask)
	g.mu.Lock()
	_, kept := g.masks[maskKey{v, first}]
	g.mu.Unlock()
	if !kept {
		t.Fatal("the first mask was not kept")
	}
	// The first mask, used again now and then, outlives the others.
	for i := range maxMasks + 200 {
		if !m.Advance("a") {
			t.Fatalf("step %d refused", i)
		}
		m.Allowed(v, mask)
		if i%100 == 0 {
			probe := *m
			probe.st = first
			if n := probe.Allowed(v, mask); n != firstN || !slices.Equal(mask, firstMask) {
				t.Fatalf("step %d: the first mask again is %x (%d tokens), was %x (%d)", i, mask, n, firstMask, firstN)
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.masks) > maxMasks || g.maskBytes > maxMaskBytes {
		t.Fatalf("%d masks of %d bytes kept, over %d or %d", len(g.masks), g.maskBytes, maxMasks, maxMaskBytes)
	}
	if _, ok := g.masks[maskKey{v, first}]; !ok {
		t.Error("the first mask, used again, was let go")
	}
	if _, ok := g.masks[maskKey{v, m.st}]; !ok {
		t.Error("the latest mask was let go")
	}
	total := 0
	for _, c := range g.masks {
		total += c.bytes()
	}
	if total != g.maskBytes {
		t.Errorf("the masks hold %d bytes, counted %d", total, g.maskBytes)
	}
}

// TestAllowedClearsALongerMask checks that Allowed clears the whole of a
// mask sized for a larger model vocabulary, as the engine allocates it,
// on the text tokens' path, the trie's and a kept mask's.
func TestAllowedClearsALongerMask(t *testing.T) {
	v := NewVocab([]string{"", "a", "b", "ab", "ba", "aaa", "x", "\"", "é"})
	for _, c := range []struct{ name, schema, prefix string }{
		{"inside a string", `{"type":"string"}`, `"`},
		{"a number", `{"type":"number"}`, ``},
	} {
		g := mustSchema(t, c.schema)
		m := g.NewMatcher()
		if !m.Advance(c.prefix) {
			t.Fatalf("%s: %q refused", c.name, c.prefix)
		}
		for pass := range 2 { // the second pass takes the kept mask
			mask := make([]uint64, v.MaskWords()+3)
			for i := range mask {
				mask[i] = ^uint64(0)
			}
			m.Allowed(v, mask)
			for i, w := range mask[v.MaskWords():] {
				if w != 0 {
					t.Errorf("%s, pass %d: word %d past the vocabulary is %#x, want 0", c.name, pass, v.MaskWords()+i, w)
				}
			}
			if last := mask[v.MaskWords()-1] >> (v.size & 63); v.size&63 != 0 && last != 0 {
				t.Errorf("%s, pass %d: bits past the last token are set: %#x", c.name, pass, last)
			}
		}
	}
}
