// This file holds the lesson "Budget too small": eight users on a pool
// that holds about two of them, preempted and recomputed, then the same
// budget at int4.

package lesson

import (
	"fmt"
	"slices"
	"sync"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

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
	Picture:  1,
	Steps: []Step{{
		Explain: fmt.Sprintf("%d users arrive at once, each for %d tokens, in a pool of about two and a half such sequences. Held at the first preemption: the pool ran out of blocks, and the scheduler preempted the newest sequence, which gave its blocks back.", smallUsers, smallLen),
		Promise: "a sequence preempted in this step",
		Do: func(v *Env) (*engine.Snapshot, error) {
			trackFull(v, "f16", smallLen)
			g, err := v.Load(SmallBudgetLoad)
			if err != nil {
				return nil, err
			}
			v.Set("g16", g)
			return v.StepUntil(g.Done(), func(s *engine.Snapshot) bool { return len(s.Last.Preempted) > 0 })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			return fmt.Sprintf("this step preempted %s; %s so far in a pool of %s; %d running, %d waiting",
					engine.Count(len(s.Last.Preempted), "sequence"), engine.Count(int(m.Preemptions), "preemption"), engine.Count(m.TotalBlocks, "block"), s.Running, s.Waiting),
				len(s.Last.Preempted) > 0
		},
	}, {
		Explain: "A preempted sequence waits without blocks. Held where one runs again: there was room, so it recomputes its tokens from position 0 and goes on.",
		Promise: "a preempted sequence recomputes its tokens in this step",
		Do: func(v *Env) (*engine.Snapshot, error) {
			return v.StepUntil(v.Get("g16").(*LoadGen).Done(), func(s *engine.Snapshot) bool { _, ok := recomputing(s); return ok })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			w, ok := recomputing(s)
			if !ok {
				return "no preempted sequence ran again", false
			}
			return fmt.Sprintf("%s recomputes %s (positions %d–%d) after its preemption", seqLabel(s, w.Seq), engine.Count(w.Tokens, "token"), w.Start, w.Start+w.Tokens-1), w.Start == 0
		},
	}, {
		Explain: "Everyone finishes. How many fit at once: only as many whole sequences as the pool has blocks for, as the capacity view in the Controls tab predicts.",
		Promise: "every request finishes, and the sequences held at once match the capacity view's prediction, within one",
		Do: func(v *Env) (*engine.Snapshot, error) {
			s, err := v.RunUntil(v.Get("g16").(*LoadGen).Done())
			v.Get("f16").(*peak).stop() // the f16 phase is over
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			line, ok := finishedAll(v.Get("g16").(*LoadGen), smallUsers, smallReply)
			c, ok2 := concurrency(v, s, "f16", smallUsers)
			return fmt.Sprintf("%s, after %s; %s", line, engine.Count(int(s.Cache.Metrics.Preemptions), "preemption"), c), ok && ok2
		},
	}, {
		Explain: "The same budget and users with int4 K/V: a block takes about a third of the bytes, so the pool holds more blocks. Held when more whole sequences are held at once than f16 ever held.",
		Promise: "more whole sequences held at once than at f16",
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
			f16 := v.Get("f16").(*peak).get()
			return v.StepUntil(g.Done(), func(s *engine.Snapshot) bool { return fullSeqs(s, perSeq(s)) > f16 })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			now, f16 := fullSeqs(s, perSeq(s)), v.Get("f16").(*peak).get()
			return fmt.Sprintf("%s of %d tokens held at once now, in a pool of %s; at f16 at most %d", engine.Count(now, "whole sequence"), smallLen,
				engine.Count(s.Cache.Metrics.TotalBlocks, "block"), f16), now > f16
		},
	}, {
		Explain: "At int4 everyone finishes too, with as many held at once as the capacity view predicts for int4.",
		Promise: "every request finishes, and the sequences held at once match the prediction at int4, within one",
		Do: func(v *Env) (*engine.Snapshot, error) {
			s, err := v.RunUntil(v.Get("g4").(*LoadGen).Done())
			v.Get("int4").(*peak).stop()
			return s, err
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			line, ok := finishedAll(v.Get("g4").(*LoadGen), smallUsers, smallReply)
			c, ok2 := concurrency(v, s, "int4", smallUsers)
			more := v.Get("int4").(*peak).get() > v.Get("f16").(*peak).get()
			return line + "; " + c, ok && ok2 && more
		},
	}},
}

// perSeq is how many blocks a whole sequence of the lesson holds in s.
func perSeq(s *engine.Snapshot) int { return (smallLen + s.Cache.BlockSize - 1) / s.Cache.BlockSize }

// recomputing finds, in the step s reports, a sequence preempted before
// that computes its tokens again.
func recomputing(s *engine.Snapshot) (engine.SeqWork, bool) {
	for _, r := range s.Requests {
		for _, sm := range r.Samples {
			if sm.Preemptions == 0 {
				continue
			}
			if i := slices.IndexFunc(s.Last.Seqs, func(w engine.SeqWork) bool { return w.Seq == sm.Seq && w.Prefill && w.Start == 0 }); i >= 0 {
				return s.Last.Seqs[i], true
			}
		}
	}
	return engine.SeqWork{}, false
}

// seqLabel names sequence seq by its request's label in s.
func seqLabel(s *engine.Snapshot, seq kvcache.SeqID) string {
	for _, r := range s.Requests {
		for _, sm := range r.Samples {
			if sm.Seq == seq {
				return r.Label
			}
		}
	}
	return fmt.Sprintf("sequence %d", seq)
}
