package kvcache

import (
	"fmt"
	"slices"
)

// Storage is the K/V memory the manager's blocks index. The manager never
// touches tensors itself; it asks Storage to move whole blocks.
// *kvstore.Store satisfies it.
type Storage interface {
	// Copy copies block src to block dst in every layer (copy on write).
	Copy(dst, src int)
	// Save appends block's bytes, all layers, to buf and returns it (swap out).
	Save(block int, buf []byte) []byte
	// Load writes data, as returned by Save, into block (swap in).
	Load(block int, data []byte) error
	// Reset forgets a block's old contents. The manager calls it when a
	// block gets a new owner and when a block becomes free.
	Reset(block int)
}

// sequence is the manager's view of one sequence.
type sequence struct {
	id        SeqID
	tokens    []int32     // every token with a slot; a token's position is its index
	blocks    []int       // block table (contiguous: the whole reservation)
	hashes    []BlockHash // chain hashes of its leading full blocks, as far as computed
	computed  int         // tokens whose K/V are written (Commit)
	published int         // leading blocks already offered to the prefix cache
	limit     int         // context limit in tokens, 0: none
	overflow  OverflowPolicy
	sinks     int
	noCache   bool  // after a rolling-window shift: blocks past the sinks are private for good
	swapped   bool  // its blocks live in the host pool
	host      []int // host block ids while swapped
}

// hostBlock is one block's bytes in the host swap pool.
type hostBlock struct {
	seq    SeqID
	data   []byte
	filled int
	hashed bool
	hash   BlockHash
	parent BlockHash
	tokens []int32
	depth  int
	since  int64 // step it was swapped out
}

// counters are the manager's cumulative statistics.
type counters struct {
	prefixQueries, prefixHits     int64
	evictions                     int64
	preemptRecompute, preemptSwap int64
	swapFallbacks                 int64
	swapOutBytes, swapInBytes     int64
	cow, shiftCopies              int64
	hashCollisions                int64
	overflows                     int64
}

// Manager keeps every sequence's block table over one block pool. It is
// driven by one goroutine (the engine's); Snapshot results and the EventLog
// may be used from any goroutine.
type Manager struct {
	cfg    Config
	st     Storage
	p      *pool
	seqs   map[SeqID]*sequence
	host   map[int]*hostBlock
	nextHo int
	hostB  int64 // bytes in the host pool
	step   int64
	serial uint64 // release serial (LRU ties)
	events *EventLog
	c      counters

	nSwapped int // sequences swapped out
}

// AllocResult says what Allocate did.
type AllocResult struct {
	// Computed is how many leading tokens already have K/V (prefix-cache
	// hits): the engine computes Tokens()[Computed:] at positions Computed….
	Computed int
	// Overflow is set when the prompt was longer than the context limit and
	// was shortened (policies RollingWindow and TruncateMiddle).
	Overflow *Overflow
}

// AppendResult says what Append did.
type AppendResult struct {
	// Start is the first position the engine must compute this step: it
	// computes Tokens()[Start:] at positions Start…Len()-1. Without overflow
	// Start is the length before the append.
	Start int
	// Overflow is set when the context limit was reached and the policy
	// changed the sequence; it says what else the engine must do.
	Overflow *Overflow
}

// New makes a manager with the pool Config describes. st may be nil for
// bookkeeping only (as the waste benchmark does); then copy on write and
// swapping return ErrNoStorage.
func New(cfg Config, st Storage) (*Manager, error) {
	n, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Sinks == 0 {
		cfg.Sinks = DefaultSinks
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = 4096
	}
	p := newPool(n, cfg.BlockSize, cfg.Allocator == Contiguous, cfg.Eviction)
	if st != nil {
		p.reset = st.Reset
	}
	return &Manager{
		cfg:    cfg,
		st:     st,
		p:      p,
		seqs:   make(map[SeqID]*sequence),
		host:   make(map[int]*hostBlock),
		events: newEventLog(cfg.EventBuffer),
		step:   cfg.FirstStep,
	}, nil
}

// Config returns the configuration in use (defaults filled in).
func (m *Manager) Config() Config { return m.cfg }

// BlockSize returns the tokens per block.
func (m *Manager) BlockSize() int { return m.cfg.BlockSize }

// NumBlocks returns the number of device blocks in the pool.
func (m *Manager) NumBlocks() int { return len(m.p.blocks) }

// FreeBlocks returns how many blocks an allocation can get now: free ones
// plus cached ones that can be evicted.
func (m *Manager) FreeBlocks() int { return m.p.available() }

// LargestFreeRun returns the longest run of adjacent free blocks in
// contiguous mode, and FreeBlocks in paged mode (where any block serves).
func (m *Manager) LargestFreeRun() int { return m.p.largestRun() }

// BlocksFor returns how many blocks n tokens take.
func (m *Manager) BlocksFor(n int) int { return (n + m.cfg.BlockSize - 1) / m.cfg.BlockSize }

// Events returns the manager's event log.
func (m *Manager) Events() *EventLog { return m.events }

// Step returns the step counter.
func (m *Manager) Step() int64 { return m.step }

// Tick advances the step counter; call it once per engine step. Blocks
// record the step of their last use, which LRU and snapshots show.
func (m *Manager) Tick() { m.step++ }

// SetEviction changes the eviction policy; it applies to blocks cached now.
func (m *Manager) SetEviction(p EvictionPolicy) error {
	if p > FIFO {
		return fmt.Errorf("kvcache: unknown eviction policy %d", p)
	}
	m.cfg.Eviction = p
	m.p.setPolicy(p)
	return nil
}

// Has reports whether the manager knows sequence id.
func (m *Manager) Has(id SeqID) bool { _, ok := m.seqs[id]; return ok }

// Len returns the number of tokens sequence id holds (0 if unknown).
func (m *Manager) Len(id SeqID) int {
	if s, ok := m.seqs[id]; ok {
		return len(s.tokens)
	}
	return 0
}

// Tokens returns a copy of sequence id's tokens; a token's position is its
// index here.
func (m *Manager) Tokens(id SeqID) []int32 {
	if s, ok := m.seqs[id]; ok {
		return slices.Clone(s.tokens)
	}
	return nil
}

// Computed returns how many leading tokens of sequence id have K/V written.
func (m *Manager) Computed(id SeqID) int {
	if s, ok := m.seqs[id]; ok {
		return s.computed
	}
	return 0
}

// Swapped reports whether sequence id is swapped out to the host pool.
func (m *Manager) Swapped(id SeqID) bool {
	s, ok := m.seqs[id]
	return ok && s.swapped
}

// BlockTable returns a copy of sequence id's block table: entry i holds
// tokens i*BlockSize…(i+1)*BlockSize-1. In contiguous mode it lists the
// whole reservation; entries past the last token hold nothing yet. It is
// nil for an unknown or swapped-out sequence.
func (m *Manager) BlockTable(id SeqID) []int {
	if s, ok := m.seqs[id]; ok {
		return slices.Clone(s.blocks)
	}
	return nil
}

// AppendBlockTable appends sequence id's block table to dst, for callers
// that build batches every step without allocating.
func (m *Manager) AppendBlockTable(dst []int, id SeqID) []int {
	if s, ok := m.seqs[id]; ok {
		return append(dst, s.blocks...)
	}
	return dst
}

func (m *Manager) emit(kind EventKind, seq SeqID, blocks []int, tokens int, bytes int64, reason string) {
	m.events.Push(Event{Step: m.step, Kind: kind, Seq: seq, Blocks: blocks, Tokens: tokens, Bytes: bytes, Reason: reason})
}

func (m *Manager) resetBlock(id int) {
	if m.st != nil {
		m.st.Reset(id)
	}
}

func (m *Manager) nextSerial() uint64 { m.serial++; return m.serial }

func (m *Manager) get(id SeqID, op string) (*sequence, error) {
	s, ok := m.seqs[id]
	if !ok {
		return nil, fmt.Errorf("kvcache: %s: unknown sequence %d", op, id)
	}
	if s.swapped {
		return nil, fmt.Errorf("kvcache: %s: sequence %d is swapped out; call SwapIn first", op, id)
	}
	return s, nil
}

// takeBlocks takes n blocks for seq (paged mode; the caller checked space)
// and reports evictions as one event.
func (m *Manager) takeBlocks(seq SeqID, n int) []int {
	ids := make([]int, 0, n)
	var evicted []int
	for range n {
		id, ev := m.p.take(seq, m.step)
		ids = append(ids, id)
		if ev {
			evicted = append(evicted, id)
		}
	}
	if len(evicted) > 0 {
		m.c.evictions += int64(len(evicted))
		m.emit(EventEvict, seq, evicted, len(evicted)*m.cfg.BlockSize, 0,
			fmt.Sprintf("no free block; evicted cached blocks by %s", m.p.policy))
	}
	return ids
}

// ensureHashes computes s's chain hashes for its first n full blocks.
func (m *Manager) ensureHashes(s *sequence, n int) {
	bs := m.cfg.BlockSize
	for i := len(s.hashes); i < n; i++ {
		var parent BlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		s.hashes = append(s.hashes, HashBlock(parent, s.tokens[i*bs:(i+1)*bs]))
	}
}

func (m *Manager) resolve(opts SeqOptions) (limit int, pol OverflowPolicy, sinks int, err error) {
	limit, pol, sinks = m.cfg.MaxLen, m.cfg.Overflow, m.cfg.Sinks
	if opts.MaxLen < 0 || opts.Sinks < 0 {
		return 0, 0, 0, fmt.Errorf("kvcache: negative sequence option (max len %d, sinks %d)", opts.MaxLen, opts.Sinks)
	}
	if opts.MaxLen > 0 {
		limit = opts.MaxLen
	}
	if opts.Overflow != nil {
		pol = *opts.Overflow
	}
	if opts.Sinks > 0 {
		sinks = opts.Sinks
	}
	if pol > TruncateMiddle {
		return 0, 0, 0, fmt.Errorf("kvcache: unknown overflow policy %d", pol)
	}
	bs := m.cfg.BlockSize
	if m.cfg.Allocator == Contiguous && limit == 0 {
		return 0, 0, 0, fmt.Errorf("kvcache: the contiguous allocator needs a maximum length per sequence (SeqOptions.MaxLen or Config.MaxLen)")
	}
	if err := CheckLimit(limit, pol, sinks, bs); err != nil {
		return 0, 0, 0, err
	}
	return limit, pol, sinks, nil
}

// Allocate registers a new sequence with its prompt tokens and gives it
// slots for all of them, reusing every cached full block of its prefix
// (paged mode). The last prompt token is always computed, so the model has
// logits: a prompt that is all cached blocks still recomputes its last block.
// Hits and queries are counted in tokens. On error nothing changes; a
// *NoSpaceError means the pool cannot hold the prompt now.
func (m *Manager) Allocate(id SeqID, tokens []int32, opts SeqOptions) (AllocResult, error) {
	if _, ok := m.seqs[id]; ok {
		return AllocResult{}, fmt.Errorf("kvcache: allocate: sequence %d already exists", id)
	}
	if len(tokens) == 0 {
		return AllocResult{}, fmt.Errorf("kvcache: allocate: sequence %d has no tokens", id)
	}
	limit, pol, sinks, err := m.resolve(opts)
	if err != nil {
		return AllocResult{}, err
	}
	s := &sequence{id: id, limit: limit, overflow: pol, sinks: sinks, tokens: slices.Clone(tokens)}
	var ov *Overflow
	if limit > 0 && len(tokens) > limit {
		if pol == Stop {
			return AllocResult{}, &ContextLimitError{Seq: id, Limit: limit, Adding: len(tokens), Policy: pol}
		}
		// No K/V exist yet, so both policies shorten the prompt the same
		// way: keep the head and the most recent tokens, half the limit.
		keep := max(limit/2, sinks+1)
		from, to := sinks, len(tokens)-(keep-sinks)
		s.tokens = slices.Concat(tokens[:from], tokens[to:])
		ov = &Overflow{Policy: pol, DroppedFrom: from, DroppedTo: to}
	}
	bs := m.cfg.BlockSize
	if m.p.contiguous {
		n := m.BlocksFor(limit)
		start, ok := m.p.takeRun(n, id, m.step)
		if !ok {
			return AllocResult{}, &NoSpaceError{Op: "allocate", Seq: id, Need: n, Available: m.p.nFree, LargestRun: m.p.largestRun()}
		}
		for i := range n {
			s.blocks = append(s.blocks, start+i)
		}
		m.fill(s, 0, m.BlocksFor(len(s.tokens)))
		m.seqs[id] = s
		m.emit(EventAlloc, id, slices.Clone(s.blocks), len(s.tokens), 0, fmt.Sprintf("reserved %d tokens contiguously", n*bs))
	} else {
		hits, err := m.place(s, 0, "allocate")
		if err != nil {
			return AllocResult{}, err
		}
		m.seqs[id] = s
		m.c.prefixQueries += int64(len(s.tokens))
		m.c.prefixHits += int64(hits * bs)
	}
	if ov != nil {
		m.c.overflows++
		m.emit(EventOverflow, id, nil, ov.DroppedTo-ov.DroppedFrom, 0,
			fmt.Sprintf("prompt of %d tokens exceeds the context limit of %d; dropped tokens %d to %d", len(tokens), limit, ov.DroppedFrom, ov.DroppedTo-1))
	}
	return AllocResult{Computed: s.computed, Overflow: ov}, nil
}

// CachedPrefix returns how many leading tokens of a prompt Allocate would
// find in the prefix cache now (a multiple of the block size, never the
// whole prompt), changing nothing and counting nothing. A scheduler uses it
// to know a request's real block need before admitting it:
// BlocksFor(len(tokens)) - CachedPrefix(tokens)/BlockSize.
func (m *Manager) CachedPrefix(tokens []int32) int {
	if m.p.contiguous || len(tokens) == 0 {
		return 0
	}
	bs := m.cfg.BlockSize
	var parent BlockHash
	n := 0
	for i := 0; i < (len(tokens)-1)/bs; i++ {
		toks := tokens[i*bs : (i+1)*bs]
		h := HashBlock(parent, toks)
		if _, ok, _ := m.p.lookup(h, parent, toks); !ok {
			break
		}
		parent = h
		n += bs
	}
	return n
}

// place gives s (paged mode) blocks for s.tokens from logical block from
// on, reusing cached blocks of its prefix. s.blocks and s.hashes hold the
// first from blocks. It returns the number of blocks hit. On error s.blocks
// and the pool are unchanged.
func (m *Manager) place(s *sequence, from int, op string) (int, error) {
	bs := m.cfg.BlockSize
	m.ensureHashes(s, from)
	s.hashes = s.hashes[:from]
	var hitIDs []int
	if !s.noCache {
		maxHit := (len(s.tokens) - 1) / bs
		for i := from; i < maxHit; i++ {
			var parent BlockHash
			if i > 0 {
				parent = s.hashes[i-1]
			}
			toks := s.tokens[i*bs : (i+1)*bs]
			h := HashBlock(parent, toks)
			id, ok, coll := m.p.lookup(h, parent, toks)
			if coll {
				m.c.hashCollisions++
			}
			if !ok {
				break
			}
			hitIDs = append(hitIDs, id)
			s.hashes = append(s.hashes, h)
		}
	}
	cachedHits := 0
	for _, id := range hitIDs {
		if m.p.blocks[id].ref == 0 {
			cachedHits++
		}
	}
	need := m.BlocksFor(len(s.tokens)) - from - len(hitIDs)
	if avail := m.p.available() - cachedHits; need > avail {
		s.hashes = s.hashes[:from]
		return 0, &NoSpaceError{Op: op, Seq: s.id, Need: need, Available: avail}
	}
	for _, id := range hitIDs {
		m.p.retain(id, s.id, m.step)
		m.p.blocks[id].hits++
	}
	s.blocks = append(s.blocks[:from], hitIDs...)
	fresh := m.takeBlocks(s.id, need)
	s.blocks = append(s.blocks, fresh...)
	s.computed = (from + len(hitIDs)) * bs
	s.published = from + len(hitIDs)
	m.fill(s, from+len(hitIDs), len(s.blocks))
	if len(hitIDs) > 0 {
		m.emit(EventCacheHit, s.id, hitIDs, len(hitIDs)*bs, 0, fmt.Sprintf("%d prompt tokens found in the prefix cache", len(hitIDs)*bs))
	}
	if len(fresh) > 0 {
		m.emit(EventAlloc, s.id, fresh, len(s.tokens)-s.computed, 0, op)
	}
	return len(hitIDs), nil
}

// fill sets the filled counts of s's logical blocks from..to-1 (to is
// clamped to the table) to match len(s.tokens).
func (m *Manager) fill(s *sequence, from, to int) {
	bs := m.cfg.BlockSize
	for i := from; i < min(to, len(s.blocks)); i++ {
		f := min(bs, max(0, len(s.tokens)-i*bs))
		m.p.setFilled(s.blocks[i], f)
		m.p.blocks[s.blocks[i]].lastAccess = m.step
	}
}

// Append gives slots to tokens the engine is about to compute for sequence
// id (decode: the token just sampled; chunked prefill: the next chunk, if
// the caller registered a partial prompt). Appending into a partly filled
// block that another sequence shares copies it first (copy on write). When
// the sequence would pass its context limit, its overflow policy applies
// and the result says what the engine must do. On error nothing changes.
func (m *Manager) Append(id SeqID, tokens []int32) (AppendResult, error) {
	s, err := m.get(id, "append")
	if err != nil {
		return AppendResult{}, err
	}
	if len(tokens) == 0 {
		return AppendResult{}, fmt.Errorf("kvcache: append: no tokens for sequence %d", id)
	}
	var ov *Overflow
	if s.limit > 0 && len(s.tokens)+len(tokens) > s.limit {
		switch s.overflow {
		case Stop:
			return AppendResult{}, &ContextLimitError{Seq: id, Limit: s.limit, Len: len(s.tokens), Adding: len(tokens), Policy: Stop}
		case TruncateMiddle:
			return m.truncate(s, tokens)
		case RollingWindow:
			if ov, err = m.roll(s, len(tokens)); err != nil {
				return AppendResult{}, err
			}
		}
	}
	start := len(s.tokens)
	if err := m.extend(s, tokens); err != nil {
		return AppendResult{}, err
	}
	return AppendResult{Start: start, Overflow: ov}, nil
}

// extend appends tokens to s, taking blocks and copying a shared last block
// as needed. On error nothing changes.
func (m *Manager) extend(s *sequence, tokens []int32) error {
	bs := m.cfg.BlockSize
	n0, n1 := len(s.tokens), len(s.tokens)+len(tokens)
	first := n0 / bs // first block written
	if !m.p.contiguous {
		cow := n0%bs != 0 && m.p.blocks[s.blocks[first]].ref > 1
		fresh := m.BlocksFor(n1) - len(s.blocks)
		need := fresh
		if cow {
			need++
		}
		if need > m.p.available() {
			return &NoSpaceError{Op: "append", Seq: s.id, Need: need, Available: m.p.available()}
		}
		if cow && m.st == nil {
			return fmt.Errorf("append to sequence %d needs a copy of shared block %d: %w", s.id, s.blocks[first], ErrNoStorage)
		}
		if cow {
			m.cow(s, first, "append into a shared, partly filled block")
		}
		if fresh > 0 {
			ids := m.takeBlocks(s.id, fresh)
			s.blocks = append(s.blocks, ids...)
			m.emit(EventAlloc, s.id, ids, len(tokens), 0, "append")
		}
	}
	s.tokens = append(s.tokens, tokens...)
	m.fill(s, first, m.BlocksFor(n1))
	return nil
}

// cow replaces s's logical block i by a private copy.
func (m *Manager) cow(s *sequence, i int, reason string) {
	old := s.blocks[i]
	nw := m.takeBlocks(s.id, 1)[0]
	m.st.Copy(nw, old)
	m.p.setFilled(nw, m.p.blocks[old].filled)
	m.p.release(old, s.id, m.step, m.nextSerial())
	s.blocks[i] = nw
	m.c.cow++
	m.emit(EventCoW, s.id, []int{old, nw}, m.p.blocks[nw].filled, 0, reason)
}

// Commit tells the manager that the K/V of sequence id's first upTo tokens
// are written. Full blocks among them enter the prefix cache, where later
// requests can reuse them. Call it after each forward pass.
func (m *Manager) Commit(id SeqID, upTo int) error {
	s, err := m.get(id, "commit")
	if err != nil {
		return err
	}
	if upTo < 0 || upTo > len(s.tokens) {
		return fmt.Errorf("kvcache: commit: sequence %d holds %d tokens, cannot commit %d", id, len(s.tokens), upTo)
	}
	s.computed = max(s.computed, upTo)
	m.publish(s)
	return nil
}

// publish offers s's computed full blocks to the prefix cache.
func (m *Manager) publish(s *sequence) {
	if m.p.contiguous || s.noCache {
		return
	}
	bs := m.cfg.BlockSize
	full := s.computed / bs
	m.ensureHashes(s, full)
	for i := s.published; i < full; i++ {
		b := s.blocks[i]
		if m.p.blocks[b].hashed {
			continue
		}
		var parent BlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		m.p.publish(b, s.hashes[i], parent, s.tokens[i*bs:(i+1)*bs], i)
	}
	s.published = max(s.published, full)
}

// Fork makes child share all of parent's blocks (paged mode; contiguous mode
// copies them into a new reservation). Use it for n > 1 samples. The first
// append into a shared, partly filled block copies it.
func (m *Manager) Fork(parent, child SeqID) error {
	s, err := m.get(parent, "fork")
	if err != nil {
		return err
	}
	if _, ok := m.seqs[child]; ok {
		return fmt.Errorf("kvcache: fork: sequence %d already exists", child)
	}
	c := &sequence{
		id: child, tokens: slices.Clone(s.tokens), hashes: slices.Clone(s.hashes),
		computed: s.computed, published: s.published, limit: s.limit, overflow: s.overflow,
		sinks: s.sinks, noCache: s.noCache,
	}
	if m.p.contiguous {
		used := m.BlocksFor(len(s.tokens))
		if used > 0 && m.st == nil {
			return fmt.Errorf("fork of sequence %d copies its blocks: %w", parent, ErrNoStorage)
		}
		start, ok := m.p.takeRun(len(s.blocks), child, m.step)
		if !ok {
			return &NoSpaceError{Op: "fork", Seq: child, Need: len(s.blocks), Available: m.p.nFree, LargestRun: m.p.largestRun()}
		}
		for i := range s.blocks {
			c.blocks = append(c.blocks, start+i)
		}
		for i := range used {
			m.st.Copy(c.blocks[i], s.blocks[i])
		}
		m.fill(c, 0, used)
		m.c.cow += int64(used)
		m.seqs[child] = c
		m.emit(EventAlloc, child, slices.Clone(c.blocks), len(c.tokens), 0, fmt.Sprintf("fork of sequence %d: copied %d blocks", parent, used))
		return nil
	}
	for _, b := range s.blocks {
		m.p.retain(b, child, m.step)
	}
	c.blocks = slices.Clone(s.blocks)
	m.seqs[child] = c
	m.emit(EventAlloc, child, slices.Clone(c.blocks), len(c.tokens), 0, fmt.Sprintf("fork of sequence %d: shares its blocks", parent))
	return nil
}

// Free releases sequence id's blocks (device or host). Hashed blocks stay
// in the prefix cache until evicted.
func (m *Manager) Free(id SeqID) error {
	s, ok := m.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: free: unknown sequence %d", id)
	}
	if s.swapped {
		m.dropHost(s)
		m.nSwapped--
		delete(m.seqs, id)
		m.emit(EventFree, id, nil, len(s.tokens), 0, "freed while swapped out")
		return nil
	}
	blocks := s.blocks
	m.releaseAll(s)
	delete(m.seqs, id)
	m.emit(EventFree, id, blocks, len(s.tokens), 0, "freed")
	return nil
}

// releaseAll gives back s's device blocks, tail first.
func (m *Manager) releaseAll(s *sequence) {
	if m.p.contiguous {
		if len(s.blocks) > 0 {
			m.p.releaseRun(s.blocks[0], len(s.blocks), s.id, m.step)
		}
	} else {
		serial := m.nextSerial()
		for i := len(s.blocks) - 1; i >= 0; i-- {
			m.p.release(s.blocks[i], s.id, m.step, serial)
		}
	}
	s.blocks = nil
}
