// This file holds the list of lessons and the helpers their steps share;
// each lesson is a file of its own (cachebuys.go, shared.go,
// parallel.go, smallbudget.go, paged.go, precision.go).

package lesson

import (
	"errors"
	"fmt"
	"strings"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/sample"
)

// All are the lessons, in the Teaching tab's order.
var All = []*Lesson{CacheBuys, SharedPrompt, Parallel, SmallBudget, PagedContiguous, Precision}

// ByName finds a lesson.
func ByName(name string) (*Lesson, error) {
	for _, l := range All {
		if l.Name == name {
			return l, nil
		}
	}
	return nil, errors.New("no lesson is called " + name)
}

// greedy is a greedy request of n tokens, labelled for the heatmap.
func greedy(prompt string, n int, label string) engine.Request {
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	return engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, Sampling: &sp, Label: label}
}

// ended is closed once every one of the requests has ended.
func ended(qs ...*Req) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, q := range qs {
			<-q.done
		}
	}()
	return done
}

// generated is how many tokens sample 0 of q has generated in s (-1 when
// q is not in s).
func generated(s *engine.Snapshot, q *Req) int {
	r, ok := q.Info(s)
	if !ok || len(r.Samples) == 0 {
		return -1
	}
	return r.Samples[0].Generated
}

// work returns what the step s reports computed for request id's sample
// with sequence seq (any of its samples when seq is 0).
func work(s *engine.Snapshot, id uint64, seq kvcache.SeqID) (engine.SeqWork, bool) {
	for _, w := range s.Last.Seqs {
		if w.Request == id && (seq == 0 || w.Seq == seq) {
			return w, true
		}
	}
	return engine.SeqWork{}, false
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

// generating reports whether every sample of each request has generated
// a token in s, and at least n samples are there.
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

// commonPrefixWords counts the leading words two texts share.
func commonPrefixWords(a, b string) int {
	x, y := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}
