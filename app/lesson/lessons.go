package lesson

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/sample"
)

// All are the lessons, in the Teaching tab's order.
var All = []*Lesson{CacheBuys, SharedPrompt, Parallel, SmallBudget, PagedContiguous, Precision}

// greedy is a greedy request of n tokens, labelled for the heatmap.
func greedy(prompt string, n int, label string) engine.Request {
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	return engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, Sampling: &sp, Label: label}
}

// idle waits until no request is left in the engine.
func idle(v *Env) (*engine.Snapshot, error) {
	return v.Wait(func(s *engine.Snapshot) bool { return len(s.Requests) == 0 })
}

// waitAll waits for the lesson's requests to end, then for the engine to
// be idle.
func waitAll(v *Env, qs ...*Req) (*engine.Snapshot, error) {
	for _, q := range qs {
		if err := q.Wait(v.Ctx); err != nil {
			return nil, err
		}
	}
	return idle(v)
}

// waitLoad waits for a load to end, then for the engine to be idle.
func waitLoad(v *Env, g *LoadGen) (*engine.Snapshot, error) {
	select {
	case <-g.Done():
	case <-v.Ctx.Done():
		return nil, v.Ctx.Err()
	}
	return idle(v)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// cachePrompt is the prompt of the first lesson.
const cachePrompt = "Once upon a time"

// CacheBuys shows what the KV cache buys: the same reply with it and
// without it.
var CacheBuys = &Lesson{
	Name:     "What the cache buys",
	Purpose:  "The same greedy reply with the KV cache on, then off: with the cache each token computes one row; without it every token recomputes all before it.",
	Mode:     "owner",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Steps: []Step{{
		Explain: "With the KV cache: each new token computes one row and attends to the keys and values already stored.",
		Promise: "one row computed per token",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q, err := v.Submit(greedy(cachePrompt, 64, "with the cache"))
			if err != nil {
				return nil, err
			}
			v.Set("with", q)
			return waitAll(v, q)
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			f := v.Get("with").(*Req).Finals()[0]
			want := f.PromptTokens + f.Generated - 1
			return fmt.Sprintf("%s computed for %s of prompt and %s generated (%.2f ms a token)",
				engine.Count(f.Computed, "row"), engine.Count(f.PromptTokens, "token"), engine.Count(f.Generated, "token"), mean(v.Get("with").(*Req).Gaps())), f.Computed == want && f.Generated == 64
		},
	}, {
		Explain: "Without the cache: for every new token the engine recomputes the whole prefix, so each token costs more than the last.",
		Promise: "every token recomputes its whole prefix, and the text is the same",
		Do: func(v *Env) (*engine.Snapshot, error) {
			r := greedy(cachePrompt, 64, "without the cache")
			r.NoCache = true
			q, err := v.Submit(r)
			if err != nil {
				return nil, err
			}
			v.Set("without", q)
			s, err := waitAll(v, q)
			if err == nil {
				v.Chart(Series{Name: "with the KV cache", Y: v.Get("with").(*Req).Gaps()}, Series{Name: "without (recompute the prefix)", Y: q.Gaps()})
			}
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			with, without := v.Get("with").(*Req), v.Get("without").(*Req)
			a, b := with.Finals()[0], without.Finals()[0]
			// Token j (from 0) is computed from the prompt and j tokens.
			want := 0
			for j := range b.Generated {
				want += b.PromptTokens + j
			}
			same := with.Text(0) == without.Text(0)
			gaps := without.Gaps()
			q := max(len(gaps)/4, 1)
			text := "the same text"
			if !same {
				text = "different text"
			}
			return fmt.Sprintf("%s computed instead of %s (%.1f×); %.2f ms a token over the first quarter, %.2f over the last; %s",
				humanize.Comma(int64(b.Computed))+" rows", humanize.Comma(int64(a.Computed)), float64(b.Computed)/float64(max(a.Computed, 1)),
				mean(gaps[:min(q, len(gaps))]), mean(gaps[max(len(gaps)-q, 0):]), text), b.Computed >= want && same
		},
	}},
}

// sharedSystem is the shared-prompt lesson's long system prompt.
const sharedSystem = "You are a kind storyteller for young children. Tell short, gentle stories with simple words, friendly animals, bright colours and a happy ending. Every story has a beginning, a middle and an end, and each sentence is easy to read aloud at bedtime."

// sharedMessages are the three conversations' first messages.
var sharedMessages = []string{"Once upon a time, a little fox", "One day, a small blue bird", "Tom and his dog went to the park"}

// sharedRequest is conversation i's request: the system prompt's tokens,
// then its message's, so that every conversation's prompt starts with
// exactly the same tokens.
func sharedRequest(v *Env, i int) engine.Request {
	tok := v.E.Tokenizer()
	ids := tok.Encode(sharedSystem+"\n\n", true, false)
	ids = append(ids, tok.Encode(sharedMessages[i], false, false)...)
	sp := sample.DefaultParams()
	sp.Seed = uint64(i + 1)
	return engine.Request{Tokens: ids, MaxTokens: 160, IgnoreEOS: true, Sampling: &sp, Label: "Shared: " + strings.Join(strings.Fields(sharedMessages[i])[:3], " ")}
}

// sysBlocks is how many full blocks the system prompt fills.
func sysBlocks(v *Env, s *engine.Snapshot) int {
	return len(v.E.Tokenizer().Encode(sharedSystem+"\n\n", true, false)) / s.Cache.BlockSize
}

// generating reports whether every sample of each request has generated
// a token in s.
func generating(s *engine.Snapshot, n int, qs ...*Req) bool {
	for _, q := range qs {
		r, ok := q.Info(s)
		if !ok || len(r.Samples) < n {
			return false
		}
		for _, sm := range r.Samples {
			if sm.Generated < 1 || sm.State != "decode" {
				return false
			}
		}
	}
	return true
}

// refs lists the ref counts of blocks ids in s.
func refs(s *engine.Snapshot, ids []int) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = s.Cache.Blocks[id].Ref
	}
	return out
}

// SharedPrompt shows prefix sharing: three conversations with one long
// system prompt.
var SharedPrompt = &Lesson{
	Name:     "Shared system prompt",
	Purpose:  "Three conversations with one long system prompt: its full blocks are computed once and shared (ref count 3).",
	Mode:     "ref count",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Steps: []Step{{
		Explain: "A first conversation computes the long system prompt; each full block of it goes into the prefix cache, named by a hash of its tokens.",
		Promise: "every full block of the system prompt is in the prefix cache",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q, err := v.Submit(sharedRequest(v, 0))
			if err != nil {
				return nil, err
			}
			v.Set("q0", q)
			return v.Wait(func(s *engine.Snapshot) bool { return generating(s, 1, q) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			r, _ := v.Get("q0").(*Req).Info(s)
			table := blockTable(s, r.Samples[0].Seq)
			k := sysBlocks(v, s)
			if k < 1 || len(table) < k {
				return fmt.Sprintf("the system prompt fills %s; the conversation holds %s", engine.Count(k, "full block"), engine.Count(len(table), "block")), false
			}
			hashed := 0
			for _, id := range table[:k] {
				if s.Cache.Blocks[id].Hashed {
					hashed++
				}
			}
			v.Set("sys", append([]int(nil), table[:k]...))
			return fmt.Sprintf("%d of the system prompt's %s are in the prefix cache (blocks %v)", hashed, engine.Count(k, "full block"), table[:k]), hashed == k
		},
	}, {
		Explain: "Two more conversations with the same system prompt find those blocks in the prefix cache and share them instead of computing them.",
		Promise: "ref count ≥ 3 on every block of the system prompt",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q0 := v.Get("q0").(*Req)
			var qs []*Req
			for i := 1; i < 3; i++ {
				q, err := v.Submit(sharedRequest(v, i))
				if err != nil {
					return nil, err
				}
				qs = append(qs, q)
			}
			v.Set("others", qs)
			return v.Wait(func(s *engine.Snapshot) bool { return generating(s, 1, append(qs, q0)...) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			ids := v.Get("sys").([]int)
			rc := refs(s, ids)
			held := true
			for _, n := range rc {
				held = held && n >= 3
			}
			var cached []string
			for _, q := range v.Get("others").([]*Req) {
				r, _ := q.Info(s)
				cached = append(cached, fmt.Sprintf("%d of %d", r.CachedTokens, r.PromptTokens))
				held = held && r.CachedTokens >= len(ids)*s.Cache.BlockSize
			}
			return fmt.Sprintf("ref counts of the system prompt's blocks: %v; the new conversations reused %s prompt tokens", rc, strings.Join(cached, " and ")), held
		},
	}, {
		Explain: "When the replies end, the blocks stay in the prefix cache with no owner (ref 0), ready for the next conversation, until the pool needs the room.",
		Promise: "the system prompt's blocks stay cached after the conversations end",
		Do: func(v *Env) (*engine.Snapshot, error) {
			return waitAll(v, append(v.Get("others").([]*Req), v.Get("q0").(*Req))...)
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			ids := v.Get("sys").([]int)
			n := 0
			for _, id := range ids {
				if b := s.Cache.Blocks[id]; b.State == kvcache.BlockCached && b.Hashed {
					n++
				}
			}
			return fmt.Sprintf("%d of %s cached with ref 0", n, engine.Count(len(ids), "block")), n == len(ids)
		},
	}},
}

// parallelPrompt is the n = 4 lesson's prompt.
const parallelPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside with her friends in the park"

// parallelIDs is the prompt's tokens, cut by one if they would fill their
// last block: a partly filled last block is what the samples copy on
// write.
func parallelIDs(v *Env, bs int) []int {
	ids := v.E.Tokenizer().Encode(parallelPrompt, true, false)
	if len(ids)%bs == 0 {
		ids = ids[:len(ids)-1]
	}
	return ids
}

// Parallel shows n = 4 parallel samples forking one prompt.
var Parallel = &Lesson{
	Name:     "Parallel sampling n = 4",
	Purpose:  "Four samples fork one prompt: they share its blocks, and the first write into the shared last block copies it (copy on write).",
	Mode:     "ref count",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Steps: []Step{{
		Explain: "One request asks for four samples: the prompt is computed once, then the sequence forks into four that share its blocks.",
		Promise: "ref count 4 on the prompt's full blocks",
		Do: func(v *Env) (*engine.Snapshot, error) {
			sp := sample.DefaultParams()
			sp.Temperature, sp.Seed = 1, 4
			q, err := v.Submit(engine.Request{Tokens: parallelIDs(v, v.E.Config().Cache.BlockSize), N: 4, MaxTokens: 48, IgnoreEOS: true, Sampling: &sp, Label: "4 samples"})
			if err != nil {
				return nil, err
			}
			v.Set("q", q)
			return v.Wait(func(s *engine.Snapshot) bool { return generating(s, 4, q) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("q").(*Req)
			r, _ := q.Info(s)
			k := q.Prompt / s.Cache.BlockSize
			table := blockTable(s, r.Samples[0].Seq)
			if len(table) < k || k < 1 {
				return fmt.Sprintf("the prompt fills %s; sample 1 holds %s", engine.Count(k, "full block"), engine.Count(len(table), "block")), false
			}
			rc := refs(s, table[:k])
			held := true
			for _, n := range rc {
				held = held && n >= 4
			}
			return fmt.Sprintf("%d samples; ref counts of the prompt's %s: %v", len(r.Samples), engine.Count(k, "full block"), rc), held
		},
	}, {
		Explain: "Each sample writes its own next token into the prompt's last, partly filled block: the first write into a shared block copies it (copy on write).",
		Promise: "the prompt computed once, and a positive copy-on-write count",
		Do:      func(v *Env) (*engine.Snapshot, error) { return waitAll(v, v.Get("q").(*Req)) },
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			q := v.Get("q").(*Req)
			rows := 0 // prompt rows: each sample computes one row per token after its first
			for _, f := range q.Finals() {
				rows += f.Computed - max(f.Generated-1, 0)
			}
			cow := s.Cache.Metrics.CoWCopies
			return fmt.Sprintf("%s computed for 4 samples of a prompt of %s (%s); %s copied on write",
				engine.Count(rows, "prompt row"), engine.Count(q.Prompt, "token"), times(rows, q.Prompt), engine.Count(int(cow), "block")), rows == q.Prompt && cow > 0
		},
	}},
}

// times says how many times a prompt of n rows was computed.
func times(rows, n int) string {
	switch {
	case rows == n:
		return "once"
	case n > 0 && rows%n == 0:
		return fmt.Sprintf("%d times", rows/n)
	}
	return fmt.Sprintf("%.1f times", float64(rows)/float64(max(n, 1)))
}

// The small-budget lesson's load.
const (
	smallUsers  = 8
	smallPrompt = 64
	smallReply  = 96
	smallLen    = smallPrompt + smallReply
)

// SmallBudgetLoad is the small-budget lesson's load.
var SmallBudgetLoad = Load{Users: smallUsers, Prompt: smallPrompt, Reply: smallReply, Once: true, Seed: 1}

// peak tracks the most sequences that held a whole sequence's blocks at
// once (on the engine's goroutine).
type peak struct {
	mu   sync.Mutex
	n    int
	stop func() // ends the tracking
}

func (p *peak) get() int { p.mu.Lock(); defer p.mu.Unlock(); return p.n }

// fullSeqs counts the sequences in s that hold at least per device
// blocks: sequences of the full length, at once.
func fullSeqs(s *engine.Snapshot, per int) int {
	n := 0
	for _, q := range s.Cache.Seqs {
		if !q.Swapped && len(q.Blocks) >= per {
			n++
		}
	}
	return n
}

// trackFull records in a peak the most sequences of length L held at once.
func trackFull(v *Env, key string, L int) *peak {
	p := &peak{}
	v.Set(key, p)
	p.stop = v.Track(func(s *engine.Snapshot) {
		n := fullSeqs(s, (L+s.Cache.BlockSize-1)/s.Cache.BlockSize)
		p.mu.Lock()
		p.n = max(p.n, n)
		p.mu.Unlock()
	})
	return p
}

// SmallBudgetSettings are the small-budget lesson's settings for m: a
// budget of two and a half sequences of smallLen tokens at f16, room in
// the scheduler for every user.
func SmallBudgetSettings(base engine.Config, m *model.Model) (engine.Config, error) {
	sc := m.CacheConfig(base.Cache.BlockSize, 1, kvstore.F16, kvstore.F16)
	per := (smallLen + base.Cache.BlockSize - 1) / base.Cache.BlockSize
	base.Cache.K, base.Cache.V = kvstore.F16, kvstore.F16
	base.Cache.Budget = int64(per*5/2) * int64(kvstore.BlockBytes(sc))
	base.Sched.MaxSeqs = smallUsers
	return base, nil
}

// finishedAll checks that every request of a load read its whole reply.
func finishedAll(g *LoadGen, users, reply int) (string, bool) {
	st := g.Stats()
	ok := st.Finished == users && st.Failed == 0 && st.Refused == 0
	for _, f := range st.Finals {
		ok = ok && f.Reason == engine.FinishLength && f.Generated == reply
	}
	line := fmt.Sprintf("%d of %s finished all %s", st.Finished, engine.Count(users, "request"), engine.Count(reply, "token"))
	if st.Failed+st.Refused > 0 {
		line += fmt.Sprintf("; %d failed or refused: %s", st.Failed+st.Refused, st.LastErr)
	}
	return line, ok
}

// concurrency compares a measured peak with Capacity's prediction.
func concurrency(v *Env, s *engine.Snapshot, key string, users int) (string, bool) {
	fit, err := engine.Capacity(v.Model(), s.Config, smallLen)
	if err != nil {
		return err.Error(), false
	}
	got := v.Get(key).(*peak).get()
	v.Measure("sequences at once, "+key, got)
	want := min(fit.Seqs, users)
	d := got - want
	return fmt.Sprintf("at most %s of %d tokens (%s each) held at once; %s predicted for %s of K %s / V %s",
		engine.Count(got, "sequence"), smallLen, engine.Count(fit.PerSeq, "block"), engine.Count(fit.Seqs, "sequence"), engine.Count(fit.Blocks, "block"), s.Config.Cache.K, s.Config.Cache.V), d >= -1 && d <= 1
}

// SmallBudgetLength is the length of the small-budget lesson's
// sequences, prompt and reply, in tokens: the length its measured
// concurrency ("sequences at once, f16" and "… int4" in Result.Measured)
// is for.
const SmallBudgetLength = smallLen

// SmallBudget shows preemption: a pool too small for its users.
var SmallBudget = &Lesson{
	Name:     "Budget too small",
	Purpose:  "Eight users on a pool that holds about two of them: the scheduler preempts and everyone still finishes; at int4 the same budget holds more.",
	Mode:     "recency",
	Settings: SmallBudgetSettings,
	Steps: []Step{{
		Explain: fmt.Sprintf("%d users arrive at once, each for %d tokens. The pool holds about two and a half such sequences: as the replies grow it runs out of blocks, and the scheduler preempts the newest sequence, which gives its blocks back.", smallUsers, smallLen),
		Promise: "at least one preemption",
		Do: func(v *Env) (*engine.Snapshot, error) {
			trackFull(v, "f16", smallLen)
			g, err := v.Load(SmallBudgetLoad)
			if err != nil {
				return nil, err
			}
			v.Set("g16", g)
			return v.Wait(func(s *engine.Snapshot) bool { return s.Cache.Metrics.Preemptions > 0 })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			return fmt.Sprintf("%s in a pool of %s; %d running, %d waiting", engine.Count(int(m.Preemptions), "preemption"), engine.Count(m.TotalBlocks, "block"), s.Running, s.Waiting), m.Preemptions >= 1
		},
	}, {
		Explain: "Everyone still finishes: a preempted sequence waits, and when there is room again it recomputes its tokens and goes on.",
		Promise: "every request finishes",
		Do: func(v *Env) (*engine.Snapshot, error) {
			s, err := waitLoad(v, v.Get("g16").(*LoadGen))
			v.Get("f16").(*peak).stop() // the f16 phase is over
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			line, ok := finishedAll(v.Get("g16").(*LoadGen), smallUsers, smallReply)
			return fmt.Sprintf("%s, after %s", line, engine.Count(int(s.Cache.Metrics.Preemptions), "preemption")), ok
		},
	}, {
		Explain: "How many fit at once: only as many whole sequences as the pool has blocks for, as the capacity view in the Controls tab predicts.",
		Promise: "the sequences held at once match the capacity view's prediction, within one",
		Do:      func(v *Env) (*engine.Snapshot, error) { return v.E.Snapshot(), nil },
		Check:   func(v *Env, s *engine.Snapshot) (string, bool) { return concurrency(v, s, "f16", smallUsers) },
	}, {
		Explain: "The same budget with int4 K/V: a block takes about a third of the bytes, so the pool holds more blocks and more users run at once.",
		Promise: "every request finishes, and the sequences held at once match the prediction at int4, within one",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if err := v.Reconfigure(func(c *engine.Config) { c.Cache.K, c.Cache.V = kvstore.Int4, kvstore.Int4 }); err != nil {
				return nil, err
			}
			trackFull(v, "int4", smallLen)
			g, err := v.Load(SmallBudgetLoad)
			if err != nil {
				return nil, err
			}
			v.Set("g4", g)
			return waitLoad(v, g)
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			line, ok := finishedAll(v.Get("g4").(*LoadGen), smallUsers, smallReply)
			c, ok2 := concurrency(v, s, "int4", smallUsers)
			more := v.Get("int4").(*peak).get() > v.Get("f16").(*peak).get()
			return line + "; " + c, ok && ok2 && more
		},
	}},
}

// The paged-vs-contiguous lesson's load and context.
const (
	pcUsers   = 6
	pcPrompt  = 32
	pcReply   = 96
	pcContext = 512
)

// PagedContiguousLoad is the paged-vs-contiguous lesson's load.
var PagedContiguousLoad = Load{Users: pcUsers, Prompt: pcPrompt, Reply: pcReply, Once: true, OpenEnded: true, Seed: 2}

// trackRunning records the most sequences running at once, and the
// share of reserved slots that held a token then.
func trackRunning(v *Env, key string) *peakUse {
	p := &peakUse{}
	v.Set(key, p)
	p.stop = v.Track(func(s *engine.Snapshot) {
		m := s.Cache.Metrics
		p.mu.Lock()
		if s.Running > p.n || (s.Running == p.n && m.ReservedSlots > p.reserved) {
			p.n, p.reserved, p.filled = s.Running, m.ReservedSlots, m.FilledSlots
		}
		p.mu.Unlock()
	})
	return p
}

// peakUse is the most sequences running at once, with the slots reserved
// and filled then.
type peakUse struct {
	mu                  sync.Mutex
	n, reserved, filled int
	stop                func() // ends the tracking
}

func (p *peakUse) get() (n, reserved, filled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.reserved, p.filled
}

// PagedContiguous compares the paged allocator with reserving each
// sequence's whole context.
var PagedContiguous = &Lesson{
	Name:    "Paged vs contiguous",
	Purpose: "The same load with paged blocks, then with each sequence's whole context reserved up front: compare how many run at once, and the waste.",
	Mode:    "fill",
	Settings: func(base engine.Config, m *model.Model) (engine.Config, error) {
		base.Context = min(pcContext, m.Context)
		per := (base.Context + base.Cache.BlockSize - 1) / base.Cache.BlockSize
		sc := m.CacheConfig(base.Cache.BlockSize, 1, base.Cache.K, base.Cache.V)
		base.Cache.Budget = int64(per*5/2) * int64(kvstore.BlockBytes(sc))
		base.Sched.MaxSeqs = pcUsers
		return base, nil
	},
	Steps: []Step{{
		Explain: fmt.Sprintf("Paged: %d users, each reply allowed the whole %d-token context, each user reading %d tokens of it. Blocks are handed out as the text grows.", pcUsers, pcContext, pcReply),
		Promise: fmt.Sprintf("all %d users run at once", pcUsers),
		Do: func(v *Env) (*engine.Snapshot, error) {
			p := trackRunning(v, "paged")
			g, err := v.Load(PagedContiguousLoad)
			if err != nil {
				return nil, err
			}
			s, err := waitLoad(v, g)
			p.stop()
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			n, res, fill := v.Get("paged").(*peakUse).get()
			return fmt.Sprintf("up to %s at once in %s; then %s of %s reserved held a token", engine.Count(n, "sequence"), engine.Count(s.Cache.Metrics.TotalBlocks, "block"),
				humanize.Comma(int64(fill)), engine.Count(res, "slot")), n == pcUsers
		},
	}, {
		Explain: fmt.Sprintf("Contiguous: the same budget and load, but each sequence reserves its whole %d-token context up front, since nobody knows how long a reply will grow.", pcContext),
		Promise: "at least 1.5× as many sequences at once paged as contiguous",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if err := v.Reconfigure(func(c *engine.Config) { c.Cache.Allocator = kvcache.Contiguous }); err != nil {
				return nil, err
			}
			trackRunning(v, "contiguous")
			g, err := v.Load(PagedContiguousLoad)
			if err != nil {
				return nil, err
			}
			return waitLoad(v, g)
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			p, _, _ := v.Get("paged").(*peakUse).get()
			c, res, fill := v.Get("contiguous").(*peakUse).get()
			return fmt.Sprintf("paged: %s at once; contiguous: %s at once (%.1f×), when %s of %s reserved held a token",
				engine.Count(p, "sequence"), engine.Count(c, "sequence"), float64(p)/float64(max(c, 1)), humanize.Comma(int64(fill)), engine.Count(res, "slot")), c > 0 && float64(p) >= 1.5*float64(c)
		},
	}},
}

// precisionPrompt is the precision lesson's prompt.
const precisionPrompt = "Once upon a time, there was a little girl named Lily."

// precisionBudget is the precision lesson's budget.
const precisionBudget = 1 << 20

// Precision compares one budget at f16 and at int4 K/V.
var Precision = &Lesson{
	Name:    "f16 vs int4",
	Purpose: "One budget at f16, then at int4 K/V: how many more tokens fit, and how close the greedy reply stays.",
	Mode:    "precision",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) {
		base.Cache.K, base.Cache.V, base.Cache.Budget = kvstore.F16, kvstore.F16, precisionBudget
		return base, nil
	},
	Steps: []Step{{
		Explain: "At f16, each K and V value takes two bytes: the budget holds this many tokens. A greedy reply for reference.",
		Promise: "the pool holds tokens and the reply is generated",
		Do:      func(v *Env) (*engine.Snapshot, error) { return precisionRun(v, "f16") },
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			v.Set("t16", m.TotalBlocks*m.BlockSize)
			f := v.Get("f16").(*Req).Finals()[0]
			return fmt.Sprintf("%s fit in %s (%s a token); %s generated", humanize.Comma(int64(m.TotalBlocks*m.BlockSize))+" tokens",
				humanize.IBytes(uint64(precisionBudget)), humanize.IBytes(uint64(m.BytesPerToken+0.5)), engine.Count(f.Generated, "token")), m.TotalBlocks > 0 && f.Generated == 40
		},
	}, {
		Explain: "The same budget at int4: keys quantized per channel, values per token, four bits each with a scale. More tokens fit; the greedy reply stays close.",
		Promise: "more tokens held at int4 than at f16",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if err := v.Reconfigure(func(c *engine.Config) { c.Cache.K, c.Cache.V = kvstore.Int4, kvstore.Int4 }); err != nil {
				return nil, err
			}
			return precisionRun(v, "int4")
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			t16, t4 := v.Int("t16"), m.TotalBlocks*m.BlockSize
			a, b := v.Get("f16").(*Req).Text(0), v.Get("int4").(*Req).Text(0)
			return fmt.Sprintf("%s fit at int4 (%s a token), %.1f× the %s at f16; the replies agree on their first %d of %d words",
				humanize.Comma(int64(t4))+" tokens", humanize.IBytes(uint64(m.BytesPerToken+0.5)), float64(t4)/float64(max(t16, 1)), humanize.Comma(int64(t16)),
				commonPrefixWords(a, b), len(strings.Fields(a))), t4 > t16
		},
	}},
}

// precisionRun generates the precision lesson's greedy reply.
func precisionRun(v *Env, key string) (*engine.Snapshot, error) {
	q, err := v.Submit(greedy(precisionPrompt, 40, "greedy at "+key))
	if err != nil {
		return nil, err
	}
	v.Set(key, q)
	return waitAll(v, q)
}

// commonPrefixWords counts the leading words two texts share.
func commonPrefixWords(a, b string) int {
	x, y := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

// ByName finds a lesson.
func ByName(name string) (*Lesson, error) {
	for _, l := range All {
		if l.Name == name {
			return l, nil
		}
	}
	return nil, errors.New("no lesson is called " + name)
}
