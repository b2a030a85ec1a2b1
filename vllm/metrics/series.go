package metrics

import (
	"sync"
	"time"
)

// Series keeps the latest samples of one server, oldest first. It is safe
// for concurrent use.
type Series struct {
	mu      sync.RWMutex
	max     int
	samples []Sample
}

// NewSeries returns a Series that keeps up to max samples (0 means 3600).
func NewSeries(max int) *Series {
	if max <= 0 {
		max = 3600
	}
	return &Series{max: max}
}

// Add appends s, dropping the oldest sample when full.
func (ts *Series) Add(s Sample) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.samples) == ts.max {
		copy(ts.samples, ts.samples[1:])
		ts.samples = ts.samples[:len(ts.samples)-1]
	}
	ts.samples = append(ts.samples, s)
}

// Len returns the number of samples kept.
func (ts *Series) Len() int {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return len(ts.samples)
}

// Samples returns a copy of the samples, oldest first.
func (ts *Series) Samples() []Sample {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return append([]Sample(nil), ts.samples...)
}

// Last returns the latest sample, false where there is none.
func (ts *Series) Last() (Sample, bool) {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	if len(ts.samples) == 0 {
		return Sample{}, false
	}
	return ts.samples[len(ts.samples)-1], true
}

// window returns the samples of the last d (all for d <= 0), from the last
// counter reset on: a counter going down means the server restarted.
func (ts *Series) window(d time.Duration, counter func(Sample) float64) []Sample {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	n := len(ts.samples)
	if n == 0 {
		return nil
	}
	lo := n - 1
	end := ts.samples[n-1].Time
	for lo > 0 {
		prev := ts.samples[lo-1]
		if d > 0 && end.Sub(prev.Time) > d {
			break
		}
		if counter(prev) > counter(ts.samples[lo]) {
			break
		}
		lo--
	}
	return ts.samples[lo:]
}

// HitRate returns the prefix-cache hit rate over the last d: the hits'
// increase over the queries' (0 where no queries were made). d <= 0 means
// the whole series.
func (ts *Series) HitRate(d time.Duration) float64 {
	w := ts.window(d, func(s Sample) float64 { return s.PrefixCacheQueries })
	if len(w) < 2 {
		return 0
	}
	first, last := w[0], w[len(w)-1]
	dq := last.PrefixCacheQueries - first.PrefixCacheQueries
	dh := last.PrefixCacheHits - first.PrefixCacheHits
	if dq <= 0 || dh < 0 {
		return 0
	}
	return dh / dq
}

// Rate returns a counter's increase per second over the last d (0 with
// fewer than two samples). d <= 0 means the whole series.
func (ts *Series) Rate(d time.Duration, counter func(Sample) float64) float64 {
	w := ts.window(d, counter)
	if len(w) < 2 {
		return 0
	}
	first, last := w[0], w[len(w)-1]
	dt := last.Time.Sub(first.Time).Seconds()
	if dt <= 0 {
		return 0
	}
	return (counter(last) - counter(first)) / dt
}

// Preemptions is the counter function for Rate's preemptions per second.
func Preemptions(s Sample) float64 { return s.Preemptions }

// PrefixCacheQueries is the counter function for Rate's queried tokens per
// second.
func PrefixCacheQueries(s Sample) float64 { return s.PrefixCacheQueries }
