package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"kvscope/engine/kvcache"
	"kvscope/engine/sched"
)

// Snapshot is an immutable picture of the engine after a step: the cache's
// blocks and metrics, every live request, and what the last step did.
type Snapshot struct {
	Taken    time.Time
	Step     int64             // the cache manager's step
	Config   Config            // the settings in force
	Context  int               // the context limit per sequence, in tokens
	Cache    *kvcache.Snapshot // every block's bookkeeping, the block tables and the metrics
	Requests []RequestInfo     // live requests, by id
	Waiting  int               // sequences queued without blocks
	Running  int               // sequences holding device blocks
	Swapped  int               // sequences whose blocks are in the host pool
	Paused   bool              // the scheduler is paused (teaching mode)
	Last     StepReport        // the last step
	// DecodeTPS is the tokens generated per second over the last
	// RateWindow, all requests together (0 once nothing was generated for
	// RateWindow).
	DecodeTPS float64
}

// RequestInfo describes one live request.
type RequestInfo struct {
	ID           uint64
	Label        string
	Samples      []SampleInfo
	PromptTokens int
	CachedTokens int // prompt tokens reused from the prefix cache
	MaxTokens    int
}

// SampleInfo describes one sample (sequence) of a request.
type SampleInfo struct {
	Seq         kvcache.SeqID
	State       string // waiting, prefill, decode, swapped
	Tokens      int    // tokens in its context (prompt and generated)
	Generated   int
	Preemptions int
	TPS         float64 // its generation speed, tokens per second
}

// StepReport says what one scheduler step did.
type StepReport struct {
	Step      int64
	Seqs      []SeqWork       // which sequences ran, with how many tokens
	Prefill   int             // prompt tokens computed
	Decode    int             // decode tokens computed
	Admitted  []kvcache.SeqID // sequences that got blocks
	Preempted []kvcache.SeqID
	SwappedIn []kvcache.SeqID
	// Blocks touched, from the cache's events in this step.
	Allocated, Hit, Evicted, Freed, Copied []int
	Duration                               time.Duration
	// Explain says in one line what happened and why.
	Explain string
}

// SeqWork is one sequence's share of a step.
type SeqWork struct {
	Seq     kvcache.SeqID
	Request uint64
	Start   int // first position computed
	Tokens  int
	Prefill bool
}

// explain says in one line what the step did.
func (r StepReport) explain() string {
	if len(r.Seqs) == 0 && len(r.Preempted) == 0 {
		return "nothing ran"
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("ran %s: %s, %s", Count(len(r.Seqs), "sequence"), Count(r.Decode, "decode token"), Count(r.Prefill, "prompt token")))
	if len(r.Admitted) > 0 {
		parts = append(parts, fmt.Sprintf("admitted %v", r.Admitted))
	}
	if len(r.Hit) > 0 {
		parts = append(parts, Count(len(r.Hit), "block")+" reused from the prefix cache")
	}
	if len(r.Allocated) > 0 {
		parts = append(parts, Count(len(r.Allocated), "block")+" allocated")
	}
	if len(r.Evicted) > 0 {
		parts = append(parts, Count(len(r.Evicted), "cached block")+" evicted for room")
	}
	if len(r.Copied) > 0 {
		parts = append(parts, "copy on write")
	}
	if len(r.Preempted) > 0 {
		parts = append(parts, fmt.Sprintf("preempted %v: the pool ran out of blocks", r.Preempted))
	}
	if len(r.SwappedIn) > 0 {
		parts = append(parts, fmt.Sprintf("swapped %v back in", r.SwappedIn))
	}
	return strings.Join(parts, "; ")
}

// publish builds and stores a snapshot (on the engine goroutine).
func (e *Engine) publish() {
	e.lastSnap = time.Now()
	w, r, s := e.sch.Counts()
	snap := &Snapshot{Taken: e.lastSnap, Step: e.mgr.Step(), Config: e.cfg, Context: e.context(e.cfg), Cache: e.mgr.Snapshot(),
		Waiting: w, Running: r, Swapped: s, Paused: e.paused, Last: e.last, DecodeTPS: e.tps.rate(e.lastSnap)}
	for _, id := range slices.Sorted(maps.Keys(e.reqs)) {
		rs := e.reqs[id]
		ri := RequestInfo{ID: rs.id, Label: rs.req.Label, PromptTokens: len(rs.prompt), CachedTokens: rs.cached, MaxTokens: rs.req.MaxTokens}
		for _, sm := range rs.samples {
			if sm.done {
				continue
			}
			held := len(sm.q.Tokens)
			if lim := sm.q.Opts.MaxLen; lim > 0 {
				held = min(held, lim) // the last token sampled at the limit never enters the cache
			}
			si := SampleInfo{Seq: sm.q.ID, Tokens: held, Generated: sm.generated, Preemptions: sm.q.Preemptions, State: sm.q.State.String()}
			if sm.q.State == sched.Running {
				si.State = "decode"
				if e.mgr.Has(sm.q.ID) && e.mgr.Computed(sm.q.ID) < len(sm.q.Tokens)-1 {
					si.State = "prefill"
				}
			}
			if sm.generated > 1 {
				si.TPS = float64(sm.generated-1) / time.Since(sm.first).Seconds()
			}
			ri.Samples = append(ri.Samples, si)
		}
		snap.Requests = append(snap.Requests, ri)
	}
	e.snap.Store(snap)
	e.watch.call(snap)
}

// budgetWords names a budget: a size, or "auto" for 0.
func budgetWords(b int64) string {
	if b == 0 {
		return "auto"
	}
	return Bytes(b)
}

// describeChange lists the settings that differ between two configs.
func describeChange(a, b Config) string {
	var d []string
	add := func(name string, x, y any) {
		if fmt.Sprint(x) != fmt.Sprint(y) {
			d = append(d, fmt.Sprintf("%s %v → %v", name, x, y))
		}
	}
	add("block size", a.Cache.BlockSize, b.Cache.BlockSize)
	add("budget", budgetWords(a.Cache.Budget), budgetWords(b.Cache.Budget))
	add("host budget", budgetWords(a.Cache.HostBudget), budgetWords(b.Cache.HostBudget))
	add("K", a.Cache.K, b.Cache.K)
	add("V", a.Cache.V, b.Cache.V)
	add("eviction", a.Cache.Eviction, b.Cache.Eviction)
	add("preemption", a.Cache.Preempt, b.Cache.Preempt)
	add("allocator", a.Cache.Allocator, b.Cache.Allocator)
	add("overflow", a.Cache.Overflow, b.Cache.Overflow)
	add("max sequences", a.Sched.MaxSeqs, b.Sched.MaxSeqs)
	add("step tokens", a.Sched.StepTokens, b.Sched.StepTokens)
	add("policy", a.Sched.Policy, b.Sched.Policy)
	add("watermark", a.Sched.Watermark, b.Sched.Watermark)
	add("context", a.Context, b.Context)
	if len(d) == 0 {
		return "no change"
	}
	return strings.Join(d, ", ")
}

// RateWindow is the window DecodeTPS is measured over: the tokens
// generated in the last RateWindow, over RateWindow. It falls to zero
// within RateWindow of the engine going idle or pausing, and follows slow
// motion, since the time between steps counts.
const RateWindow = 2 * time.Second

// rateMeter counts tokens generated over the last RateWindow of wall time.
type rateMeter struct {
	at     []time.Time
	tokens []int
}

// add records n tokens generated at t.
func (m *rateMeter) add(t time.Time, n int) {
	if n <= 0 {
		return
	}
	m.at = append(m.at, t)
	m.tokens = append(m.tokens, n)
	m.trim(t)
}

// trim forgets what is older than the window before now.
func (m *rateMeter) trim(now time.Time) {
	i := 0
	for i < len(m.at) && now.Sub(m.at[i]) > RateWindow {
		i++
	}
	m.at, m.tokens = m.at[i:], m.tokens[i:]
}

// rate is the tokens per second over the window ending at now.
func (m *rateMeter) rate(now time.Time) float64 {
	m.trim(now)
	n := 0
	for _, x := range m.tokens {
		n += x
	}
	return float64(n) / RateWindow.Seconds()
}

// busy reports whether the window still holds tokens (the rate is not
// zero yet).
func (m *rateMeter) busy() bool { return len(m.at) > 0 }
