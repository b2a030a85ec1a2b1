package native

import (
	"sync"
	"sync/atomic"
	"time"
)

// The helpers that share parallel's ranges with the calling goroutine. A
// goroutine started per call (sync.WaitGroup.Go) begins running 70 to
// 300 µs later on the 2-core development machine, longer than a decode
// step's matrix product takes, so the caller did nearly all the work alone.
// These helpers stay, and after each job spin for spinFor (on an atomic
// load, which Go preempts like any loop; runtime.Gosched instead churned
// the scheduler's locks) watching for the next before they park: a decode step's
// operations come microseconds apart, so they find each at once, as
// llama.cpp's spinning thread pool does. When the process is idle they park
// and cost nothing.
var workers struct {
	mu       sync.Mutex // held by the job's caller while a job runs
	started  atomic.Int32
	job      atomic.Pointer[job]
	gen      atomic.Uint64 // bumped for each job
	sleeping atomic.Int32
	wake     chan struct{}
	once     sync.Once
	_        [64]byte               // pre, written by callers and helpers, on a cache line of its own
	pre      atomic.Pointer[[]byte] // memory an idle helper reads ahead
}

// spinFor is how long an idle helper watches for work before it parks.
const spinFor = 2 * time.Millisecond

// perWorker sets the first range of a job: a perWorker-th of a worker's
// share (then of what is left).
var perWorker = 4

// job is one parallel call: ranges of [0, total) taken in turn, each a
// share of what is left (guided scheduling): large at first, for long
// streams through the weights, down to unit at the end, so that the
// workers finish together.
type job struct {
	f           func(a, b int) int32
	total, unit int
	div         int64        // a range is what is left / div
	next        atomic.Int64 // the start of the next range to take
	_           [56]byte     // done, which the caller polls, apart from next
	done        atomic.Int64 // elements finished
	bad         atomic.Int32 // the last nonzero status
}

// work takes ranges until none is left.
func (j *job) work() {
	for {
		a := j.next.Load()
		left := int64(j.total) - a
		if left <= 0 {
			return
		}
		n := (left/j.div + int64(j.unit) - 1) / int64(j.unit) * int64(j.unit)
		n = min(max(n, int64(j.unit)), left)
		if !j.next.CompareAndSwap(a, a+n) {
			continue
		}
		if rc := j.f(int(a), int(a+n)); rc != 0 {
			j.bad.Store(rc)
		}
		j.done.Add(n)
	}
}

// helper is the loop of one helper goroutine.
func helper() {
	w := &workers
	seen := w.gen.Load()
	for {
		t0 := time.Now()
		for i := 0; w.gen.Load() == seen; i++ {
			// Load before Swap: a Swap writes the cache line every
			// turn of the loop, and the caller reads gen and job.
			if w.pre.Load() != nil {
				if p := w.pre.Swap(nil); p != nil {
					readAhead(*p, seen)
				}
			}
			if i&1023 == 1023 && time.Since(t0) > spinFor {
				w.sleeping.Add(1)
				if w.gen.Load() == seen {
					<-w.wake
				}
				w.sleeping.Add(-1)
				t0 = time.Now()
			}
		}
		seen = w.gen.Load()
		if j := w.job.Load(); j != nil {
			j.work()
		}
	}
}

// parallel runs f on ranges of [0, total), multiples of unit but the last,
// taken in turn (the first a quarter of a worker's share, then a quarter of
// what is left to each, and so on) by the caller and up to
// workers-1 helpers, or on all of it at once when workers < 2 or !split.
// A call made while another runs gets no helpers. It returns the last
// nonzero status.
func parallel(nw, total, unit int, split bool, f func(a, b int) int32) int32 {
	if nw < 2 || !split || !workers.mu.TryLock() {
		return f(0, total)
	}
	defer workers.mu.Unlock()
	w := &workers
	w.once.Do(func() { w.wake = make(chan struct{}, 64) })
	for int(w.started.Load()) < nw-1 {
		w.started.Add(1)
		go helper()
	}
	j := &job{f: f, total: total, unit: unit, div: int64(perWorker * nw)}
	w.job.Store(j)
	w.gen.Add(1)
	for n := w.sleeping.Load(); n > 0; n-- {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	j.work()
	for j.done.Load() < int64(total) {
	}
	w.job.Store(nil)
	return j.bad.Load()
}

// readAhead reads b, a cache line at a time, until the next job comes: an
// idle helper brings the start of the next product's weights into the
// caches while the caller computes the steps between products (norms,
// RoPE, attention), when the memory would idle. The bytes are Go memory
// (the packed weights), so reading them here is safe.
func readAhead(b []byte, gen uint64) {
	var s byte
	for i := 0; i < len(b); i += 64 {
		s += b[i]
		if i&16383 == 0 && workers.gen.Load() != gen {
			break
		}
	}
	sink = s
}

var sink byte

// ReadAhead asks an idle helper to read b into the caches (see readAhead).
func ReadAhead(b []byte) {
	if workers.started.Load() > 0 {
		workers.pre.Store(&b)
	}
}
