package constrain

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// class is a set of bytes.
type class [4]uint64

func (c *class) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		c[b>>6] |= 1 << (b & 63)
	}
}

func (c class) has(b byte) bool { return c[b>>6]&(1<<(b&63)) != 0 }

func (c *class) or(d class) {
	for i := range c {
		c[i] |= d[i]
	}
}

func byteRange(lo, hi byte) class {
	var c class
	c.add(lo, hi)
	return c
}

// sym is one element of a rule's alternative: a class index (>= 0), a rule
// reference (-2 - rule), or symEnd, the end of an alternative.
type sym int32

const symEnd sym = -1

func ruleRef(r int) sym { return sym(-2 - r) }

// builder collects rules before they are frozen into a Grammar.
type builder struct {
	classes  []class
	classIdx map[class]int32
	rules    [][][]sym // rule -> alternatives -> sequence
	lits     map[string]int
	budget   int // rules left before the grammar is refused as too large
}

// maxRules bounds a grammar's size, so that a hostile schema (maxLength:
// 1e9, say) is refused rather than exhausting memory.
const maxRules = 200000

var errTooLarge = errors.New("the constraint is too large (over 200000 grammar rules)")

func newBuilder() *builder {
	return &builder{classIdx: map[class]int32{}, lits: map[string]int{}, budget: maxRules}
}

// cls returns the symbol of byte class c.
func (b *builder) cls(c class) sym {
	if i, ok := b.classIdx[c]; ok {
		return sym(i)
	}
	b.classes = append(b.classes, c)
	b.classIdx[c] = int32(len(b.classes) - 1)
	return sym(len(b.classes) - 1)
}

// newRule reserves a rule to be set later.
func (b *builder) newRule() (int, error) {
	if b.budget <= 0 {
		return 0, errTooLarge
	}
	b.budget--
	b.rules = append(b.rules, nil)
	return len(b.rules) - 1, nil
}

// rule adds a rule with the given alternatives.
func (b *builder) rule(alts ...[]sym) (int, error) {
	r, err := b.newRule()
	if err != nil {
		return 0, err
	}
	b.rules[r] = alts
	return r, nil
}

// lit is the sequence of byte classes spelling s.
func (b *builder) lit(s string) []sym {
	out := make([]sym, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = b.cls(byteRange(s[i], s[i]))
	}
	return out
}

// litRule is a rule matching s exactly (shared between uses).
func (b *builder) litRule(s string) (int, error) {
	if r, ok := b.lits[s]; ok {
		return r, nil
	}
	r, err := b.rule(b.lit(s))
	b.lits[s] = r
	return r, err
}

// seq joins sequences.
func seq(parts ...[]sym) []sym {
	var out []sym
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ref is the one-symbol sequence referring to rule r.
func ref(r int) []sym { return []sym{ruleRef(r)} }

// star is a rule matching x zero or more times (x is a rule).
func (b *builder) star(x int) (int, error) {
	r, err := b.newRule()
	if err != nil {
		return 0, err
	}
	b.rules[r] = [][]sym{seq(ref(x), ref(r)), nil}
	return r, nil
}

// repeat is a rule matching x from lo to hi times (hi < 0: no bound).
func (b *builder) repeat(x, lo, hi int) (int, error) {
	if hi >= 0 && hi-lo > maxRules || lo > maxRules {
		return 0, errTooLarge
	}
	var tail []sym // what follows the lo required copies
	switch {
	case hi < 0:
		s, err := b.star(x)
		if err != nil {
			return 0, err
		}
		tail = ref(s)
	case hi > lo:
		// opt_k ::= "" | x opt_{k-1}, so that at most hi-lo more follow.
		prev := -1
		for k := 1; k <= hi-lo; k++ {
			alt := ref(x)
			if prev >= 0 {
				alt = seq(alt, ref(prev))
			}
			r, err := b.rule(nil, alt)
			if err != nil {
				return 0, err
			}
			prev = r
		}
		tail = ref(prev)
	}
	var body []sym
	for range lo {
		body = append(body, ruleRef(x))
	}
	return b.rule(seq(body, tail))
}

// Grammar is a compiled constraint. Its automaton is built lazily as
// Matchers walk it, under a lock: a Grammar may be shared by many Matchers
// and goroutines.
type Grammar struct {
	mu      sync.Mutex
	classes []class
	code    []sym   // alternatives, each ended by symEnd
	alts    [][]int // rule -> start positions in code
	root    int

	nodes   []node // interned stack nodes; node 0 is the empty stack
	nodeIdx map[node]int32
	states  []stateInfo // state 0 is dead (no stacks)
	// trans[st*256+c] is 1 + the state after byte c from st, 0 while
	// not yet computed.
	trans    []int32
	stateIdx map[string]int32
	start    int32

	masks     map[maskKey]*cachedMask
	maskBytes int    // the memory of masks
	uses      uint64 // masks asked for, a clock for letting the least recently used go

	// scratch for walk: its stack and its bitmap in the order of a
	// trie's tokens
	walkStack []struct{ next, end, st, depth int32 }
	order     []uint64

	// scratch for closures
	visited map[node]struct{}
	buf     []int32
}

// node is a stack entry: a position in code and the node below it.
type node struct{ pos, parent int32 }

type stateInfo struct {
	nodes  []int32 // sorted top nodes (0: an empty stack, the match is complete)
	accept bool
	done   bool // accept, and no byte can follow
	// The state's plain run (see plain), once worked out: the bytes that
	// all lead to one live state, next.
	planned bool
	plain   summary // the part of the run's bytes a summary can say
	live    summary // the bytes that lead to a live state, or more (a summary's groups)
	next    int32
	char    int32     // 1 + charStep's finding, -1 none, 0 not yet looked at
	run     []runStep // the plain run as far as spans has needed it
	charRun []runStep // the run by characters (charStep's) as far as charSpans has needed it
	// whether the runs end after their last step (their last state has
	// no plain run, or no character step)
	runEnds, charRunEnds bool
}

// summary is a byte set in 128 bits: printable ASCII and DEL one bit each
// (bits 0-95 for 0x20-0x7f), the control characters in 4 groups of 8
// (bits 96-99) and the bytes from 0x80 in 16 groups of 8 (bits 100-115).
// A trie node keeps the summary of the bytes below it, so that a walk
// checks a subtree against a state's plain run in two words.
type summary [2]uint64

func summaryBit(c byte) int {
	switch {
	case c >= 0x80:
		return 100 + int(c-0x80)>>3
	case c < 0x20:
		return 96 + int(c)>>3
	}
	return int(c - 0x20)
}

// summarize is the summary of the bytes of c.
func summarize(c *class) summary { return summarizeBy(c, false) }

// inner is the summary of the groups of bytes wholly in c: a set whose
// summary is within it is within c.
func inner(c *class) summary { return summarizeBy(c, true) }

// summarizeBy is the summary of c, a group's bit set where any of its
// bytes is in c, or with whole where all of them are.
func summarizeBy(c *class, whole bool) summary {
	// 0x20-0x5f and 0x60-0x7f one bit each, then a bit per group of 8.
	s := summary{c[0]>>32 | c[1]<<32, c[1] >> 32}
	in := func(b uint64) bool {
		if whole {
			return b == 0xff
		}
		return b != 0
	}
	for g := range 4 {
		if in(c[0] >> (8 * g) & 0xff) {
			s[1] |= 1 << (32 + g)
		}
	}
	for g := range 16 {
		if in(c[2+g/8] >> (8 * (g % 8)) & 0xff) {
			s[1] |= 1 << (36 + g)
		}
	}
	return s
}

// maxStacks bounds the stacks of one parse position: a pathologically
// ambiguous pattern is cut there rather than exhausting memory.
const maxStacks = 1 << 14

// freeze compiles the builder's rules with root as the start.
func (b *builder) freeze(root int) *Grammar {
	g := &Grammar{classes: b.classes, alts: make([][]int, len(b.rules)), root: root,
		nodeIdx: map[node]int32{}, stateIdx: map[string]int32{}, masks: map[maskKey]*cachedMask{}, visited: map[node]struct{}{}}
	for r, alts := range b.rules {
		for _, a := range alts {
			g.alts[r] = append(g.alts[r], len(g.code))
			g.code = append(g.code, a...)
			g.code = append(g.code, symEnd)
		}
	}
	g.nodes = []node{{-1, -1}}
	g.states = []stateInfo{{}}
	g.trans = make([]int32, 256)
	g.stateIdx[""] = 0
	g.buf = g.buf[:0]
	clear(g.visited)
	for _, a := range g.alts[root] {
		g.closure(int32(a), 0)
	}
	g.start = g.intern(g.buf)
	return g
}

func (g *Grammar) nodeID(n node) int32 {
	if id, ok := g.nodeIdx[n]; ok {
		return id
	}
	g.nodes = append(g.nodes, n)
	id := int32(len(g.nodes) - 1)
	g.nodeIdx[n] = id
	return id
}

// closure adds to g.buf the top nodes reached from position pos with the
// stack parent below: terminals stay, rule references expand into their
// alternatives, and the end of an alternative returns to the parent.
func (g *Grammar) closure(pos, parent int32) {
	key := node{pos, parent}
	if _, seen := g.visited[key]; seen || len(g.buf) >= maxStacks {
		return
	}
	g.visited[key] = struct{}{}
	s := g.code[pos]
	switch {
	case s >= 0:
		g.buf = append(g.buf, g.nodeID(key))
	case s == symEnd:
		if parent == 0 {
			g.buf = append(g.buf, 0)
			return
		}
		p := g.nodes[parent]
		g.closure(p.pos, p.parent)
	default:
		r := int(-2 - s)
		cont := parent
		if g.code[pos+1] != symEnd {
			cont = g.nodeID(node{pos + 1, parent})
		}
		for _, a := range g.alts[r] {
			g.closure(int32(a), cont)
		}
	}
}

// intern returns the state of the set of top nodes in ids (sorted and
// deduplicated here).
func (g *Grammar) intern(ids []int32) int32 {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	key := unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(ids))), len(ids)*4)
	if id, ok := g.stateIdx[key]; ok {
		return id
	}
	st := stateInfo{nodes: slices.Clone(ids)}
	st.accept = len(ids) > 0 && ids[0] == 0
	st.done = st.accept && len(ids) == 1
	g.states = append(g.states, st)
	if n := len(g.trans) + 256; n > cap(g.trans) {
		// Double, rather than append's quarter for a large slice: a new
		// state's row would otherwise copy the whole table too often.
		grown := make([]int32, len(g.trans), 2*n)
		copy(grown, g.trans)
		g.trans = grown
	}
	g.trans = g.trans[:len(g.trans)+256]
	id := int32(len(g.states) - 1)
	g.stateIdx[string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(st.nodes))), len(ids)*4))] = id
	return id
}

// step returns the state after byte c from state st (0: dead). The
// caller holds g.mu.
func (g *Grammar) step(st int32, c byte) int32 {
	if v := g.trans[int(st)<<8|int(c)]; v != 0 {
		return v - 1
	}
	return g.compute(st, c)
}

// compute works out and records the transition of step.
func (g *Grammar) compute(st int32, c byte) int32 {
	g.buf = g.buf[:0]
	clear(g.visited)
	for _, n := range g.states[st].nodes {
		if n == 0 {
			continue
		}
		nd := g.nodes[n]
		if g.classes[g.code[nd.pos]].has(c) {
			g.closure(nd.pos+1, nd.parent)
		}
	}
	next := int32(0)
	if len(g.buf) > 0 {
		next = g.intern(g.buf)
	}
	// Every byte that the same top nodes match leads to the same state:
	// record them all, so that a state's 256 bytes cost a closure per
	// distinct set of matching nodes, not per byte.
	same := g.sameAs(st, c)
	row := g.trans[int(st)<<8 : int(st)<<8+256]
	for w, m := range same {
		for m != 0 {
			row[w<<6|bits.TrailingZeros64(m)] = next + 1
			m &= m - 1
		}
	}
	g.trans[int(st)<<8|int(c)] = next + 1
	return next
}

// sameAs is the bytes that the same top nodes of st match as c: those
// that lead where c does.
func (g *Grammar) sameAs(st int32, c byte) class {
	var same class
	for b := range same {
		same[b] = ^uint64(0)
	}
	for _, n := range g.states[st].nodes {
		if n == 0 {
			continue
		}
		cl := &g.classes[g.code[g.nodes[n].pos]]
		if cl.has(c) {
			same[0], same[1], same[2], same[3] = same[0]&cl[0], same[1]&cl[1], same[2]&cl[2], same[3]&cl[3]
		} else {
			same[0], same[1], same[2], same[3] = same[0]&^cl[0], same[1]&^cl[1], same[2]&^cl[2], same[3]&^cl[3]
		}
	}
	return same
}

// plan works out st's plain run: of its live successors, the one the most
// bytes lead to (next), and those bytes (plain). Inside a JSON string,
// say, every character but the quote, the backslash and the start of a
// multi-byte character leads back to the same state.
func (g *Grammar) plan(st int32) *stateInfo {
	if !g.states[st].planned {
		// The bytes split into groups by the top nodes they match; groups
		// whose nodes go on to the same places lead to the same state
		// (the ranges of one character class, say). The largest is the
		// run, and only its state is worked out, not those the other
		// bytes lead to.
		var live class
		for _, n := range g.states[st].nodes {
			if n != 0 {
				live.or(g.classes[g.code[g.nodes[n].pos]])
			}
		}
		type group struct {
			bytes class
			n     int
			to    []node // where the matching nodes go on, sorted
		}
		var groups []group
		for left := live; left != (class{}); {
			w := 0
			for left[w] == 0 {
				w++
			}
			c := byte(w<<6 | bits.TrailingZeros64(left[w]))
			same := g.sameAs(st, c)
			n := 0
			for i := range same {
				left[i] &^= same[i]
				n += bits.OnesCount64(same[i])
			}
			to := g.goesOn(st, c)
			k := slices.IndexFunc(groups, func(gr group) bool { return slices.Equal(gr.to, to) })
			if k < 0 {
				groups = append(groups, group{to: to})
				k = len(groups) - 1
			}
			groups[k].bytes.or(same)
			groups[k].n += n
		}
		var plain class
		most := 0
		for _, gr := range groups {
			if gr.n > most {
				plain, most = gr.bytes, gr.n
			}
		}
		next := int32(0)
		if most > 0 {
			w := 0
			for plain[w] == 0 {
				w++
			}
			next = g.step(st, byte(w<<6|bits.TrailingZeros64(plain[w])))
		}
		if next != 0 {
			// Record the run's bytes as the automaton's own steps, so
			// that the walk and Advance never part.
			row := g.trans[int(st)<<8 : int(st)<<8+256]
			for b := range 256 {
				if plain.has(byte(b)) {
					switch row[b] {
					case 0:
						row[b] = next + 1
					case next + 1:
					default:
						plain[b>>6] &^= 1 << (b & 63)
					}
				}
			}
		} else {
			plain = class{}
		}
		// A byte that a top node matches leads to a live state (its
		// closure holds at least a node or the end of the stack).
		info := &g.states[st] // after the step, which may grow g.states
		info.planned, info.next, info.plain, info.live = true, next, inner(&plain), summarize(&live)
	}
	return &g.states[st]
}

// goesOn is where the top nodes of st that match c go on: the positions
// after them, an alternative's end taken back to the rule that called it
// (sorted, without repeats). Bytes for which it is the same lead to the
// same state.
func (g *Grammar) goesOn(st int32, c byte) []node {
	var to []node
	for _, n := range g.states[st].nodes {
		if n == 0 {
			continue
		}
		nd := g.nodes[n]
		if !g.classes[g.code[nd.pos]].has(c) {
			continue
		}
		at := node{nd.pos + 1, nd.parent}
		for g.code[at.pos] == symEnd && at.parent != 0 {
			at = g.nodes[at.parent]
		}
		if g.code[at.pos] == symEnd {
			at = node{-1, 0} // the end of the stack
		}
		to = append(to, at)
	}
	slices.SortFunc(to, func(a, b node) int {
		if a.pos != b.pos {
			return int(a.pos - b.pos)
		}
		return int(a.parent - b.parent)
	})
	return slices.Compact(to)
}

// spans follows st's plain run for up to depth bytes of set (a trie
// node's bytes below, whose subtree goes depth deeper) and returns how
// many bytes of it every string of set's bytes keeps valid, and the state
// there: each state along the run must take all of set to the next one,
// and a state whose run comes back to itself takes any length (depth).
// The run is worked out only as far as a set has needed it, so that a
// new state's first mask plans no state the walk does not reach. The
// caller holds g.mu.
func (g *Grammar) spans(st int32, set summary, depth int) (int, int32) {
	return g.follow(st, set, depth, false)
}

// charSpans is spans by characters: it follows charStep from st for up
// to depth characters and returns how many characters every valid UTF-8
// string whose ASCII bytes (and control characters, by their summary) are
// in set keeps the output valid for, and the state there.
func (g *Grammar) charSpans(st int32, set summary, depth int) (int, int32) {
	const ascii = 1<<36 - 1 // summary bits of word 1 below the multi-byte groups
	set[1] &= ascii
	return g.follow(st, set, depth, true)
}

// follow is spans (chars false) or charSpans (chars true).
func (g *Grammar) follow(st int32, set summary, depth int, chars bool) (int, int32) {
	run := g.states[st].run
	if chars {
		run = g.states[st].charRun
	}
	// run[i].common only shrinks with i: find the first known step set
	// leaves, then work out more of the run while set keeps to it.
	known := min(len(run), depth)
	lo, hi := 0, known
	for lo < hi {
		mid := (lo + hi) / 2
		if c := &run[mid].common; set[0]&^c[0]|set[1]&^c[1] == 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for lo == len(run) && lo < depth && (lo == 0 || !run[lo-1].loops) {
		var ok bool
		if run, ok = g.extend(st, chars); !ok {
			break // the run ends here
		}
		if c := &run[lo].common; set[0]&^c[0]|set[1]&^c[1] != 0 {
			break
		}
		lo++
	}
	switch {
	case lo == 0:
		return 0, st
	case lo == depth || run[lo-1].loops:
		return depth, run[lo-1].st
	}
	return lo, run[lo-1].st
}

// runStep is one step of a state's plain run (by bytes, or by characters):
// the bytes every step so far takes along it (a summary's part), the state
// after it, and whether that state's run comes back to itself (the run's
// last step then).
type runStep struct {
	common summary
	st     int32
	loops  bool
}

// extend works out one more step of st's run (its byte run, or with chars
// its character run: charStep's) and returns the run, and false where it
// ends (or loops) before that step.
func (g *Grammar) extend(st int32, chars bool) ([]runStep, bool) {
	info := &g.states[st]
	run, ended := info.run, &info.runEnds
	if chars {
		run, ended = info.charRun, &info.charRunEnds
	}
	if *ended {
		return run, false
	}
	from, common := st, summary{^uint64(0), ^uint64(0)}
	if k := len(run); k > 0 {
		if run[k-1].loops {
			return run, false
		}
		from, common = run[k-1].st, run[k-1].common
	}
	next := g.plan(from).next
	if chars {
		next = g.charStep(from)
	}
	info = &g.states[st] // plan and charStep may grow g.states
	if next == 0 {
		if chars {
			info.charRunEnds = true
		} else {
			info.runEnds = true
		}
		return run, false
	}
	plain := &g.states[from].plain
	common[0] &= plain[0]
	common[1] &= plain[1]
	run = append(run, runStep{common: common, st: next, loops: next == from})
	if chars {
		info.charRun = run
	} else {
		info.run = run
	}
	return run, true
}

// stops reports whether no byte of set keeps the output valid from st.
func (g *Grammar) stops(st int32, set summary) bool {
	live := &g.plan(st).live
	return set[0]&live[0]|set[1]&live[1] == 0
}

// charStep returns the state that every character of st's plain run
// leads to: the run's next state, where every multi-byte UTF-8 character
// also leads there, through live states for each of its bytes (a JSON
// string's characters, say, bounded or not); 0 where that does not hold.
// The caller holds g.mu.
func (g *Grammar) charStep(st int32) int32 {
	info := g.plan(st)
	if info.char == 0 {
		next := info.next
		ok := next != 0 && g.utf8Lead(st, next)
		info = &g.states[st] // the walk may grow g.states
		info.char = -1
		if ok {
			info.char = next + 1
		}
	}
	return max(info.char-1, 0)
}

// utf8Lead walks the pairs of (state, decoder state) that multi-byte
// characters reach from st, and reports whether all are live and every
// character ends at to.
func (g *Grammar) utf8Lead(st, to int32) bool {
	type pair struct {
		st int32
		u  byte
	}
	var room [32]pair
	seen := room[:0]
	todo := []pair{{st, 0}}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		lo, hi := utf8Bytes(p.u)
		prev := pair{-1, utf8Bad}
		next := &utf8Table[p.u]
		for c := lo; c <= hi; c++ {
			u := next[c]
			if u == utf8Bad {
				continue
			}
			t := g.trans[int(p.st)<<8|c] - 1
			if t < 0 {
				t = g.compute(p.st, byte(c))
			}
			if (pair{t, u}) == prev {
				continue // as the byte before
			}
			prev = pair{t, u}
			switch {
			case t == 0:
				return false
			case u == 0:
				if t != to {
					return false
				}
			case !slices.Contains(seen, prev):
				if len(seen) > 256 {
					return false
				}
				seen = append(seen, prev)
				todo = append(todo, prev)
			}
		}
	}
	return true
}

// utf8Table is utf8Next as a table.
var utf8Table = func() (t [utf8Bad + 1][256]byte) {
	for u := range t {
		for c := range 256 {
			t[u][c] = utf8Next(byte(u), byte(c))
		}
	}
	return t
}()

// utf8Bytes is the range of bytes that may follow in decoder state u
// (utf8Next), past the ASCII ones: the leads of multi-byte characters
// between them, else the continuation bytes.
func utf8Bytes(u byte) (lo, hi int) {
	if u == 0 {
		return 0xc2, 0xf4
	}
	return 0x80, 0xbf
}

// A Matcher follows one output through a Grammar. It is not safe for
// concurrent use; give each output its own (they may share the Grammar).
type Matcher struct {
	g  *Grammar
	st int32
}

// NewMatcher returns a Matcher at the start of g.
func (g *Grammar) NewMatcher() *Matcher { return &Matcher{g: g, st: g.start} }

// Advance feeds the bytes of text and reports whether they keep the output
// valid. On false the Matcher is left where it was.
func (m *Matcher) Advance(text string) bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	st := m.st
	for i := 0; i < len(text) && st != 0; i++ {
		st = m.g.step(st, text[i])
	}
	if st == 0 {
		return false
	}
	m.st = st
	return true
}

// Accepting reports whether the output so far is a complete match.
func (m *Matcher) Accepting() bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.g.states[m.st].accept
}

// Done reports whether the output is a complete match that nothing can
// extend.
func (m *Matcher) Done() bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.g.states[m.st].done
}

// Reset puts the Matcher back at the start.
func (m *Matcher) Reset() { m.st = m.g.start }

// checked refuses a grammar that matches nothing (its start is dead),
// and builds the automaton of one that does (warm).
func checked(g *Grammar, what string) (*Grammar, error) {
	if g.start == 0 {
		return nil, fmt.Errorf("%s matches nothing", what)
	}
	g.warm(maxWarmStates)
	return g, nil
}

// maxWarmStates bounds the states warm builds (1 KiB of transitions
// each), and maxWarmWork the stack nodes they hold in all.
const (
	maxWarmStates = 4096
	maxWarmWork   = 1 << 18
)

// warm builds the automaton's states breadth first from the start, every
// byte of each, until it is whole or has limit states. A schema's first
// masks otherwise build hundreds of states as the walk meets them (each
// character of a bounded string is one, and each byte within a
// multi-byte character another), which would make those steps several
// times the others; built here, with the compile, every step reads a
// table.
func (g *Grammar) warm(limit int) {
	work := 0 // stack nodes of the states worked out, a bound on a very ambiguous grammar's time
	for st := int32(1); int(st) < len(g.states) && len(g.states) < limit && work < maxWarmWork; st++ {
		work += len(g.states[st].nodes)
		for c := range 256 {
			if g.trans[int(st)<<8|c] == 0 {
				g.compute(st, byte(c))
			}
		}
	}
}

// States is how many parse positions g's automaton has built so far (each
// holds a 1 KiB transition table): what a long-lived Grammar costs in
// memory.
func (g *Grammar) States() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.states)
}

// Match reports whether text is a complete match of g.
func (g *Grammar) Match(text string) bool {
	m := g.NewMatcher()
	return m.Advance(text) && m.Accepting()
}
