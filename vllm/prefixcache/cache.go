package prefixcache

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"kvscope/vllm/kvevents"
)

// Key names a cached block: its hash within its KV-cache group (-1 where
// the events name no group).
type Key struct {
	Group int
	Hash  kvevents.Hash
}

// Block is one cached block.
type Block struct {
	Key
	// Parent is the hash of the block before it in its chain (same group);
	// zero for a chain's first block.
	Parent kvevents.Hash
	// Tokens are the block's token ids, as vLLM sent them.
	Tokens    []int32
	BlockSize int
	// Media are where the block is held ("GPU", "CPU", ...; "" where the
	// events name none), sorted.
	Media    []string
	LoraID   int
	LoraName string
	// Stored is when the block was (last) stored, by the publisher's clock.
	Stored time.Time
	// Stores counts the BlockStored events for this hash (more than one
	// where it came back after an eviction or onto another medium).
	Stores int
	// Hits counts prefix-cache hits on the block where a source reports
	// them (AddHits); vLLM's events do not.
	Hits int
}

// Eviction is one removal, as it happened.
type Eviction struct {
	Time time.Time
	Key
	Medium string
	// Tokens is the block's token count (0 where it was unknown).
	Tokens int
	// Known is false for a hash that was not cached here (stored before
	// the events were followed, or lost).
	Known bool
	// Cleared marks an AllBlocksCleared (Key is zero; Count blocks went).
	Cleared bool
	Count   int
}

// Stats are a cache's figures.
type Stats struct {
	Blocks int // cached blocks
	Tokens int // their tokens
	Roots  int // chains' first blocks, orphans included (a cycle from malformed events has none)

	Stored        int64 // blocks stored (BlockStored hashes)
	Removed       int64 // blocks removed (BlockRemoved hashes)
	UnknownRemove int64 // removals of hashes not cached here
	Clears        int64 // AllBlocksCleared events
	Resets        int64 // publisher restarts
	Lost          int64 // batches lost (sequence gaps not filled)
	Batches       int64
	Hits          int64
	// Last is the publisher's time of the last batch applied.
	Last time.Time
}

// Options tune a Cache.
type Options struct {
	// MaxEvictions is how many evictions are kept (oldest dropped first);
	// 0 means 10000.
	MaxEvictions int
}

// Cache is one source's prefix cache. Its methods are safe for concurrent
// use.
type Cache struct {
	mu       sync.RWMutex
	blocks   map[Key]*Block
	children map[Key]map[Key]struct{} // parent → children, whether or not the parent is cached
	stats    Stats

	churn []churnPoint // per batch, oldest first, up to maxChurn

	maxEv   int
	ev      []Eviction // ring
	evStart int        // index of the oldest in ev
	evCount int64      // evictions ever recorded
}

// New returns an empty Cache.
func New(opts Options) *Cache {
	if opts.MaxEvictions <= 0 {
		opts.MaxEvictions = 10000
	}
	return &Cache{blocks: map[Key]*Block{}, children: map[Key]map[Key]struct{}{}, maxEv: opts.MaxEvictions}
}

// Apply applies a batch's events in order.
func (c *Cache) Apply(b kvevents.Batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := b.Time()
	for _, e := range b.Events {
		c.apply(t, e)
	}
	c.stats.Batches++
	if t.After(c.stats.Last) {
		c.stats.Last = t
	}
	if len(c.churn) == maxChurn {
		copy(c.churn, c.churn[1:])
		c.churn = c.churn[:maxChurn-1]
	}
	c.churn = append(c.churn, churnPoint{t, c.stats.Stored, c.stats.Removed})
}

const maxChurn = 4096

type churnPoint struct {
	t               time.Time
	stored, removed int64
}

// Churn returns the blocks stored and removed per second over the last
// window of the publisher's time (batches kept: the last 4096), 0 and 0
// with fewer than two batches in it.
func (c *Cache) Churn(window time.Duration) (storedPerSec, removedPerSec float64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := len(c.churn)
	if n < 2 {
		return 0, 0
	}
	last := c.churn[n-1]
	i := n - 1
	for i > 0 && last.t.Sub(c.churn[i-1].t) <= window {
		i--
	}
	first := c.churn[i]
	dt := last.t.Sub(first.t).Seconds()
	if dt <= 0 {
		return 0, 0
	}
	return float64(last.stored-first.stored) / dt, float64(last.removed-first.removed) / dt
}

// ApplyEvent applies one event that happened at t.
func (c *Cache) ApplyEvent(t time.Time, e kvevents.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apply(t, e)
}

func (c *Cache) apply(t time.Time, e kvevents.Event) {
	switch e := e.(type) {
	case *kvevents.BlockStored:
		parent := e.ParentBlockHash
		for i, h := range e.BlockHashes {
			c.store(t, e, Key{Group: e.GroupIdx, Hash: h}, parent, e.BlockTokens(i))
			parent = h
		}
	case *kvevents.BlockRemoved:
		for _, h := range e.BlockHashes {
			c.remove(t, Key{Group: e.GroupIdx, Hash: h}, e.Medium)
		}
	case *kvevents.AllBlocksCleared:
		n := len(c.blocks)
		c.clear()
		c.stats.Clears++
		c.record(Eviction{Time: t, Cleared: true, Known: true, Count: n})
	}
}

func (c *Cache) store(t time.Time, e *kvevents.BlockStored, k Key, parent kvevents.Hash, tokens []int32) {
	c.stats.Stored++
	b, ok := c.blocks[k]
	if !ok {
		b = &Block{Key: k}
		c.blocks[k] = b
	} else if b.Parent != parent {
		c.unlink(b)
	}
	if !ok || b.Parent != parent {
		b.Parent = parent
		if !parent.IsZero() {
			pk := Key{Group: k.Group, Hash: parent}
			if c.children[pk] == nil {
				c.children[pk] = map[Key]struct{}{}
			}
			c.children[pk][k] = struct{}{}
		}
	}
	c.stats.Tokens += len(tokens) - len(b.Tokens)
	b.Tokens = slices.Clone(tokens)
	b.BlockSize = e.BlockSize
	b.LoraID, b.LoraName = e.LoraID, e.LoraName
	b.Stored = t
	b.Stores++
	if i, found := slices.BinarySearch(b.Media, e.Medium); !found {
		b.Media = slices.Insert(b.Media, i, e.Medium)
	}
}

func (c *Cache) unlink(b *Block) {
	if b.Parent.IsZero() {
		return
	}
	pk := Key{Group: b.Group, Hash: b.Parent}
	if m := c.children[pk]; m != nil {
		delete(m, b.Key)
		if len(m) == 0 {
			delete(c.children, pk)
		}
	}
}

func (c *Cache) remove(t time.Time, k Key, medium string) {
	c.stats.Removed++
	b, ok := c.blocks[k]
	if !ok {
		c.stats.UnknownRemove++
		c.record(Eviction{Time: t, Key: k, Medium: medium})
		return
	}
	if i, found := slices.BinarySearch(b.Media, medium); found {
		b.Media = slices.Delete(b.Media, i, i+1)
	} else if medium == "" {
		b.Media = nil // a removal naming no medium takes the block from all
	}
	c.record(Eviction{Time: t, Key: k, Medium: medium, Tokens: len(b.Tokens), Known: true})
	if len(b.Media) > 0 {
		return
	}
	c.unlink(b)
	delete(c.blocks, k)
	c.stats.Tokens -= len(b.Tokens)
}

func (c *Cache) clear() {
	c.blocks = map[Key]*Block{}
	c.children = map[Key]map[Key]struct{}{}
	c.stats.Tokens = 0
}

func (c *Cache) record(e Eviction) {
	if len(c.ev) < c.maxEv {
		c.ev = append(c.ev, e)
	} else {
		c.ev[c.evStart] = e
		c.evStart = (c.evStart + 1) % c.maxEv
	}
	c.evCount++
}

// Reset forgets every block: the publisher restarted.
func (c *Cache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	c.churn = nil
	c.stats.Resets++
}

// MarkLost records n batches lost for good, so that a view can say its
// picture may be incomplete.
func (c *Cache) MarkLost(n int64) {
	c.mu.Lock()
	c.stats.Lost += n
	c.mu.Unlock()
}

// AddHits adds n prefix-cache hits to a cached block; it reports whether
// the block is cached.
func (c *Cache) AddHits(k Key, n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.blocks[k]
	if ok {
		b.Hits += n
		c.stats.Hits += int64(n)
	}
	return ok
}

// Len returns the number of cached blocks.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.blocks)
}

// Block returns a copy of a cached block.
func (c *Cache) Block(k Key) (Block, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	b, ok := c.blocks[k]
	if !ok {
		return Block{}, false
	}
	return copyBlock(b), true
}

func copyBlock(b *Block) Block {
	out := *b
	out.Tokens = slices.Clone(b.Tokens)
	out.Media = slices.Clone(b.Media)
	return out
}

// Keys returns the cached blocks' keys, sorted.
func (c *Cache) Keys() []Key {
	c.mu.RLock()
	keys := make([]Key, 0, len(c.blocks))
	for k := range c.blocks {
		keys = append(keys, k)
	}
	c.mu.RUnlock()
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	return keys
}

func keyLess(a, b Key) bool {
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if a.Hash.IsBytes() != b.Hash.IsBytes() {
		return !a.Hash.IsBytes()
	}
	if x, ok := a.Hash.Uint64(); ok {
		y, _ := b.Hash.Uint64()
		return x < y
	}
	return strings.Compare(string(a.Hash.Bytes()), string(b.Hash.Bytes())) < 0
}

// Stats returns the cache's figures.
func (c *Cache) Stats() Stats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := c.stats
	s.Blocks = len(c.blocks)
	for _, b := range c.blocks {
		if c.isRoot(b) {
			s.Roots++
		}
	}
	return s
}

func (c *Cache) isRoot(b *Block) bool {
	if b.Parent.IsZero() {
		return true
	}
	_, ok := c.blocks[Key{Group: b.Group, Hash: b.Parent}]
	return !ok
}

// Evictions returns the kept evictions, oldest first.
func (c *Cache) Evictions() []Eviction {
	out, _ := c.EvictionsSince(0)
	return out
}

// EvictionsSince returns the kept evictions numbered n and later (the
// first ever recorded is 0), oldest first, and the number to ask for next
// time; a view polls it to mark evictions as they happen.
func (c *Cache) EvictionsSince(n int64) ([]Eviction, int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	oldest := c.evCount - int64(len(c.ev))
	if n < oldest {
		n = oldest
	}
	var out []Eviction
	for i := n; i < c.evCount; i++ {
		out = append(out, c.ev[(c.evStart+int(i-oldest))%len(c.ev)])
	}
	return out, c.evCount
}
