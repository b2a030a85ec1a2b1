package kvcache

import (
	"slices"
	"sort"
)

// Location says where a block's bytes live.
type Location uint8

// The locations.
const (
	Device Location = iota // in the device pool (kvstore)
	Host                   // in the host swap pool
)

// String returns "device" or "host".
func (l Location) String() string {
	if l == Host {
		return "host"
	}
	return "device"
}

// BlockState is a device block's place in the pool's accounting.
type BlockState uint8

// The block states. Every device block is in exactly one.
const (
	BlockFree   BlockState = iota // no owner, no cached contents
	BlockUsed                     // owned by at least one sequence
	BlockCached                   // no owner, contents kept for prefix reuse (evictable)
)

// String returns "free", "used" or "cached".
func (s BlockState) String() string {
	switch s {
	case BlockUsed:
		return "used"
	case BlockCached:
		return "cached"
	}
	return "free"
}

// BlockInfo is the bookkeeping of one block at snapshot time.
type BlockInfo struct {
	ID         int        // device block id, or host block id when Location is Host
	Location   Location   // device or host
	State      BlockState // device blocks: free, used or cached; host blocks: used
	Owners     []SeqID    // sequences holding it
	Ref        int        // reference count (equals len(Owners))
	Filled     int        // token slots holding a token
	KPrecision string     // K precision, as configured
	VPrecision string     // V precision, as configured
	Hashed     bool       // in the prefix cache (host: was, when swapped out)
	Hash       BlockHash  // when Hashed
	LastAccess int64      // step of the last allocation, hit, write or release
	Hits       int        // prefix-cache reuses since it was filled
	// EvictRank is a cached block's place in the eviction order under the
	// policy in force (0: the next victim); -1 for blocks not cached.
	EvictRank int
}

// SeqInfo is one sequence at snapshot time.
type SeqInfo struct {
	ID         SeqID          // the sequence
	Len        int            // tokens
	Computed   int            // tokens with K/V written
	Blocks     []int          // device block table (nil while swapped)
	HostBlocks []int          // host block ids while swapped
	Swapped    bool           // its blocks are in the host pool
	MaxLen     int            // context limit, 0: none
	Overflow   OverflowPolicy // its overflow policy
	Private    bool           // a rolling-window shift took its later blocks out of the prefix cache
}

// Snapshot is an immutable copy of the manager's bookkeeping (never the
// tensors). It shares nothing with the manager, so any goroutine may read it.
type Snapshot struct {
	Step      int64          // the manager's step when taken
	BlockSize int            // tokens per block
	Allocator Allocator      // paged or contiguous
	Eviction  EvictionPolicy // the eviction policy in force
	Blocks    []BlockInfo    // device blocks, by id
	Host      []BlockInfo    // host blocks, by id
	Seqs      []SeqInfo      // by id
	Metrics   Metrics        // gauges and counters
}

// Metrics are the cache's gauges and cumulative counters.
type Metrics struct {
	Step          int64   // the manager's step
	BlockSize     int     // tokens per block
	BlockBytes    int     // bytes per block, all layers, K+V with scales
	BytesPerToken float64 // BlockBytes / BlockSize: a token slot's cost at the configured precisions
	TotalBlocks   int     // device blocks in the pool
	UsedBlocks    int     // blocks owned by a sequence
	FreeBlocks    int     // blocks with no owner and no cached contents
	CachedBlocks  int     // blocks with no owner kept for prefix reuse (evictable)
	// UsagePercent is UsedBlocks over TotalBlocks, in percent.
	UsagePercent float64

	ReservedSlots int // token slots in used blocks
	FilledSlots   int // of them, slots holding a token
	// InternalFragmentation is the percentage of reserved slots that hold
	// no token (in contiguous mode, mostly reserved but unused length).
	InternalFragmentation float64
	// LargestFreeRun is the longest run of adjacent free blocks
	// (contiguous mode); in paged mode FreeBlocks+CachedBlocks.
	LargestFreeRun int
	// ExternalFragmentation is the percentage of free blocks outside the
	// largest free run (contiguous mode): memory that cannot serve a request
	// longer than that run. It is 0 in paged mode. See UnservableBlocks.
	ExternalFragmentation float64

	PrefixQueryTokens int64   // prompt tokens looked up in the prefix cache
	PrefixHitTokens   int64   // of them, tokens found
	PrefixHitRate     float64 // hits over queries, 0 to 1

	Evictions            int64 // cached blocks evicted
	Preemptions          int64 // both modes
	RecomputePreemptions int64 // including swap fallbacks
	SwapPreemptions      int64 // preemptions that swapped
	SwapFallbacks        int64 // swaps that fell back to recompute
	SwapOutBytes         int64 // bytes saved to the host pool
	SwapInBytes          int64 // bytes loaded back (cached blocks are reused, not loaded)
	HostBlocks           int   // blocks in the host pool now
	HostBytes            int64 // bytes in the host pool now
	HostBudget           int64 // the host pool's bound
	CoWCopies            int64 // blocks copied on write (and contiguous forks)
	ShiftCopies          int64 // blocks moved by contiguous rolling windows
	HashCollisions       int64 // hash matches whose tokens differed (cache misses)
	Overflows            int64 // context-limit events handled by a policy
	Sequences            int   // sequences known (device or host)
	SwappedSequences     int   // of them, swapped out
}

// Metrics returns the current gauges and counters. It is O(1) in paged mode
// and O(free runs) in contiguous mode.
func (m *Manager) Metrics() Metrics {
	p := m.p
	bs := m.cfg.BlockSize
	x := Metrics{
		Step: m.step, BlockSize: bs, TotalBlocks: len(p.blocks),
		BlockBytes: m.cfg.BlockBytes, BytesPerToken: float64(m.cfg.BlockBytes) / float64(bs),
		UsedBlocks: p.nUsed, FreeBlocks: p.nFree, CachedBlocks: p.nCached,
		ReservedSlots: p.nUsed * bs, FilledSlots: p.usedFilled,
		LargestFreeRun:    p.largestRun(),
		PrefixQueryTokens: m.c.prefixQueries, PrefixHitTokens: m.c.prefixHits,
		Evictions:            m.c.evictions,
		Preemptions:          m.c.preemptRecompute + m.c.preemptSwap,
		RecomputePreemptions: m.c.preemptRecompute, SwapPreemptions: m.c.preemptSwap,
		SwapFallbacks: m.c.swapFallbacks, SwapOutBytes: m.c.swapOutBytes, SwapInBytes: m.c.swapInBytes,
		HostBlocks: len(m.host), HostBytes: m.hostB, HostBudget: m.cfg.HostBudget,
		CoWCopies: m.c.cow, ShiftCopies: m.c.shiftCopies, HashCollisions: m.c.hashCollisions,
		Overflows: m.c.overflows, Sequences: len(m.seqs), SwappedSequences: m.nSwapped,
	}
	if x.TotalBlocks > 0 {
		x.UsagePercent = 100 * float64(x.UsedBlocks) / float64(x.TotalBlocks)
	}
	if x.ReservedSlots > 0 {
		x.InternalFragmentation = 100 * float64(x.ReservedSlots-x.FilledSlots) / float64(x.ReservedSlots)
	}
	if p.contiguous && p.nFree > 0 {
		x.ExternalFragmentation = 100 * float64(p.nFree-x.LargestFreeRun) / float64(p.nFree)
	}
	if x.PrefixQueryTokens > 0 {
		x.PrefixHitRate = float64(x.PrefixHitTokens) / float64(x.PrefixQueryTokens)
	}
	return x
}

// UnservableBlocks returns the free blocks that cannot serve a request of
// n tokens although there are enough of them in total: all free blocks when
// no run of adjacent free blocks is long enough (contiguous mode), else 0.
// This is external fragmentation as the next request sees it; in paged mode
// it is always 0.
func (m *Manager) UnservableBlocks(n int) int {
	need := m.BlocksFor(n)
	if !m.p.contiguous || m.p.nFree < need || m.p.largestRun() >= need {
		return 0
	}
	return m.p.nFree
}

// Snapshot copies every block's and sequence's bookkeeping and the metrics.
// It costs O(blocks); call it every step or every few, as the UI needs.
func (m *Manager) Snapshot() *Snapshot {
	p := m.p
	snap := &Snapshot{
		Step: m.step, BlockSize: m.cfg.BlockSize, Allocator: m.cfg.Allocator, Eviction: p.policy,
		Blocks:  make([]BlockInfo, len(p.blocks)),
		Metrics: m.Metrics(),
	}
	for id := range p.blocks {
		b := &p.blocks[id]
		bi := BlockInfo{
			ID: id, Location: Device, Owners: slices.Clone(b.owners), Ref: b.ref, Filled: b.filled,
			KPrecision: m.cfg.KPrecision, VPrecision: m.cfg.VPrecision,
			Hashed: b.hashed, Hash: b.hash, LastAccess: b.lastAccess, Hits: b.hits, EvictRank: -1,
		}
		switch {
		case b.ref > 0:
			bi.State = BlockUsed
		case b.heapIdx >= 0:
			bi.State = BlockCached
		}
		snap.Blocks[id] = bi
	}
	cached := slices.Clone(p.evictable.ids)
	slices.SortFunc(cached, func(a, b int) int {
		if p.evictLess(a, b) {
			return -1
		}
		return 1
	})
	for r, id := range cached {
		snap.Blocks[id].EvictRank = r
	}
	for id, hb := range m.host {
		snap.Host = append(snap.Host, BlockInfo{
			ID: id, Location: Host, State: BlockUsed, Owners: []SeqID{hb.seq}, Ref: 1, Filled: hb.filled, EvictRank: -1,
			KPrecision: m.cfg.KPrecision, VPrecision: m.cfg.VPrecision,
			Hashed: hb.hashed, Hash: hb.hash, LastAccess: hb.since,
		})
	}
	sort.Slice(snap.Host, func(i, j int) bool { return snap.Host[i].ID < snap.Host[j].ID })
	for _, s := range m.seqs {
		snap.Seqs = append(snap.Seqs, SeqInfo{
			ID: s.id, Len: len(s.tokens), Computed: s.computed, Blocks: slices.Clone(s.blocks),
			HostBlocks: slices.Clone(s.host), Swapped: s.swapped, MaxLen: s.limit, Overflow: s.overflow, Private: s.noCache,
		})
	}
	sort.Slice(snap.Seqs, func(i, j int) bool { return snap.Seqs[i].ID < snap.Seqs[j].ID })
	return snap
}
