package native

import (
	"math"
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

// job is one parallel call over [0, total), cut into one contiguous region
// per worker. A worker takes ranges from the front of its own region, a
// quarter of what is left in it at a time (down to unit), so that its
// ranges follow one another in memory: the kernels' prefetches past the end
// of one range fetch the start of the worker's next, and each core streams
// through one run of the weights. A worker whose region is empty steals
// from the back of the others', half of what is left, so that a worker that
// started late or was preempted does not hold the call up. (A single
// shared cursor, as before, dealt consecutive ranges to alternate workers,
// which broke both streams at every range.)
type job struct {
	f           func(a, b int) int32
	total, unit int
	regions     []region
	joined      atomic.Int32 // workers that took a region index
	_           [56]byte     // done, which the caller polls, apart from the rest
	done        atomic.Int64 // elements finished
	bad         atomic.Int32 // the last nonzero status
}

// region is a worker's part of a job: [lo, hi) packed as lo | hi<<32,
// changed only by compare-and-swap.
type region struct {
	span atomic.Uint64
	_    [56]byte
}

func pack(lo, hi int64) uint64 { return uint64(lo) | uint64(hi)<<32 }

func unpack(v uint64) (lo, hi int64) { return int64(v & 0xffffffff), int64(v >> 32) }

// newJob cuts [0, total) into nw regions of whole units.
func newJob(f func(a, b int) int32, total, unit, nw int) *job {
	j := &job{f: f, total: total, unit: unit, regions: make([]region, nw)}
	units := (total + unit - 1) / unit
	for k := range nw {
		lo, hi := int64(units*k/nw*unit), int64(min(units*(k+1)/nw*unit, total))
		j.regions[k].span.Store(pack(lo, max(lo, hi)))
	}
	return j
}

// take cuts a range off region r: from the front (own) or the back, of
// what is left / div, rounded up to units; ok is false when it is empty.
func (j *job) take(r *region, own bool, div int64) (a, b int64, ok bool) {
	u := int64(j.unit)
	for {
		v := r.span.Load()
		lo, hi := unpack(v)
		if lo >= hi {
			return 0, 0, false
		}
		n := min(max((hi-lo)/div/u*u, u), hi-lo)
		if own {
			a, b = lo, lo+n
			if r.span.CompareAndSwap(v, pack(b, hi)) {
				return a, b, true
			}
		} else {
			a, b = hi-n, hi
			if a%u != 0 && a > lo { // keep range starts on units (the last unit may be short)
				a = a / u * u
			}
			if r.span.CompareAndSwap(v, pack(lo, a)) {
				return a, b, true
			}
		}
	}
}

// run does f on [a, b) and counts it done.
func (j *job) run(a, b int64) {
	if rc := j.f(int(a), int(b)); rc != 0 {
		j.bad.Store(rc)
	}
	j.done.Add(b - a)
}

// work runs worker k's region, then steals until every region is empty.
func (j *job) work(k int) {
	if k < len(j.regions) {
		for {
			a, b, ok := j.take(&j.regions[k], true, 4)
			if !ok {
				break
			}
			j.run(a, b)
		}
	}
	for {
		stole := false
		for i := range j.regions {
			if i == k {
				continue
			}
			if a, b, ok := j.take(&j.regions[i], false, 2); ok {
				j.run(a, b)
				stole = true
			}
		}
		if !stole {
			return
		}
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
			j.work(int(j.joined.Add(1)))
		}
	}
}

// parallel runs f on ranges of [0, total), multiples of unit but the last,
// by the caller and up to nw-1 helpers, each through its own region first
// (job), or on all of it at once when nw < 2 or !split. A call made while
// another runs gets no helpers. It returns the last nonzero status.
func parallel(nw, total, unit int, split bool, f func(a, b int) int32) int32 {
	if nw < 2 || !split || total > math.MaxUint32 || !workers.mu.TryLock() {
		return f(0, total)
	}
	defer workers.mu.Unlock()
	w := &workers
	w.once.Do(func() { w.wake = make(chan struct{}, 64) })
	for int(w.started.Load()) < nw-1 {
		w.started.Add(1)
		go helper()
	}
	j := newJob(f, total, unit, nw)
	w.job.Store(j)
	w.gen.Add(1)
	for n := w.sleeping.Load(); n > 0; n-- {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	j.work(0)
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
