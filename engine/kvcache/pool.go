package kvcache

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
)

// EvictionPolicy chooses which cached, unreferenced block is evicted first
// when the pool has no free block left.
type EvictionPolicy uint8

// The eviction policies.
const (
	// LRU evicts the block released longest ago. Blocks released together
	// (a sequence's chain, at one step) go tail first, so the shared head of
	// a prefix survives longest, as in vLLM.
	LRU EvictionPolicy = iota
	// LFU evicts the block reused least often by prefix hits; ties go as LRU.
	LFU
	// FIFO evicts the block that entered the prefix cache first, whatever
	// its use since.
	FIFO
)

// String returns "lru", "lfu" or "fifo".
func (p EvictionPolicy) String() string {
	switch p {
	case LRU:
		return "lru"
	case LFU:
		return "lfu"
	case FIFO:
		return "fifo"
	}
	return fmt.Sprintf("EvictionPolicy(%d)", p)
}

// ParseEvictionPolicy parses "lru", "lfu" or "fifo" (any case).
func ParseEvictionPolicy(s string) (EvictionPolicy, error) {
	switch strings.ToLower(s) {
	case "lru":
		return LRU, nil
	case "lfu":
		return LFU, nil
	case "fifo":
		return FIFO, nil
	}
	return 0, fmt.Errorf("kvcache: unknown eviction policy %q (want lru, lfu or fifo)", s)
}

// block is the bookkeeping of one device block. It never holds K/V data.
type block struct {
	ref        int
	owners     []SeqID
	filled     int       // token slots written (or being written)
	hashed     bool      // published in the prefix cache
	hash       BlockHash // valid when hashed
	parent     BlockHash // parent hash, kept to verify hits
	tokens     []int32   // the block's tokens, kept to verify hits (when hashed)
	depth      int       // logical index in its chain when hashed
	lastAccess int64     // step of the last allocation, hit, write or release
	hits       int       // times it was reused through the prefix cache
	cachedAt   uint64    // serial when published (FIFO order)
	released   uint64    // serial of the release that made it cached (LRU ties)
	heapIdx    int       // index in the evictable heap, -1 when not there
}

// pool owns every device block: the free stack (paged), the free runs
// (contiguous), the reference counts and the prefix cache of hashed blocks
// with its eviction heap. It knows nothing about sequences beyond owner ids.
type pool struct {
	blockSize  int
	blocks     []block
	contiguous bool

	free []int // paged: free, unhashed blocks (a stack, lowest id on top at start)
	runs []run // contiguous: free runs, sorted by start, never adjacent

	cache     map[BlockHash]int // hash -> cached or used block holding it
	evictable evictHeap         // hashed blocks with ref 0
	policy    EvictionPolicy

	nFree, nUsed, nCached int
	usedFilled            int // sum of filled over used blocks
	serial                uint64

	reset func(id int) // Storage.Reset, or nil
}

type run struct{ start, n int }

func newPool(numBlocks, blockSize int, contiguous bool, policy EvictionPolicy) *pool {
	p := &pool{
		blockSize:  blockSize,
		blocks:     make([]block, numBlocks),
		contiguous: contiguous,
		cache:      make(map[BlockHash]int),
		policy:     policy,
		nFree:      numBlocks,
	}
	p.evictable.p = p
	for i := range p.blocks {
		p.blocks[i].heapIdx = -1
	}
	if contiguous {
		p.runs = []run{{0, numBlocks}}
	} else {
		p.free = make([]int, numBlocks)
		for i := range p.free {
			p.free[i] = numBlocks - 1 - i
		}
	}
	return p
}

// available is how many blocks an allocation can get: free ones plus cached
// ones that can be evicted.
func (p *pool) available() int { return p.nFree + p.nCached }

// take gets one block for owner (paged mode): a free one, or else the
// eviction policy's victim, which it drops from the prefix cache. It returns
// the block id and whether it evicted. The caller has checked available().
func (p *pool) take(owner SeqID, step int64) (id int, evicted bool) {
	if n := len(p.free); n > 0 {
		id = p.free[n-1]
		p.free = p.free[:n-1]
		p.nFree--
	} else {
		id = heap.Pop(&p.evictable).(int)
		p.nCached--
		p.unpublish(id)
		b := &p.blocks[id]
		b.filled = 0
		b.hits = 0
		evicted = true
	}
	b := &p.blocks[id]
	b.ref = 1
	b.owners = append(b.owners[:0], owner)
	b.lastAccess = step
	p.nUsed++
	if p.reset != nil {
		p.reset(id)
	}
	return id, evicted
}

// retain adds owner as a holder of block id, taking it out of the evictable
// set when it was cached.
func (p *pool) retain(id int, owner SeqID, step int64) {
	b := &p.blocks[id]
	if b.ref == 0 {
		heap.Remove(&p.evictable, b.heapIdx)
		p.nCached--
		p.nUsed++
		p.usedFilled += b.filled
	}
	b.ref++
	b.owners = append(b.owners, owner)
	b.lastAccess = step
}

// release drops owner's hold on block id. At ref 0 a hashed block becomes
// cached (evictable); any other block becomes free. serial orders releases.
func (p *pool) release(id int, owner SeqID, step int64, serial uint64) {
	b := &p.blocks[id]
	if i := slices.Index(b.owners, owner); i >= 0 {
		b.owners = slices.Delete(b.owners, i, i+1)
	}
	b.ref--
	b.lastAccess = step
	if b.ref > 0 {
		return
	}
	p.nUsed--
	p.usedFilled -= b.filled
	if b.hashed && !p.contiguous {
		b.released = serial
		heap.Push(&p.evictable, id)
		p.nCached++
		return
	}
	b.filled = 0
	b.hits = 0
	p.unpublish(id)
	p.nFree++
	if p.reset != nil {
		p.reset(id)
	}
	if !p.contiguous {
		p.free = append(p.free, id)
	}
}

// setFilled changes a used block's filled count and keeps usedFilled true.
func (p *pool) setFilled(id, filled int) {
	b := &p.blocks[id]
	p.usedFilled += filled - b.filled
	b.filled = filled
}

// publish enters a full, used block into the prefix cache. It reports false
// (and changes nothing) when another block already holds the hash.
func (p *pool) publish(id int, h, parent BlockHash, tokens []int32, depth int) bool {
	if _, ok := p.cache[h]; ok {
		return false
	}
	b := &p.blocks[id]
	b.hashed, b.hash, b.parent, b.depth = true, h, parent, depth
	b.tokens = append(b.tokens[:0], tokens...)
	p.serial++
	b.cachedAt = p.serial
	p.cache[h] = id
	return true
}

// unpublish removes a block from the prefix cache (it stays where it is).
func (p *pool) unpublish(id int) {
	b := &p.blocks[id]
	if !b.hashed {
		return
	}
	if p.cache[b.hash] == id {
		delete(p.cache, b.hash)
	}
	b.hashed = false
	b.hash, b.parent = BlockHash{}, BlockHash{}
	b.tokens = b.tokens[:0]
}

// lookup returns the block caching hash h whose parent and tokens match,
// and whether a different block sat under the hash (a collision).
func (p *pool) lookup(h, parent BlockHash, tokens []int32) (id int, ok, collision bool) {
	id, ok = p.cache[h]
	if !ok {
		return 0, false, false
	}
	b := &p.blocks[id]
	if b.parent != parent || !slices.Equal(b.tokens, tokens) {
		return 0, false, true
	}
	return id, true, false
}

// setPolicy changes the eviction order of the blocks cached now and later.
func (p *pool) setPolicy(policy EvictionPolicy) {
	p.policy = policy
	heap.Init(&p.evictable)
}

// evictLess orders two cached blocks: the first one is evicted first.
func (p *pool) evictLess(i, j int) bool {
	a, b := &p.blocks[i], &p.blocks[j]
	switch p.policy {
	case FIFO:
		return a.cachedAt < b.cachedAt
	case LFU:
		if a.hits != b.hits {
			return a.hits < b.hits
		}
	}
	if a.lastAccess != b.lastAccess {
		return a.lastAccess < b.lastAccess
	}
	if a.released != b.released {
		return a.released < b.released
	}
	if a.depth != b.depth {
		return a.depth > b.depth // tail of a chain first
	}
	return i < j
}

// evictHeap is a min-heap of cached block ids under pool.evictLess.
type evictHeap struct {
	p   *pool
	ids []int
}

func (h *evictHeap) Len() int           { return len(h.ids) }
func (h *evictHeap) Less(i, j int) bool { return h.p.evictLess(h.ids[i], h.ids[j]) }
func (h *evictHeap) Swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	h.p.blocks[h.ids[i]].heapIdx = i
	h.p.blocks[h.ids[j]].heapIdx = j
}
func (h *evictHeap) Push(x any) {
	id := x.(int)
	h.p.blocks[id].heapIdx = len(h.ids)
	h.ids = append(h.ids, id)
}
func (h *evictHeap) Pop() any {
	n := len(h.ids) - 1
	id := h.ids[n]
	h.ids = h.ids[:n]
	h.p.blocks[id].heapIdx = -1
	return id
}

// takeRun reserves n adjacent blocks for owner (contiguous mode), first fit.
// It returns the first block id, or ok false when no free run is long enough.
func (p *pool) takeRun(n int, owner SeqID, step int64) (start int, ok bool) {
	for i, r := range p.runs {
		if r.n < n {
			continue
		}
		start = r.start
		if r.n == n {
			p.runs = slices.Delete(p.runs, i, i+1)
		} else {
			p.runs[i] = run{r.start + n, r.n - n}
		}
		for id := start; id < start+n; id++ {
			b := &p.blocks[id]
			b.ref = 1
			b.owners = append(b.owners[:0], owner)
			b.lastAccess = step
			if p.reset != nil {
				p.reset(id)
			}
		}
		p.nFree -= n
		p.nUsed += n
		return start, true
	}
	return 0, false
}

// releaseRun frees n adjacent blocks starting at start (contiguous mode).
func (p *pool) releaseRun(start, n int, owner SeqID, step int64) {
	for id := start; id < start+n; id++ {
		p.release(id, owner, step, 0)
	}
	i, _ := slices.BinarySearchFunc(p.runs, start, func(r run, s int) int { return r.start - s })
	p.runs = slices.Insert(p.runs, i, run{start, n})
	// Merge with the next run, then with the previous one.
	if i+1 < len(p.runs) && p.runs[i].start+p.runs[i].n == p.runs[i+1].start {
		p.runs[i].n += p.runs[i+1].n
		p.runs = slices.Delete(p.runs, i+1, i+2)
	}
	if i > 0 && p.runs[i-1].start+p.runs[i-1].n == p.runs[i].start {
		p.runs[i-1].n += p.runs[i].n
		p.runs = slices.Delete(p.runs, i, i+1)
	}
}

// largestRun returns the longest free run in blocks (contiguous mode); in
// paged mode any free block serves, so it returns available().
func (p *pool) largestRun() int {
	if !p.contiguous {
		return p.available()
	}
	m := 0
	for _, r := range p.runs {
		m = max(m, r.n)
	}
	return m
}
