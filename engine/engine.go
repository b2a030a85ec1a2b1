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

	mu     sync.Mutex
	cmds   []func()
	closed bool
	wake   chan struct{}
	done   chan struct{}

	snap   atomic.Pointer[Snapshot]
	events *ring.Log[Event]

	// Owned by the loop goroutine.
	cfg         Config
	store       backend.Cache
	mgr         *kvcache.Manager
	sch         *sched.Scheduler
	seqs        map[kvcache.SeqID]*seqState
	gone        map[kvcache.SeqID]*seqState // finished since the last event flush
	reqs        map[uint64]*reqState
	nextSeq     kvcache.SeqID
	nextReq     uint64
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
	ctx := e.context(cfg)
	sc, budget, err := e.storeConfig(cfg.Cache, ctx, cfg.Sched.MaxSeqs)
	if err != nil {
		return err
	}
	st, err := e.model.NewCache(sc)
	if err != nil {
		return err
	}
	host := cfg.Cache.HostBudget
	if host == 0 {
		host = budget
	}
	var step int64
	if e.mgr != nil {
		step = e.mgr.Step()
	}
	mgr, err := kvcache.New(kvcache.Config{FirstStep: step,
		BlockSize: sc.BlockSize, BlockBytes: kvstore.BlockBytes(sc), Budget: int64(sc.Blocks) * int64(kvstore.BlockBytes(sc)),
		HostBudget: host, Allocator: cfg.Cache.Allocator, Eviction: cfg.Cache.Eviction,
		KPrecision: sc.K.String(), VPrecision: sc.V.String(), MaxLen: ctx, Overflow: cfg.Cache.Overflow,
	}, st)
	if err != nil {
		return err
	}
	e.cfg, e.store, e.mgr, e.cacheCursor = cfg, st, mgr, 0
	return nil
}

// do queues f to run on the engine goroutine.
func (e *Engine) do(f func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.cmds = append(e.cmds, f)
	select {
	case e.wake <- struct{}{}:
	default:
	}
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
	select {
	case e.wake <- struct{}{}:
	default:
	}
	<-e.done
	return nil
}

func (e *Engine) loop() {
	defer close(e.done)
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("engine failure: %v\n%s", r, debug.Stack())
			e.failAll(err)
			e.mu.Lock()
			e.closed = true
			e.mu.Unlock()
		}
	}()
	for {
		e.mu.Lock()
		cmds, closed := e.cmds, e.closed
		e.cmds = nil
		e.mu.Unlock()
		for _, f := range cmds {
			f()
		}
		e.flushCacheEvents() // what the commands did (a cancellation's frees)
		if closed {
			e.cancelAll()
			e.publish()
			return
		}
		if e.paused || e.sch.Idle() {
			e.publish()
			<-e.wake
			continue
		}
		e.step()
		if e.delay > 0 {
			select {
			case <-time.After(e.delay):
			case <-e.wake:
				// Keep the wake-up for the top of the loop (unless a
				// command already left another one).
				select {
				case e.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// Submit queues a request and returns its stream. Errors a user can fix (a
// prompt that does not fit, bad sampling settings) come back here, before
// anything runs. Cancelling ctx ends the request and frees its blocks.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	ids := r.Tokens
	if ids == nil {
		if r.Prompt == "" {
			return nil, errors.New("the prompt is empty")
		}
		ids = e.tok.Encode(r.Prompt, true, true)
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
	rs := &reqState{req: r, prompt: ids, params: sp, ctx: ctx, submitted: time.Now()}
	err := e.call(func() error {
		if err := e.checkFits(rs); err != nil {
			return err
		}
		e.nextReq++
		rs.id = e.nextReq
		rs.stream = newStream(rs.id, ctx, e.abandonAfter)
		e.reqs[rs.id] = rs
		e.startSample(rs, 0, nil)
		e.event(Event{Kind: "submit", Request: rs.id, Seq: rs.samples[0].q.ID, Tokens: len(ids),
			Text: fmt.Sprintf("%s: %d prompt tokens, n = %d", rs.name(), len(ids), r.N)})
		return nil
	})
	if err != nil {
		return nil, err
	}
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

// checkFits refuses a prompt that cannot fit the context or the cache.
func (e *Engine) checkFits(rs *reqState) error {
	ctx := e.context(e.cfg)
	pol := e.cfg.Cache.Overflow
	if rs.req.Overflow != nil {
		pol = *rs.req.Overflow
	}
	if len(rs.prompt) >= ctx && pol == kvcache.Stop {
		return fmt.Errorf("the prompt is %d tokens; the context holds %d, so nothing can be generated (shorten it, or choose a rolling or truncating overflow policy)", len(rs.prompt), ctx)
	}
	need := e.mgr.BlocksFor(min(len(rs.prompt)+1, ctx))
	if e.cfg.Cache.Allocator == kvcache.Contiguous {
		// A sample reserves its whole length; parallel samples wait for
		// room if they cannot all be reserved at once.
		need = e.mgr.BlocksFor(e.maxLen(rs))
	}
	if need > e.mgr.NumBlocks() {
		return fmt.Errorf("the prompt needs %d blocks of %d tokens; the whole cache has %d (raise the cache budget)", need, e.mgr.BlockSize(), e.mgr.NumBlocks())
	}
	return nil
}

// maxLen is the most tokens a sample of rs can hold: the context, or, in
// contiguous mode, the prompt plus MaxTokens (the reservation).
func (e *Engine) maxLen(rs *reqState) int {
	ctx := e.context(e.cfg)
	if e.cfg.Cache.Allocator == kvcache.Contiguous && rs.req.MaxTokens > 0 {
		return min(ctx, len(rs.prompt)+rs.req.MaxTokens)
	}
	return ctx
}

func (e *Engine) seqOpts(rs *reqState) kvcache.SeqOptions {
	pol := e.cfg.Cache.Overflow
	if rs.req.Overflow != nil {
		pol = *rs.req.Overflow
	}
	return kvcache.SeqOptions{MaxLen: e.maxLen(rs), Overflow: &pol}
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
			e.event(Event{Kind: "pause", Text: "scheduler paused"})
		}
		return nil
	})
}

// Resume continues scheduling after Pause.
func (e *Engine) Resume() error {
	return e.call(func() error {
		if e.paused {
			e.paused = false
			e.event(Event{Kind: "resume", Text: "scheduler resumed"})
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
func (e *Engine) Config() Config {
	var c Config
	e.call(func() error { c = e.cfg; return nil })
	return c
}

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
		if rebuild {
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
			e.event(Event{Kind: "reconfigure", Text: fmt.Sprintf("pool rebuilt (%s): %d blocks of %d tokens, K %s / V %s, %s; %d running and %d swapped sequences will recompute, %d still wait",
				describeChange(old, c), e.mgr.NumBlocks(), c.Cache.BlockSize, c.Cache.K, c.Cache.V, c.Cache.Allocator, r, s, w)})
		} else {
			if c.Cache.Eviction != old.Cache.Eviction {
				if err := e.mgr.SetEviction(c.Cache.Eviction); err != nil {
					return err
				}
			}
			e.cfg = c
			e.event(Event{Kind: "reconfigure", Text: "settings changed (" + describeChange(old, c) + "); the pool is unchanged"})
		}
		if err := e.sch.SetConfig(c.schedConfig()); err != nil {
			return err
		}
		e.cfg = c
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
			reserve := e.context(c)
			if s.r.req.MaxTokens > 0 {
				reserve = min(reserve, len(s.r.prompt)+s.r.req.MaxTokens)
			}
			n = max(n, reserve)
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
