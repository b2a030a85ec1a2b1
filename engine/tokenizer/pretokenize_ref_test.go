package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// The pre-tokenizers' patterns as regular expressions for a backtracking
// engine with C++ std::regex's leftmost-first alternation (regexp2), over
// the same collapsed or widened text: the reference the hand-written
// matchers must agree with. (They backtrack quadratically on long runs of
// whitespace, which is why the package does not use them.)
const (
	refWS = `\t\n\v\f\r `
	refL  = `\u00D2A-Za-z`
	refN  = `\u00D10-9`
	refP  = `\u00D3!-#%-*,-/:-;?-@\[-\]_\{\}`

	refQwen2 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])` +
		`|[^\r\n` + refL + refN + `]?[` + refL + `]+` +
		`|[` + refN + `]` +
		`| ?[^` + refWS + refL + refN + `]+[\r\n]*` +
		`|[` + refWS + `]*[\r\n]+` +
		`|[` + refWS + `]+(?![^` + refWS + `])` +
		`|[` + refWS + `]+`
	refDefaultPunct    = `[` + refP + `\$\+<=>\^~\|]+`
	refDigits          = `[` + refN + `]+`
	refDigit           = `[` + refN + `]`
	refThreeDigits     = `[0-9][0-9][0-9]`
	refNewline         = `[\r\n]`
	refSpaceLetter     = `[` + refWS + `]?[` + refL + `]+`
	refSpacePunct      = `[` + refWS + `]?[` + refP + `]+`
	refCJK             = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
	refTrailingWS      = `[` + refWS + `]+\z`
	refDeepseekLetters = `[` + refWS + `]?[` + "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af" +
		"\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481" +
		"\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b" +
		"\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d" +
		"\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec" +
		"\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d" +
		"\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee" +
		"\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06" +
		"\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb" +
		"\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"
	refDeepseekPunct = `[` + refWS + `]?[!-/:-~` + "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
)

// reSplit makes a step that cuts each piece into the matches of pattern
// and the runs between them.
func reSplit(pattern string, in stepInput) preStep {
	re := regexp2.MustCompile(pattern, regexp2.None)
	return preStep{in: in, split: func(text []rune, offsets []int) []int {
		out := make([]int, 0, len(offsets))
		start := 0
		for _, n := range offsets {
			piece := text[start : start+n]
			start += n
			prev := 0
			m, err := re.FindRunesMatch(piece)
			for err == nil && m != nil {
				if m.Index > prev {
					out = append(out, m.Index-prev)
				}
				if m.Length > 0 {
					out = append(out, m.Length)
				}
				prev = m.Index + m.Length
				m, err = re.FindNextMatch(m)
			}
			if prev < n {
				out = append(out, n-prev)
			}
		}
		return out
	}}
}

// refPreTokenizers are the regular-expression versions of the
// pre-tokenizers whose steps are hand-written matchers.
var refPreTokenizers = map[string]*preTokenizer{
	"default": {steps: []preStep{
		reSplit(refDefaultPunct, inCollapsed), stepGPT2, reSplit(refDigits, inCollapsed), reSplit(refThreeDigits, inWide),
	}},
	"qwen2":     {steps: []preStep{reSplit(refQwen2, inCollapsed)}},
	"starcoder": {steps: []preStep{reSplit(refDigit, inCollapsed), stepGPT2}},
	"deepseek-llm": {steps: []preStep{
		reSplit(refNewline, inWide), reSplit(refDeepseekLetters, inWide), reSplit(refDeepseekPunct, inWide),
		reSplit(refTrailingWS, inWide), reSplit(refCJK, inWide), reSplit(refDigits, inCollapsed),
	}},
	"deepseek-coder": {steps: []preStep{
		reSplit(refNewline, inWide), reSplit(refSpaceLetter, inCollapsed), reSplit(refSpacePunct, inCollapsed),
		reSplit(refCJK, inWide), reSplit(refDigit, inCollapsed),
	}},
}

// refAlphabet holds code points of every class the patterns tell apart:
// ASCII whitespace, letters, digits, the contraction letters, punctuation
// in and out of each class, non-ASCII whitespace, letters (cased and not),
// digits, marks, symbols, CJK and Hangul, a surrogate and invalid UTF-8.
var refAlphabet = []string{
	" ", " ", " ", "\t", "\n", "\r", "\v", "\f", "a", "Z", "s", "t", "r", "e", "v", "m", "l", "d", "S", "L", "E",
	"0", "7", "'", "'", "!", "$", "+", "<", "^", "|", "~", "_", "{", "[", "`", "@", "#",
	"\u00a0", "\u3000", "\u2028", "\u0085", "é", "µ", "ß", "Ω", "ж", "ا", "\u0301", "٣", "²", "€", "©", "«",
	"漢", "字", "가", "\u0800", "\uff01", "\uff21", "\u2018", "\u3001", "😀", "\xed\xa0\x80", "\xff", "\xc3",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(refAlphabet[r.IntN(len(refAlphabet))])
	}
	return b.String()
}

func checkSameSplit(t *testing.T, name string, text string) {
	t.Helper()
	p, err := newPreTokenizer(name)
	if err != nil {
		t.Fatal(err)
	}
	got, want := p.split(text), refPreTokenizers[name].split(text)
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("%s: split(%q) = %q, the regular expressions give %q", name, text, got, want)
	}
}

// The hand-written matchers cut text exactly where the regular expressions
// do, on random text over an alphabet of every class they tell apart.
func TestPreTokenizersMatchRegexps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name := range refPreTokenizers {
		for i := range 3000 {
			checkSameSplit(t, name, randomText(r, 1+i%40))
		}
	}
}

// FuzzPreTokenizersMatchRegexps is TestPreTokenizersMatchRegexps on fuzzed
// text.
func FuzzPreTokenizersMatchRegexps(f *testing.F) {
	for _, s := range []string{"", "I'LL 12345", "a  \n b", "x\n\n  y", "日本 語", "Ab, 漢字 7\n", "  \t1", "'re'VE !!\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name := range refPreTokenizers {
			checkSameSplit(t, name, s)
		}
	})
}
