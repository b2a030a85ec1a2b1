package sched

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"kvscope/engine/kvcache"
)

// Policy orders the queues.
type Policy uint8

// The scheduling policies.
const (
	FCFS     Policy = iota // first come, first served; preempt the newest
	Priority               // higher Seq.Priority first; preempt the lowest (then the newest)
)

// String returns "fcfs" or "priority".
func (p Policy) String() string {
	if p == Priority {
		return "priority"
	}
	return "fcfs"
}

// ParsePolicy parses "fcfs" or "priority".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "fcfs", "":
		return FCFS, nil
	case "priority":
		return Priority, nil
	}
	return 0, fmt.Errorf("unknown scheduling policy %q (want fcfs or priority)", s)
}

// Config tunes a Scheduler.
type Config struct {
	MaxSeqs    int                 // most sequences running at once
	StepTokens int                 // most tokens computed in one step (decodes and prefill chunks)
	Policy     Policy              // queue order and preemption victim
	Preempt    kvcache.PreemptMode // recompute or swap
	// Watermark is the share of the pool's blocks (0 to 1) that admitting
	// a new sequence must leave free, so running sequences can grow.
	Watermark float64
}

// CacheTooSmallError ends a sequence that has outgrown the whole cache:
// alone in the pool, it still has no room for its next token. For the
// sequence the cache is its context limit.
type CacheTooSmallError struct {
	Tokens    int // tokens it needs room for
	Need      int // blocks they take
	BlockSize int
	Blocks    int // blocks in the whole pool
}

func (e *CacheTooSmallError) Error() string {
	return fmt.Sprintf("the sequence needs %d blocks of %d tokens for %d tokens; the whole cache has %d (raise the cache budget)",
		e.Need, e.BlockSize, e.Tokens, e.Blocks)
}

// MaxSeqs and MaxStepTokens bound Config.MaxSeqs and Config.StepTokens,
// far above what one machine runs, so that no setting overflows the
// arithmetic built on them.
const (
	MaxSeqs       = 4096
	MaxStepTokens = 1 << 20
)

// Validate reports impossible settings.
func (c Config) Validate() error {
	switch {
	case c.MaxSeqs < 1 || c.MaxSeqs > MaxSeqs:
		return fmt.Errorf("maximum concurrent sequences must be 1 to %d, got %d", MaxSeqs, c.MaxSeqs)
	case c.StepTokens < 1 || c.StepTokens > MaxStepTokens:
		return fmt.Errorf("the per-step token budget must be 1 to %d tokens, got %d", MaxStepTokens, c.StepTokens)
	case c.StepTokens < c.MaxSeqs:
		return fmt.Errorf("a per-step budget of %d tokens cannot give each of %d sequences a decode token", c.StepTokens, c.MaxSeqs)
	case c.Watermark < 0 || c.Watermark >= 1:
		return fmt.Errorf("the admission watermark must be in [0, 1), got %g", c.Watermark)
	case c.Policy > Priority:
		return fmt.Errorf("unknown scheduling policy %d", c.Policy)
	case c.Preempt > kvcache.Swap:
		return fmt.Errorf("unknown preemption mode %d", c.Preempt)
	}
	return nil
}

// State is where a sequence is in the scheduler.
type State uint8

// The states.
const (
	Waiting  State = iota // queued: no blocks (new, or preempted by recompute)
	Running               // has blocks: prefilling or decoding
	Swapped               // preempted by swap: its blocks are in the host pool
	Finished              // removed
)

var stateNames = [...]string{"waiting", "running", "swapped", "finished"}

// String returns the state's name.
func (s State) String() string { return stateNames[s] }

// Seq is one sequence as the scheduler sees it. The caller owns Tokens: it
// appends each sampled token, which the next step then computes.
type Seq struct {
	ID       kvcache.SeqID
	Priority int     // higher runs first under the Priority policy
	Tokens   []int32 // the sequence's context: every token the model must see, in order
	Opts     kvcache.SeqOptions
	// NoCache makes every step recompute the whole sequence from position
	// 0 instead of reusing its K/V: the "KV cache off" teaching mode.
	NoCache bool

	State   State
	arrival int64 // admission order (FCFS, victims)
	// Preemptions counts how often the sequence was preempted.
	Preemptions int
}

// Work is one sequence's share of a step: compute Seq.Tokens[Start:End] at
// positions Start..End-1, through the block table Blocks. Logits is set when
// End reaches the end of the sequence, so the next token can be sampled.
type Work struct {
	Seq        *Seq
	Start, End int
	Blocks     []int
	Logits     bool
	Prefill    bool // part of a prompt (or a recomputation), not a single decode token
}

// Plan is what one step does.
type Plan struct {
	Work      []Work
	Admitted  []*Seq // newly given blocks this step
	SwappedIn []*Seq
	Preempted []*Seq // preempted this step (by recompute or swap)
	Failed    []Failure
	// Shifts are rolling-window shifts made this step: before running the
	// plan, the caller must re-position each sequence's kept keys.
	Shifts  []Shift
	Prefill int // prompt tokens planned
	Decode  int // decode tokens planned
}

// Shift is one rolling-window shift: Overflow says which kept keys moved
// and by how much (see kvcache.Overflow).
type Shift struct {
	Seq      *Seq
	Overflow kvcache.Overflow
}

// Failure is a sequence the scheduler had to give up on (it can never fit,
// or its context is full under the stop policy).
type Failure struct {
	Seq *Seq
	Err error
}

// Scheduler plans steps over a kvcache Manager. It is not safe for
// concurrent use: one goroutine (the engine's) drives it.
type Scheduler struct {
	cfg     Config
	m       *kvcache.Manager
	waiting []*Seq
	running []*Seq
	swapped []*Seq
	arrival int64
}

// New returns a scheduler over m.
func New(cfg Config, m *kvcache.Manager) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, m: m}, nil
}

// Config returns the configuration in use.
func (s *Scheduler) Config() Config { return s.cfg }

// SetConfig changes the configuration; it applies from the next step.
func (s *Scheduler) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.cfg = cfg
	return nil
}

// Manager returns the cache manager.
func (s *Scheduler) Manager() *kvcache.Manager { return s.m }

// Add queues a new sequence (Waiting). Its Tokens must not be empty.
func (s *Scheduler) Add(q *Seq) error {
	if len(q.Tokens) == 0 {
		return fmt.Errorf("sequence %d has no tokens", q.ID)
	}
	q.State = Waiting
	s.arrival++
	q.arrival = s.arrival
	s.waiting = append(s.waiting, q)
	return nil
}

// AddRunning registers a sequence whose blocks the caller already gave it
// in the manager (a fork sharing its parent's blocks).
func (s *Scheduler) AddRunning(q *Seq) {
	q.State = Running
	s.arrival++
	q.arrival = s.arrival
	s.running = append(s.running, q)
}

// Remove takes a sequence out of the scheduler and frees its blocks (it
// finished or was cancelled).
func (s *Scheduler) Remove(q *Seq) error {
	was := q.State
	s.waiting = slices.DeleteFunc(s.waiting, func(x *Seq) bool { return x == q })
	s.running = slices.DeleteFunc(s.running, func(x *Seq) bool { return x == q })
	s.swapped = slices.DeleteFunc(s.swapped, func(x *Seq) bool { return x == q })
	q.State = Finished
	if was != Waiting && was != Finished && s.m.Has(q.ID) {
		return s.m.Free(q.ID)
	}
	return nil
}

// Drain preempts every running and swapped sequence by recompute and
// queues them all, oldest first, ahead of the waiting ones: the caller may
// then replace the manager (SetManager) and the sequences recompute.
func (s *Scheduler) Drain() error {
	var all []*Seq
	for _, q := range slices.Concat(s.running, s.swapped) {
		if s.m.Has(q.ID) {
			if err := s.m.Free(q.ID); err != nil {
				return err
			}
		}
		q.State = Waiting
		all = append(all, q)
	}
	slices.SortFunc(all, func(a, b *Seq) int { return cmp.Compare(a.arrival, b.arrival) })
	s.waiting = append(all, s.waiting...)
	s.running, s.swapped = nil, nil
	return nil
}

// SetManager replaces the manager; only valid right after Drain.
func (s *Scheduler) SetManager(m *kvcache.Manager) { s.m = m }

// Counts returns how many sequences wait, run and are swapped out.
func (s *Scheduler) Counts() (waiting, running, swapped int) {
	return len(s.waiting), len(s.running), len(s.swapped)
}

// Idle reports whether nothing is queued or running.
func (s *Scheduler) Idle() bool { return len(s.waiting)+len(s.running)+len(s.swapped) == 0 }

// before orders sequences for service: priority (under Priority), then
// arrival.
func (s *Scheduler) before(a, b *Seq) int {
	if s.cfg.Policy == Priority && a.Priority != b.Priority {
		return cmp.Compare(b.Priority, a.Priority)
	}
	return cmp.Compare(a.arrival, b.arrival)
}

// victim returns the running sequence to preempt: the last in service
// order (the newest under FCFS, as vLLM does).
func (s *Scheduler) victim() *Seq {
	if len(s.running) == 0 {
		return nil
	}
	return slices.MaxFunc(s.running, s.before)
}

// preempt takes q's blocks back by the configured mode.
func (s *Scheduler) preempt(q *Seq, p *Plan) error {
	mode := s.cfg.Preempt
	if slices.ContainsFunc(p.Shifts, func(sh Shift) bool { return sh.Seq == q }) {
		// Its kept keys have not been re-positioned yet: swapping them out
		// would keep them at their old positions. Recompute instead.
		mode = kvcache.Recompute
		p.Shifts = slices.DeleteFunc(p.Shifts, func(sh Shift) bool { return sh.Seq == q })
	}
	r, err := s.m.Preempt(q.ID, mode)
	if err != nil {
		return err
	}
	s.running = slices.DeleteFunc(s.running, func(x *Seq) bool { return x == q })
	p.Work = slices.DeleteFunc(p.Work, func(w Work) bool {
		if w.Seq != q {
			return false
		}
		if w.Prefill {
			p.Prefill -= w.End - w.Start
		} else {
			p.Decode--
		}
		return true
	})
	q.Preemptions++
	p.Preempted = append(p.Preempted, q)
	if r.Mode == kvcache.Swap {
		q.State = Swapped
		s.swapped = append(s.swapped, q)
		return nil
	}
	// Recompute: the manager's tokens are the ones with slots; the caller's
	// Tokens may hold one more (a sampled token not yet appended).
	q.State = Waiting
	s.waiting = append(s.waiting, q)
	return nil
}

// Schedule plans one step: running sequences first (decode tokens, then
// prefill chunks), then swapped sequences coming back, then new ones, all
// under the step's token budget and the pool's free blocks. It appends the
// slots the plan needs in the manager, preempting running sequences when
// the pool runs out.
func (s *Scheduler) Schedule() (Plan, error) {
	var p Plan
	budget := s.cfg.StepTokens
	slices.SortStableFunc(s.running, s.before)
	slices.SortStableFunc(s.waiting, s.before)
	slices.SortStableFunc(s.swapped, s.before)

	// Running sequences, decodes before prefill chunks.
	var prefilling []*Seq
	for _, q := range slices.Clone(s.running) {
		if q.State != Running {
			continue // preempted while making room for an earlier one
		}
		if s.m.Computed(q.ID) < s.m.Len(q.ID) {
			prefilling = append(prefilling, q)
			continue
		}
		if budget < 1 {
			break
		}
		ok, err := s.grow(q, &p)
		if err != nil {
			return p, err
		}
		if ok {
			s.addWork(q, &p, &budget)
		}
	}
	for _, q := range prefilling {
		if q.State == Running && budget > 0 {
			s.addWork(q, &p, &budget)
		}
	}

	// Swapped sequences come back before new ones are admitted.
	for len(s.swapped) > 0 && len(p.Preempted) == 0 && len(s.running) < s.cfg.MaxSeqs && budget > 0 {
		q := s.swapped[0]
		if err := s.m.SwapIn(q.ID); err != nil {
			if errors.Is(err, kvcache.ErrNoSpace) {
				break
			}
			return p, err
		}
		s.swapped = s.swapped[1:]
		q.State = Running
		s.running = append(s.running, q)
		p.SwappedIn = append(p.SwappedIn, q)
		ok, err := s.grow(q, &p)
		if err != nil {
			return p, err
		}
		if ok {
			s.addWork(q, &p, &budget)
		}
	}

	// New sequences, while blocks, seats and budget last. Nothing is
	// admitted in a step that had to preempt.
	for len(s.waiting) > 0 && len(s.swapped) == 0 && len(p.Preempted) == 0 && len(s.running) < s.cfg.MaxSeqs && budget > 0 {
		q := s.waiting[0]
		n := len(q.Tokens)
		if q.Opts.MaxLen > 0 {
			n = min(n, q.Opts.MaxLen) // an overflow policy shortens a longer prompt; Stop refuses it
		}
		need := s.m.BlocksFor(n)
		if need > s.m.NumBlocks() {
			s.waiting = s.waiting[1:]
			q.State = Finished
			p.Failed = append(p.Failed, Failure{q, &CacheTooSmallError{Tokens: n, Need: need, BlockSize: s.m.BlockSize(), Blocks: s.m.NumBlocks()}})
			continue
		}
		free := s.m.FreeBlocks()
		if len(s.running) > 0 && free-need < int(s.cfg.Watermark*float64(s.m.NumBlocks())) {
			break
		}
		r, err := s.m.Allocate(q.ID, q.Tokens, q.Opts)
		if err != nil {
			if errors.Is(err, kvcache.ErrNoSpace) && len(s.running) > 0 {
				break // wait for room
			}
			// Allocate changes nothing when it fails, so whatever is wrong
			// with this sequence (its context, its options, a pool too
			// small for it) ends it alone.
			s.waiting = s.waiting[1:]
			q.State = Finished
			p.Failed = append(p.Failed, Failure{q, err})
			continue
		}
		if r.Overflow != nil {
			q.Tokens = s.m.Tokens(q.ID)
		}
		s.waiting = s.waiting[1:]
		q.State = Running
		s.running = append(s.running, q)
		p.Admitted = append(p.Admitted, q)
		s.addWork(q, &p, &budget)
	}
	return p, nil
}

// grow gives q slots for the tokens it has beyond the manager's (the
// sampled token to decode), preempting others, or q itself, when the pool
// is full. It reports whether q is still running.
func (s *Scheduler) grow(q *Seq, p *Plan) (bool, error) {
	for s.m.Len(q.ID) < len(q.Tokens) {
		r, err := s.m.Append(q.ID, q.Tokens[s.m.Len(q.ID):])
		if err == nil {
			if r.Overflow != nil {
				q.Tokens = s.m.Tokens(q.ID)
				if r.Overflow.Policy == kvcache.RollingWindow && r.Overflow.RotateTo > r.Overflow.RotateFrom {
					p.Shifts = append(p.Shifts, Shift{q, *r.Overflow})
				}
			}
			return true, nil
		}
		var ce *kvcache.ContextLimitError
		if errors.As(err, &ce) {
			s.running = slices.DeleteFunc(s.running, func(x *Seq) bool { return x == q })
			if s.m.Has(q.ID) {
				if ferr := s.m.Free(q.ID); ferr != nil {
					return false, ferr
				}
			}
			q.State = Finished
			p.Failed = append(p.Failed, Failure{q, err})
			return false, nil
		}
		if !errors.Is(err, kvcache.ErrNoSpace) {
			return false, err
		}
		if len(s.running) == 1 {
			// Alone and still out of room: the whole cache is too small
			// for it. Preempting it would only bring it back to the same
			// place (a swap would loop forever).
			why := &CacheTooSmallError{Tokens: len(q.Tokens), Need: s.m.BlocksFor(len(q.Tokens)), BlockSize: s.m.BlockSize(), Blocks: s.m.NumBlocks()}
			s.running = s.running[:0]
			if ferr := s.m.Free(q.ID); ferr != nil {
				return false, ferr
			}
			q.State = Finished
			p.Failed = append(p.Failed, Failure{q, why})
			return false, nil
		}
		v := s.victim()
		if err := s.preempt(v, p); err != nil {
			return false, err
		}
		if v == q {
			return false, nil
		}
	}
	return true, nil
}

// addWork plans q's next tokens within the budget.
func (s *Scheduler) addWork(q *Seq, p *Plan, budget *int) {
	n := s.m.Len(q.ID)
	start := s.m.Computed(q.ID)
	end := min(n, start+*budget)
	if q.NoCache && start == n-1 {
		// Without a cache the whole sequence is recomputed for each new
		// token, in one step whatever the budget (a teaching mode).
		start, end = 0, n
	}
	if end <= start {
		return
	}
	*budget = max(0, *budget-(end-start))
	prefill := end-start > 1 || n-start > 1
	if prefill {
		p.Prefill += end - start
	} else {
		p.Decode++
	}
	p.Work = append(p.Work, Work{Seq: q, Start: start, End: end, Blocks: s.m.BlockTable(q.ID), Logits: end == n, Prefill: prefill})
}
