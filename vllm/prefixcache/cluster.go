package prefixcache

import (
	"sort"
	"sync"

	"kvscope/vllm/kvsub"
)

// Cluster keeps one Cache per source (a vLLM instance or data-parallel
// rank) and their total. Its methods are safe for concurrent use.
type Cluster struct {
	mu     sync.Mutex
	opts   Options
	caches map[string]*Cache
}

// NewCluster returns an empty Cluster whose caches use opts.
func NewCluster(opts Options) *Cluster {
	return &Cluster{opts: opts, caches: map[string]*Cache{}}
}

// Source returns the named source's Cache, creating it empty.
func (cl *Cluster) Source(name string) *Cache {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	c, ok := cl.caches[name]
	if !ok {
		c = New(cl.opts)
		cl.caches[name] = c
	}
	return c
}

// Sources returns the sources' names, sorted.
func (cl *Cluster) Sources() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	names := make([]string, 0, len(cl.caches))
	for n := range cl.caches {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Apply applies a subscriber's update to its source's Cache: a batch is
// applied, a reset forgets the source's blocks, lost batches are counted.
// Malformed messages and errors change nothing.
func (cl *Cluster) Apply(u kvsub.Update) {
	c := cl.Source(u.Source)
	switch u.Kind {
	case kvsub.KindBatch:
		c.Apply(u.Batch)
	case kvsub.KindReset:
		c.Reset()
	case kvsub.KindLost:
		c.MarkLost(u.To - u.From)
	}
}

// Total returns the sources' figures summed; Last is the latest. Distinct
// is the number of distinct block keys over all sources (a prefix cached
// on two instances counts once there and twice in Blocks).
func (cl *Cluster) Total() (total Stats, distinct int) {
	cl.mu.Lock()
	caches := make([]*Cache, 0, len(cl.caches))
	for _, c := range cl.caches {
		caches = append(caches, c)
	}
	cl.mu.Unlock()
	keys := map[Key]struct{}{}
	for _, c := range caches {
		s := c.Stats()
		total.Blocks += s.Blocks
		total.Tokens += s.Tokens
		total.Roots += s.Roots
		total.Stored += s.Stored
		total.Removed += s.Removed
		total.UnknownRemove += s.UnknownRemove
		total.Clears += s.Clears
		total.Resets += s.Resets
		total.Lost += s.Lost
		total.Batches += s.Batches
		total.Hits += s.Hits
		if s.Last.After(total.Last) {
			total.Last = s.Last
		}
		c.mu.RLock()
		for k := range c.blocks {
			keys[k] = struct{}{}
		}
		c.mu.RUnlock()
	}
	return total, len(keys)
}
