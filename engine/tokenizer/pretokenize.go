package tokenizer

import (
	"fmt"
	"regexp/syntax"
	"sort"
)

// A pre-tokenizer cuts text into words before BPE merges run inside each
// word. As in llama.cpp's unicode_regex_split, it is a list of steps applied
// in turn; each step cuts every current piece further, and the parts of a
// piece that a step's pattern does not match stay pieces of their own.
//
// Pieces are kept as lengths in code points (offsets), over the code points
// of the whole text.
type preTokenizer struct {
	name  string
	steps []preStep
	// ignoreMerges: a word that is itself a token is not merged (Llama 3).
	ignoreMerges bool
	// addBOS: the pre-tokenizer's default for add_bos (before metadata).
	addBOS bool
}

// preStep is one step: a splitter over one form of the text.
type preStep struct {
	split func(text []rune, offsets []int) []int
	in    stepInput
}

// stepInput is the form of the text a step reads.
type stepInput int

const (
	inRaw       stepInput = iota // the code points themselves
	inWide                       // non-ASCII whitespace as \v (see widen)
	inCollapsed                  // one stand-in per category (see collapse)
)

// Character classes of llama.cpp's "collapsed" text: every code point at or
// above 128 is replaced by one stand-in per category (whitespace by \v), and
// \p{L}, \p{N}, \p{P}, \p{S} become the stand-in plus the ASCII members of
// the category. \s is spelled out because C++'s std::regex (classic locale)
// reads it as ASCII whitespace. The bodies are in Go's regexp syntax.
const (
	clsWS = `\t\n\v\f\r `
	clsL  = `\x{D2}A-Za-z`
	clsN  = `\x{D1}0-9`
	clsP  = `\x{D3}!-#%-*,-/:-;?-@\[-\]_\{\}`
)

// The classes of the patterns, parsed once.
var (
	classWS      = mustClass(clsWS)
	classNewline = mustClass(`\r\n`)
	classL       = mustClass(clsL)
	classN       = mustClass(clsN)
	classDigit   = mustClass(`0-9`)
	// Qwen 2: [^\r\n\p{L}\p{N}] and [^\s\p{L}\p{N}].
	classNotNLLN = mustClass(`^\r\n` + clsL + clsN)
	classNotWSLN = mustClass(`^` + clsWS + clsL + clsN)
	// The default BPE pre-tokenizer: [\p{P}\$\+<=>\^~\|].
	classDefaultPunct = mustClass(clsP + `\$\+<=>\^~\|`)
	classP            = mustClass(clsP)
	classCJK          = mustClass("\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff")
	// deepseek-llm's cased letters and punctuation (from its
	// tokenizer.json, as in llama.cpp).
	classDeepseekLetters = mustClass("A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af" +
		"\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481" +
		"\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b" +
		"\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d" +
		"\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec" +
		"\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d" +
		"\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee" +
		"\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06" +
		"\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb" +
		"\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
	classDeepseekPunct = mustClass(`!-/:-~` + "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002")
)

// class is a set of code points: a bitmap of its ASCII members and the
// sorted, inclusive [lo, hi] pairs of the rest.
type class struct {
	ascii [2]uint64
	pairs []rune
}

// mustClass parses the body of a bracketed character class in Go's regexp
// syntax ("^..." negates it).
func mustClass(body string) *class {
	re, err := syntax.Parse("["+body+"]", syntax.Perl)
	if err != nil {
		panic(err)
	}
	var pairs []rune
	switch re.Op {
	case syntax.OpCharClass:
		pairs = re.Rune
	case syntax.OpLiteral:
		pairs = []rune{re.Rune[0], re.Rune[0]}
	default:
		panic("tokenizer: not a character class: " + body)
	}
	c := &class{}
	for i := 0; i < len(pairs); i += 2 {
		lo, hi := pairs[i], pairs[i+1]
		for r := lo; r <= min(hi, 127); r++ {
			c.ascii[r/64] |= 1 << (r % 64)
		}
		if hi >= 128 {
			c.pairs = append(c.pairs, max(lo, 128), hi)
		}
	}
	return c
}

// has reports whether r is in c.
func (c *class) has(r rune) bool {
	if r >= 0 && r < 128 {
		return c.ascii[r/64]&(1<<(r%64)) != 0
	}
	n := len(c.pairs) / 2
	i := sort.Search(n, func(i int) bool { return c.pairs[2*i+1] >= r })
	return i < n && c.pairs[2*i] <= r
}

// runEnd returns the end of the run of c's members that starts at p.
func (c *class) runEnd(text []rune, p, end int) int {
	for p < end && c.has(text[p]) {
		p++
	}
	return p
}

// A matcher returns the length of the match of a pattern at p within
// text[:end], 0 for none. The patterns never match empty text.
type matcher func(text []rune, p, end int) int

// matchSplit makes a step that cuts each piece into the leftmost-first
// matches of m and the runs between them, as a regular expression search
// does. It takes time linear in the text when m, failing, looks at O(1)
// code points, or at most at the ones the next match consumes.
func matchSplit(m matcher) func(text []rune, offsets []int) []int {
	return func(text []rune, offsets []int) []int {
		out := make([]int, 0, len(offsets))
		start := 0
		for _, n := range offsets {
			end := start + n
			prev := start
			for p := start; p < end; {
				k := m(text, p, end)
				if k == 0 {
					p++
					continue
				}
				if p > prev {
					out = append(out, p-prev)
				}
				out = append(out, k)
				p += k
				prev = p
			}
			if prev < end {
				out = append(out, end-prev)
			}
			start = end
		}
		return out
	}
}

// run matches [c]+.
func run(c *class) matcher {
	return func(text []rune, p, end int) int { return c.runEnd(text, p, end) - p }
}

// one matches [c].
func one(c *class) matcher {
	return func(text []rune, p, end int) int {
		if c.has(text[p]) {
			return 1
		}
		return 0
	}
}

// three matches [c][c][c].
func three(c *class) matcher {
	return func(text []rune, p, end int) int {
		if p+3 <= end && c.has(text[p]) && c.has(text[p+1]) && c.has(text[p+2]) {
			return 3
		}
		return 0
	}
}

// spaceRun matches [\s]?[c]+.
func spaceRun(c *class) matcher {
	return func(text []rune, p, end int) int {
		if classWS.has(text[p]) && p+1 < end && c.has(text[p+1]) {
			return c.runEnd(text, p+1, end) - p
		}
		return c.runEnd(text, p, end) - p
	}
}

// splitTrailingSpace is the step [\s]+\z: each piece's trailing whitespace
// becomes a piece of its own.
func splitTrailingSpace(text []rune, offsets []int) []int {
	out := make([]int, 0, len(offsets))
	start := 0
	for _, n := range offsets {
		end := start + n
		p := end
		for p > start && classWS.has(text[p-1]) {
			p--
		}
		if p > start {
			out = append(out, p-start)
		}
		if p < end {
			out = append(out, end-p)
		}
		start = end
	}
	return out
}

// matchQwen2 is llama.cpp's Qwen 2 pattern over collapsed text,
//
//	(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with the alternatives tried in order, as a backtracking engine does. The
// whitespace alternatives look at the run of whitespace at p, which the
// match that follows consumes but for at most one code point.
func matchQwen2(text []rune, p, end int) int {
	at := func(i int) rune {
		if i < end {
			return text[i]
		}
		return -1
	}
	r := text[p]
	// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
	if r == '\'' {
		switch next, next2 := lower(at(p+1)), lower(at(p+2)); {
		case next == 's' || next == 't' || next == 'm' || next == 'd':
			return 2
		case (next == 'r' || next == 'v') && next2 == 'e', next == 'l' && next2 == 'l':
			return 3
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if classNotNLLN.has(r) && p+1 < end && classL.has(text[p+1]) {
		return classL.runEnd(text, p+1, end) - p
	}
	if classL.has(r) {
		return classL.runEnd(text, p, end) - p
	}
	// \p{N}
	if classN.has(r) {
		return 1
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	q := p
	if r == ' ' && p+1 < end && classNotWSLN.has(text[p+1]) {
		q++
	}
	if classNotWSLN.has(text[q]) {
		q = classNotWSLN.runEnd(text, q, end)
		return classNewline.runEnd(text, q, end) - p
	}
	if !classWS.has(r) {
		return 0
	}
	w := classWS.runEnd(text, p, end)
	// \s*[\r\n]+: up to the run's last newline.
	for q := w - 1; q >= p; q-- {
		if classNewline.has(text[q]) {
			return q + 1 - p
		}
	}
	// \s+(?!\S), then \s+
	if w < end && w-p > 1 {
		return w - 1 - p
	}
	return w - p
}

var (
	stepGPT2   = preStep{split: splitGPT2}
	stepLlama3 = preStep{split: splitLlama3}
)

func step(m matcher, in stepInput) preStep { return preStep{split: matchSplit(m), in: in} }

// newPreTokenizer returns the pre-tokenizer llama.cpp uses for the
// tokenizer.ggml.pre value pre of a "gpt2" (byte-level BPE) vocabulary.
func newPreTokenizer(pre string) (*preTokenizer, error) {
	p := &preTokenizer{name: pre}
	switch pre {
	case "", "default":
		p.name = "default"
		p.steps = []preStep{
			step(run(classDefaultPunct), inCollapsed),
			stepGPT2,
			step(run(classN), inCollapsed),
			step(three(classDigit), inWide),
		}
	case "gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "gigachat", "a.x-4.0", "mellum", "trillion", "granite-docling":
		p.steps = []preStep{stepGPT2}
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano":
		p.steps = []preStep{stepLlama3}
		p.ignoreMerges = true
		p.addBOS = true
	case "dbrx", "smaug-bpe":
		p.steps = []preStep{stepLlama3}
	case "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open":
		p.steps = []preStep{step(matchQwen2, inCollapsed)}
	case "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2":
		p.steps = []preStep{step(one(classN), inCollapsed), stepGPT2}
	case "deepseek-llm":
		p.steps = []preStep{
			step(one(classNewline), inWide),
			step(spaceRun(classDeepseekLetters), inWide),
			step(spaceRun(classDeepseekPunct), inWide),
			{split: splitTrailingSpace, in: inWide},
			step(run(classCJK), inWide),
			step(run(classN), inCollapsed),
		}
	case "deepseek-coder":
		p.steps = []preStep{
			step(one(classNewline), inWide),
			step(spaceRun(classL), inCollapsed),
			step(spaceRun(classP), inCollapsed),
			step(run(classCJK), inWide),
			step(one(classN), inCollapsed),
		}
	default:
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q (tokenizer.ggml.pre) is not supported", pre)
	}
	return p, nil
}

// split cuts text into words and returns them byte-encoded with GPT-2's
// byte-to-unicode table, ready for BPE merges.
func (p *preTokenizer) split(text string) []string {
	cpts := decodeCodepoints(text)
	offsets := []int{len(cpts)}
	var collapsed, wide []rune
	for _, st := range p.steps {
		in := cpts
		switch st.in {
		case inCollapsed:
			if collapsed == nil {
				collapsed = collapse(cpts)
			}
			in = collapsed
		case inWide:
			if wide == nil {
				wide = widen(cpts)
			}
			in = wide
		}
		offsets = st.split(in, offsets)
	}

	words := make([]string, 0, len(offsets))
	var raw, enc []byte
	start := 0
	for _, n := range offsets {
		raw = raw[:0]
		for _, r := range cpts[start : start+n] {
			raw = appendCodepoint(raw, r)
		}
		start += n
		enc = enc[:0]
		for _, b := range raw {
			enc = append(enc, byteToUnicode[b]...)
		}
		words = append(words, string(enc))
	}
	return words
}

// collapse maps code points for patterns that use \p{...}, as llama.cpp
// does: ASCII stays, whitespace becomes \v, other code points become one
// stand-in per category (N D1, L D2, P D3, M D4, S D5, anything else D0).
func collapse(cpts []rune) []rune {
	out := make([]rune, len(cpts))
	for i, r := range cpts {
		if r < 128 {
			out[i] = r
			continue
		}
		f := cptFlags(r)
		switch {
		case f&flagWhitespace != 0:
			out[i] = '\v'
		case f&flagNumber != 0:
			out[i] = 0xD1
		case f&flagLetter != 0:
			out[i] = 0xD2
		case f&flagPunctuation != 0:
			out[i] = 0xD3
		case f&flagMark != 0:
			out[i] = 0xD4
		case f&flagSymbol != 0:
			out[i] = 0xD5
		default:
			out[i] = 0xD0
		}
	}
	return out
}

// widen maps code points for patterns without categories: non-ASCII
// whitespace becomes \v, everything else stays.
func widen(cpts []rune) []rune {
	out := make([]rune, len(cpts))
	for i, r := range cpts {
		if r > 0x7F && cptFlags(r)&flagWhitespace != 0 {
			r = '\v'
		}
		out[i] = r
	}
	return out
}

// pieceCursor holds the state shared by the hand-written splitters for one
// piece [ini, end) of the code points.
type pieceCursor struct {
	cpts     []rune
	ini, end int
	prevEnd  int
	out      *[]int
}

const outOfRange = -1

func (c *pieceCursor) cpt(pos int) rune {
	if pos >= c.ini && pos < c.end {
		return c.cpts[pos]
	}
	return outOfRange
}

func (c *pieceCursor) flags(pos int) uint16 {
	if pos >= c.ini && pos < c.end {
		return cptFlags(c.cpts[pos])
	}
	return 0
}

// add ends the current word at end and returns its length.
func (c *pieceCursor) add(end int) int {
	n := end - c.prevEnd
	if n > 0 {
		*c.out = append(*c.out, n)
	}
	c.prevEnd = end
	return n
}

func isLWN(f uint16) bool { return f&(flagWhitespace|flagLetter|flagNumber) != 0 }

// splitGPT2 is GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out by hand as llama.cpp's unicode_regex_split_custom_gpt2 does.
func splitGPT2(cpts []rune, offsets []int) []int {
	out := make([]int, 0, len(offsets))
	start := 0
	for _, n := range offsets {
		c := &pieceCursor{cpts: cpts, ini: start, end: start + n, prevEnd: start, out: &out}
		start += n
		for pos := c.ini; pos < c.end; {
			r := c.cpt(pos)
			f := c.flags(pos)

			// 's|'t|'re|'ve|'m|'ll|'d
			if r == '\'' && pos+1 < c.end {
				next := c.cpt(pos + 1)
				if next == 's' || next == 't' || next == 'm' || next == 'd' {
					pos += c.add(pos + 2)
					continue
				}
				if pos+2 < c.end {
					next2 := c.cpt(pos + 2)
					if (next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') || (next == 'l' && next2 == 'l') {
						pos += c.add(pos + 3)
						continue
					}
				}
			}

			f2 := f
			if r == ' ' {
				f2 = c.flags(pos + 1)
			}
			// ?\p{L}+
			if f2&flagLetter != 0 {
				if r == ' ' {
					pos++
				}
				for f2&flagLetter != 0 {
					pos++
					f2 = c.flags(pos)
				}
				c.add(pos)
				continue
			}
			// ?\p{N}+
			if f2&flagNumber != 0 {
				if r == ' ' {
					pos++
				}
				for f2&flagNumber != 0 {
					pos++
					f2 = c.flags(pos)
				}
				c.add(pos)
				continue
			}
			// ?[^\s\p{L}\p{N}]+
			if !isLWN(f2) && f2 != 0 {
				if r == ' ' {
					pos++
				}
				for !isLWN(f2) && f2 != 0 {
					pos++
					f2 = c.flags(pos)
				}
				c.add(pos)
				continue
			}

			nws := 0
			for c.flags(pos+nws)&flagWhitespace != 0 {
				nws++
			}
			// \s+(?!\S)
			if nws > 1 && c.cpt(pos+nws) != outOfRange {
				pos += nws - 1
				c.add(pos)
				continue
			}
			// \s+
			if nws > 0 {
				pos += nws
				c.add(pos)
				continue
			}
			// no match
			pos++
			c.add(pos)
		}
	}
	return out
}

// lower lowercases ASCII letters. llama.cpp uses the full Unicode lowercase
// table, but only equality with ASCII letters is tested, and no non-ASCII
// code point lowercases to one of s, t, r, e, v, m, l, d.
func lower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// splitLlama3 is Llama 3's pattern
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// written out by hand as llama.cpp's unicode_regex_split_custom_llama3 does.
func splitLlama3(cpts []rune, offsets []int) []int {
	out := make([]int, 0, len(offsets))
	start := 0
	for _, n := range offsets {
		c := &pieceCursor{cpts: cpts, ini: start, end: start + n, prevEnd: start, out: &out}
		start += n
		for pos := c.ini; pos < c.end; {
			r := c.cpt(pos)
			f := c.flags(pos)

			// (?i:'s|'t|'re|'ve|'m|'ll|'d)
			if r == '\'' && pos+1 < c.end {
				next := lower(c.cpt(pos + 1))
				if next == 's' || next == 't' || next == 'm' || next == 'd' {
					pos += c.add(pos + 2)
					continue
				}
				if pos+2 < c.end {
					next2 := lower(c.cpt(pos + 2))
					if (next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') || (next == 'l' && next2 == 'l') {
						pos += c.add(pos + 3)
						continue
					}
				}
			}

			// [^\r\n\p{L}\p{N}]?\p{L}+
			if !(r == '\r' || r == '\n' || f&flagNumber != 0) {
				if f&flagLetter != 0 || c.flags(pos+1)&flagLetter != 0 {
					pos++
					for c.flags(pos)&flagLetter != 0 {
						pos++
					}
					c.add(pos)
					continue
				}
			}

			// \p{N}{1,3}
			if f&flagNumber != 0 {
				ini := pos
				for c.flags(pos)&flagNumber != 0 {
					pos++
					if pos-ini >= 3 {
						c.add(pos)
						ini = pos
					}
				}
				c.add(pos)
				continue
			}

			// ?[^\s\p{L}\p{N}]+[\r\n]*  (llama.cpp tests f, not f2, here)
			f2 := f
			if r == ' ' {
				f2 = c.flags(pos + 1)
			}
			if !isLWN(f2) && f != 0 {
				if r == ' ' {
					pos++
				}
				for !isLWN(f2) && f2 != 0 {
					pos++
					f2 = c.flags(pos)
				}
				for r2 := c.cpt(pos); r2 == '\r' || r2 == '\n'; r2 = c.cpt(pos) {
					pos++
				}
				c.add(pos)
				continue
			}

			nws, lastNL := 0, 0
			for c.flags(pos+nws)&flagWhitespace != 0 {
				if r2 := c.cpt(pos + nws); r2 == '\r' || r2 == '\n' {
					lastNL = pos + nws + 1
				}
				nws++
			}
			// \s*[\r\n]+
			if lastNL > 0 {
				pos = lastNL
				c.add(pos)
				continue
			}
			// \s+(?!\S)
			if nws > 1 && c.cpt(pos+nws) != outOfRange {
				pos += nws - 1
				c.add(pos)
				continue
			}
			// \s+
			if nws > 0 {
				pos += nws
				c.add(pos)
				continue
			}
			// no match
			pos++
			c.add(pos)
		}
	}
	return out
}
