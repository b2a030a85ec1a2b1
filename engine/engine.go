package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"kvscope/engine/backend"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/ring"
	"kvscope/engine/sample"
	"kvscope/engine/sched"
	"kvscope/engine/tokenizer"
)

// Engine runs requests on one model and one KV cache. Its methods are safe
// for concurrent use.
type Engine struct {
	model *model.Model
	tok   *tokenizer.Tokenizer
	cons  constrained // the vocabulary trie and mask of constrained requests, built on first use

	mu     sync.Mutex
	cmds   []func()
	closed bool
	wake   chan struct{}
	done   chan struct{}

	snap   atomic.Pointer[Snapshot]
	watch  watchers // snapshot subscribers
	events *ring.Log[Event]
	// limits holds the settings in force and the pool's shape, for the
	// callers that must not wait for a step (Config, Submit's checks).
	limits  atomic.Pointer[limits]
	nextReq atomic.Uint64
	// pending holds submitted requests the loop has not taken yet (guarded
	// by mu), so that their streams end even if the loop stops first.
	pending map[uint64]*reqState

	// Owned by the loop goroutine.
	cfg         Config
	store       backend.Cache
	mgr         *kvcache.Manager
	sch         *sched.Scheduler
	seqs        map[kvcache.SeqID]*seqState
	gone        map[kvcache.SeqID]*seqState // finished since the last event flush
	reqs        map[uint64]*reqState
	nextSeq     kvcache.SeqID
	paused      bool
	delay       time.Duration
	cacheCursor uint64
	last        StepReport
	lastSnap    time.Time
	tps         rateMeter
	// abandonAfter is how long a cancelled request's stream waits for a
	// reader (see newStream).
	abandonAfter time.Duration
}

// New starts an engine for a loaded model and its tokenizer. Close stops it.
func New(m *model.Model, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	e := &Engine{
		model:  m,
		tok:    tok,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		events: ring.New(8192, func(ev *Event, id uint64) { ev.ID = id }),
		seqs:   map[kvcache.SeqID]*seqState{},
		gone:   map[kvcache.SeqID]*seqState{},

		abandonAfter: abandonAfter,
		reqs:         map[uint64]*reqState{},
		pending:      map[uint64]*reqState{},
	}
	if err := e.validate(cfg); err != nil {
		return nil, err
	}
	if err := e.build(cfg); err != nil {
		return nil, err
	}
	sc, err := sched.New(cfg.schedConfig(), e.mgr)
	if err != nil {
		return nil, err
	}
	e.sch = sc
	e.publish()
	go e.loop()
	return e, nil
}

// Model returns the engine's model.
func (e *Engine) Model() *model.Model { return e.model }

// Tokenizer returns the engine's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// build makes the store and manager for cfg (the loop's state).
func (e *Engine) build(cfg Config) error {
	var step int64
	if e.mgr != nil {
		step = e.mgr.Step()
	}
	st, mgr, err := NewPool(e.model, cfg.Cache, e.context(cfg), cfg.Sched.MaxSeqs, step)
	if err != nil {
		return err
	}
	e.store, e.mgr, e.cacheCursor = st, mgr, 0
	e.setConfig(cfg)
	return nil
}

// NewPool builds a paged KV cache for model m under cache settings c: the
// K/V tensors on m's backend (m.NewCache), sized by PoolConfig for
// maxSeqs sequences of ctx tokens, and the cache manager over them, with
// ctx as every sequence's context limit; its steps count from firstStep.
// It is the one constructor of a pool: the engine builds each of its pools
// with it, and so does anything that runs the model on a cache of its own
// (the perplexity command).
func NewPool(m *model.Model, c CacheConfig, ctx, maxSeqs int, firstStep int64) (backend.Cache, *kvcache.Manager, error) {
	sc, budget, err := PoolConfig(m, c, ctx, maxSeqs)
	if err != nil {
		return nil, nil, err
	}
	st, err := m.NewCache(sc)
	if err != nil {
		return nil, nil, err
	}
	host := c.HostBudget
	if host == 0 {
		host = budget
	}
	mgr, err := kvcache.New(kvcache.Config{FirstStep: firstStep,
		BlockSize: sc.BlockSize, BlockBytes: kvstore.BlockBytes(sc), Budget: int64(sc.Blocks) * int64(kvstore.BlockBytes(sc)),
		HostBudget: host, Allocator: c.Allocator, Eviction: c.Eviction,
		KPrecision: sc.K.String(), VPrecision: sc.V.String(), MaxLen: ctx, Overflow: c.Overflow,
	}, st)
	if err != nil {
		return nil, nil, err
	}
	return st, mgr, nil
}

// limits is what a request is checked against before it reaches the loop.
type limits struct {
	cfg       Config
	context   int // the context limit in force
	blockSize int
	blocks    int // blocks in the pool
}

func (l *limits) blocksFor(tokens int) int { return (tokens + l.blockSize - 1) / l.blockSize }

// setConfig makes cfg the configuration in force and publishes it with the
// pool's shape (the loop's goroutine).
func (e *Engine) setConfig(cfg Config) {
	e.cfg = cfg
	e.limits.Store(&limits{cfg: cfg, context: e.context(cfg), blockSize: e.mgr.BlockSize(), blocks: e.mgr.NumBlocks()})
}

// do queues f to run on the engine goroutine.
func (e *Engine) do(f func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.cmds = append(e.cmds, f)
	e.wakeUp()
	return nil
}

// call runs f on the engine goroutine and waits for it.
func (e *Engine) call(f func() error) error {
	res := make(chan error, 1)
	if err := e.do(func() { res <- f() }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-e.done:
		// The engine may have run f just before closing.
		select {
		case err := <-res:
			return err
		default:
			return ErrClosed
		}
	}
}

// ErrClosed is returned by calls on a closed engine.
var ErrClosed = errors.New("the engine is closed")

// Close stops the engine: running requests end as cancelled. It waits for
// the engine goroutine to finish.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.wakeUp()
	<-e.done
	return nil
}

func (e *Engine) loop() {
	defer close(e.done)
	defer e.endPending()
	// A read of the model's mapping that faults (the file shrank or was
	// rewritten on disk) panics here instead of killing the process.
	debug.SetPanicOnFault(true)
	defer func() {
		if r := recover(); r != nil {
			err := e.model.File.Fault(r)
			if err == nil {
				err = fmt.Errorf("engine failure: %v\n%s", r, debug.Stack())
			}
			e.failAll(err)
			e.mu.Lock()
			e.closed = true
			e.mu.Unlock()
		}
	}()
	for {
		if e.commands() {
			e.cancelAll()
			e.publish()
			return
		}
		if e.paused || e.sch.Idle() {
			e.publish()
			if e.tps.busy() {
				// The rate falls to zero over its window: publish again
				// as it does, unless a command comes first.
				select {
				case <-e.wake:
				case <-time.After(RateWindow / 8):
				}
				continue
			}
			<-e.wake
			continue
		}
		e.step()
		e.rest(time.Now())
	}
}

// commands runs the queued commands and reports whether the engine is
// closing (the loop's goroutine).
func (e *Engine) commands() (closed bool) {
	e.mu.Lock()
	cmds, closed := e.cmds, e.closed
	e.cmds = nil
	e.mu.Unlock()
	for _, f := range cmds {
		f()
	}
	e.flushCacheEvents() // what the commands did (a cancellation's frees)
	return closed
}

// rest waits out the slow-motion delay after a step that ended at from.
// Commands that arrive meanwhile (a Submit, a cancellation, SetDelay) run
// at once, and the wait goes on to the step's full delay: however many
// chats wake the engine, a step starts at most once per delay. Pausing or
// closing ends the wait.
func (e *Engine) rest(from time.Time) {
	for e.delay > 0 {
		left := time.Until(from.Add(e.delay))
		if left <= 0 {
			return
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			return
		case <-e.wake:
			t.Stop()
			e.mu.Lock()
			closed := e.closed
			e.mu.Unlock()
			if closed {
				e.wakeUp() // the loop's top closes
				return
			}
			e.commands()
			if e.paused {
				return
			}
		}
	}
}

// Submit queues a request and returns its stream without waiting for the
// engine's current step. Errors a user can fix (a prompt that does not fit,
// bad sampling or overflow settings) come back here, before anything runs;
// if the settings change before the engine takes the request and it no
// longer fits, its stream ends with FinishError and the reason. Cancelling
// ctx ends the request and frees its blocks.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	ids := r.Tokens
	if ids == nil {
		if r.Prompt == "" {
			return nil, errors.New("the prompt is empty")
		}
		ids = e.tok.Encode(r.Prompt, true, r.ParseSpecial)
	}
	if len(ids) == 0 {
		return nil, errors.New("the prompt has no tokens")
	}
	for _, id := range ids {
		if id < 0 || id >= e.model.Vocab {
			return nil, fmt.Errorf("token id %d is outside the vocabulary (0..%d)", id, e.model.Vocab-1)
		}
	}
	sp := sample.DefaultParams()
	if r.Sampling != nil {
		sp = *r.Sampling
	}
	if r.N == 0 {
		r.N = 1
	}
	rs := &reqState{req: r, prompt: ids, params: sp, ctx: ctx, submitted: time.Now(), done: make(chan struct{})}
	if err := checkFits(rs, e.limits.Load()); err != nil {
		return nil, err
	}
	rs.id = e.nextReq.Add(1)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	rs.stream = newStream(rs.id, ctx, e.done, e.abandonAfter)
	e.pending[rs.id] = rs
	e.cmds = append(e.cmds, func() { e.admit(rs) })
	e.mu.Unlock()
	e.wakeUp()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				e.do(func() { e.cancel(rs, "the request's context was cancelled") })
			case <-rs.finished():
			}
		}()
	}
	return rs.stream, nil
}

// admit takes a submitted request into the engine (the loop's goroutine).
func (e *Engine) admit(rs *reqState) {
	e.mu.Lock()
	delete(e.pending, rs.id)
	e.mu.Unlock()
	if err := checkFits(rs, e.limits.Load()); err != nil {
		// The settings changed between Submit and now.
		e.event(Event{Kind: EventFinish, Request: rs.id, Text: fmt.Sprintf("%s refused: %v", rs.name(), err)})
		rs.end(FinishError, err)
		return
	}
	if rs.ctx.Err() != nil {
		rs.end(FinishCancelled, nil)
		return
	}
	e.reqs[rs.id] = rs
	e.startSample(rs, 0, nil)
	e.event(Event{Kind: EventSubmit, Request: rs.id, Seq: rs.samples[0].q.ID, Tokens: len(rs.prompt),
		Text: fmt.Sprintf("%s: %s, n = %d", rs.name(), Count(len(rs.prompt), "prompt token"), rs.req.N)})
}

// endPending ends the streams of requests the loop never took (it stopped
// first, after a fault).
func (e *Engine) endPending() {
	e.mu.Lock()
	e.closed = true
	p := e.pending
	e.pending = map[uint64]*reqState{}
	e.cmds = nil
	e.mu.Unlock()
	for _, rs := range p {
		rs.end(FinishCancelled, nil)
	}
}

// wakeUp makes the loop look at its commands.
func (e *Engine) wakeUp() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// checkFits refuses a request that cannot be served under limits l: a
// prompt that leaves no room to generate, an overflow policy the context is
// too short for, a sequence larger than the whole cache. The same checks
// run at Submit and when the loop takes the request.
func checkFits(rs *reqState, l *limits) error {
	pol := overflow(rs, l.cfg)
	if err := kvcache.CheckLimit(l.context, pol, 0, l.blockSize); err != nil {
		return fmt.Errorf("%s overflow with a context of %d tokens: %w", pol, l.context, err)
	}
	if len(rs.prompt) >= l.context && pol == kvcache.Stop {
		return fmt.Errorf("the prompt is %d tokens; the context holds %d, so nothing can be generated (shorten it, or choose a rolling or truncating overflow policy)", len(rs.prompt), l.context)
	}
	need := l.blocksFor(min(len(rs.prompt)+1, l.context))
	if l.cfg.Cache.Allocator == kvcache.Contiguous {
		// A sample reserves its whole length; parallel samples wait for
		// room if they cannot all be reserved at once.
		need = l.blocksFor(maxLen(rs, l.cfg, l.context))
	}
	if need > l.blocks {
		return fmt.Errorf("the prompt needs %d blocks of %d tokens; the whole cache has %d (raise the cache budget)", need, l.blockSize, l.blocks)
	}
	return nil
}

// overflow is the overflow policy of rs's samples under cfg.
func overflow(rs *reqState, cfg Config) kvcache.OverflowPolicy {
	if rs.req.Overflow != nil {
		return *rs.req.Overflow
	}
	return cfg.Cache.Overflow
}

// maxLen is the most tokens a sample of rs can hold: the context, or, in
// contiguous mode, the prompt plus MaxTokens (the reservation).
func maxLen(rs *reqState, cfg Config, context int) int {
	if cfg.Cache.Allocator == kvcache.Contiguous && rs.req.MaxTokens > 0 {
		return min(context, len(rs.prompt)+rs.req.MaxTokens)
	}
	return context
}

// seqOpts is the cache's options for a sample of rs. A contiguous
// reservation shorter than the context holds the whole sample (MaxTokens
// ends it first), so no overflow policy can act on it: it gets Stop, whose
// limit may be as short as it likes.
func (e *Engine) seqOpts(rs *reqState) kvcache.SeqOptions {
	ctx := e.context(e.cfg)
	limit, pol := maxLen(rs, e.cfg, ctx), overflow(rs, e.cfg)
	if limit < ctx {
		pol = kvcache.Stop
	}
	return kvcache.SeqOptions{MaxLen: limit, Overflow: &pol}
}

// Snapshot returns the latest published state. It never blocks and the
// result is never modified.
func (e *Engine) Snapshot() *Snapshot { return e.snap.Load() }

// Events returns the events after cursor `after` (start with 0), at most
// max of them (all when max <= 0), the cursor for the next call, and how
// many were dropped because the reader fell behind.
func (e *Engine) Events(after uint64, max int) (events []Event, next, dropped uint64) {
	return e.events.Since(after, max)
}

// EventsNotify returns a channel that receives a value after new events;
// wait on it, then call Events.
func (e *Engine) EventsNotify() <-chan struct{} { return e.events.Notify() }

// Pause stops scheduling after the current step; Step then runs one step at
// a time.
func (e *Engine) Pause() error {
	return e.call(func() error {
		if !e.paused {
			e.paused = true
			e.event(Event{Kind: EventPause, Text: "scheduler paused"})
		}
		return nil
	})
}

// Resume continues scheduling after Pause.
func (e *Engine) Resume() error {
	return e.call(func() error {
		if e.paused {
			e.paused = false
			e.event(Event{Kind: EventResume, Text: "scheduler resumed"})
		}
		return nil
	})
}

// Step runs exactly one scheduler step while paused and reports what it
// did.
func (e *Engine) Step() (StepReport, error) {
	var rep StepReport
	err := e.call(func() error {
		if !e.paused {
			return errors.New("pause the scheduler before stepping it")
		}
		if e.sch.Idle() {
			return errors.New("nothing to do: no request is waiting or running")
		}
		e.step()
		rep = e.last
		e.publish()
		return nil
	})
	return rep, err
}

// SetDelay slows the engine down: it waits d after each step (slow
// motion for teaching; 0 for full speed).
func (e *Engine) SetDelay(d time.Duration) error {
	if d < 0 || d > time.Minute {
		return fmt.Errorf("a step delay of %v is outside 0..1m", d)
	}
	return e.call(func() error { e.delay = d; return nil })
}

// Config returns the configuration in force.
// It never waits for the engine.
func (e *Engine) Config() Config { return e.limits.Load().cfg }

// Reconfigure applies new settings while requests run. Settings that
// change the pool (block size, budgets, precisions, allocator) drain the
// running sequences, rebuild the pool and resume them by recomputation; the
// others apply at once. Impossible settings are refused with the reason and
// nothing changes.
func (e *Engine) Reconfigure(c Config) error {
	return e.call(func() error {
		if err := e.validate(c); err != nil {
			return err
		}
		old := e.cfg
		rebuild := c.Cache.BlockSize != old.Cache.BlockSize || c.Cache.Budget != old.Cache.Budget ||
			c.Cache.HostBudget != old.Cache.HostBudget || c.Cache.K != old.Cache.K || c.Cache.V != old.Cache.V ||
			c.Cache.Allocator != old.Cache.Allocator || c.Context != old.Context ||
			(c.Cache.Budget == 0 && c.Sched.MaxSeqs != old.Sched.MaxSeqs)
		if sc, _, err := e.storeConfig(c.Cache, e.context(c), c.Sched.MaxSeqs); err == nil && sc.Blocks != e.mgr.NumBlocks() {
			rebuild = true // quantized keys' residuals are reserved per sequence
		}
		if rebuild {
			if err := e.rebuild(old, c, describeChange(old, c)); err != nil {
				return err
			}
		} else {
			if c.Cache.Eviction != old.Cache.Eviction {
				if err := e.sch.SetEviction(c.Cache.Eviction); err != nil {
					return err
				}
			}
			e.setConfig(c)
			e.event(Event{Kind: EventReconfigure, Text: "settings changed (" + describeChange(old, c) + "); the pool is unchanged"})
		}
		if err := e.sch.SetConfig(c.schedConfig()); err != nil {
			return err
		}
		e.setConfig(c)
		e.publish()
		return nil
	})
}

// rebuild drains the running sequences, builds a new pool for c and
// queues them to recompute in it; why says what changed, for the event
// log. If c cannot be built, the pool for old comes back and the error
// says why (the loop's goroutine).
func (e *Engine) rebuild(old, c Config, why string) error {
	if err := e.fitsLive(c); err != nil {
		return err
	}
	e.flushCacheEvents()
	w, r, s := e.sch.Counts()
	if err := e.sch.Drain(); err != nil {
		return err
	}
	e.flushCacheEvents() // the drain's frees, before the manager goes
	if err := e.build(c); err != nil {
		// The old pool is gone from the scheduler's view; rebuild it.
		if err2 := e.build(old); err2 != nil {
			panic(fmt.Sprintf("cannot restore the cache after a failed reconfiguration: %v", err2))
		}
		e.sch.SetManager(e.mgr)
		e.requeueOpts()
		return err
	}
	e.sch.SetManager(e.mgr)
	e.requeueOpts()
	e.event(Event{Kind: EventReconfigure, Text: fmt.Sprintf("pool rebuilt (%s): %s of %s, K %s / V %s, %s; %d running and %d swapped %s will recompute, %d still %s",
		why, Count(e.mgr.NumBlocks(), "block"), Count(c.Cache.BlockSize, "token"), c.Cache.K, c.Cache.V, c.Cache.Allocator, r, s, Plural(r+s, "sequence"), w, map[bool]string{true: "waits", false: "wait"}[w == 1])})
	return nil
}

// ClearCache empties the cache: the pool is rebuilt with the settings in
// force, so no block stays in the prefix cache and the counters (prefix
// hits, preemptions, copies on write…) start again from zero. Running
// sequences recompute in the new pool. Teaching mode starts each lesson
// from it, so that what one lesson left behind does not change the next.
func (e *Engine) ClearCache() error {
	return e.call(func() error {
		if err := e.rebuild(e.cfg, e.cfg, "cache cleared"); err != nil {
			return err
		}
		e.publish()
		return nil
	})
}

// fitsLive refuses a pool too small for a live sequence: after the
// rebuild it could never run again.
func (e *Engine) fitsLive(c Config) error {
	sc, _, err := e.storeConfig(c.Cache, e.context(c), c.Sched.MaxSeqs)
	if err != nil {
		return err
	}
	for _, s := range e.seqs {
		n := len(s.q.Tokens) + 1
		if c.Cache.Allocator == kvcache.Contiguous {
			n = max(n, maxLen(s.r, c, e.context(c)))
		}
		if need := (n + sc.BlockSize - 1) / sc.BlockSize; need > sc.Blocks {
			return fmt.Errorf("the new cache would hold %d blocks of %d tokens, but %s needs %d: stop it or choose a larger budget",
				sc.Blocks, sc.BlockSize, s.r.name(), need)
		}
	}
	return nil
}

// requeueOpts refreshes every live sequence's cache options after the
// allocator or context changed.
func (e *Engine) requeueOpts() {
	for _, s := range e.seqs {
		s.q.Opts = e.seqOpts(s.r)
	}
}
