package engine

import (
	"fmt"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/sched"
)

// CacheConfig is the KV cache's settings: everything the UI's sliders and
// the command line's cache flags change.
type CacheConfig struct {
	BlockSize  int                    // tokens per block, 1 to 256
	Budget     int64                  // bytes for K/V blocks; 0: enough for MaxSeqs full contexts (capped at AutoBudgetCap)
	HostBudget int64                  // bytes of the host swap pool; 0: the same as the device budget
	K, V       kvstore.Precision      // K and V precision
	Eviction   kvcache.EvictionPolicy // LRU, LFU or FIFO
	Preempt    kvcache.PreemptMode    // recompute or swap
	Allocator  kvcache.Allocator      // paged or contiguous
	Overflow   kvcache.OverflowPolicy // what a sequence does at its context limit
}

// SchedConfig is the scheduler's settings.
type SchedConfig struct {
	MaxSeqs    int          // most sequences running at once
	StepTokens int          // most tokens one step computes
	Policy     sched.Policy // fcfs or priority
	Watermark  float64      // share of blocks admission leaves free, 0 to 1
}

// Config configures an Engine.
type Config struct {
	Cache CacheConfig
	Sched SchedConfig
	// Context is the longest a sequence may grow, in tokens; 0: the model's
	// training context.
	Context int
	// SnapshotEvery is the fewest steps between published snapshots while
	// generating (1: every step). Pausing and single steps always publish.
	SnapshotEvery int
}

// AutoBudgetCap bounds the automatic cache budget.
const AutoBudgetCap = 2 << 30

// MaxBlocks bounds the pool: every step's snapshot describes each block,
// and the inspector draws each one, so a pool of millions of one-token
// blocks would slow everything down for nothing. An automatic budget is cut
// to it; an explicit one that exceeds it is refused.
const MaxBlocks = 1 << 16

// DefaultConfig returns the defaults: f16 K/V in 16-token blocks, LRU
// eviction, recompute preemption, the paged allocator, stop at the context
// limit, 8 concurrent sequences, 512 tokens a step.
func DefaultConfig() Config {
	return Config{
		Cache: CacheConfig{BlockSize: 16, K: kvstore.F16, V: kvstore.F16, Eviction: kvcache.LRU, Preempt: kvcache.Recompute, Allocator: kvcache.Paged, Overflow: kvcache.Stop},
		Sched: SchedConfig{MaxSeqs: 8, StepTokens: 512, Policy: sched.FCFS, Watermark: 0.01},
	}
}

// PoolConfig returns the K/V store configuration for model m under cache
// settings c: its shape, and the number of blocks the budget buys after
// reserving, for each of maxSeqs sequences, the f16 residual that quantized
// keys keep. A zero budget means enough for maxSeqs sequences of ctx
// tokens (at most AutoBudgetCap). It also returns the budget in bytes.
func PoolConfig(m *model.Model, c CacheConfig, ctx, maxSeqs int) (kvstore.Config, int64, error) {
	sc := m.CacheConfig(c.BlockSize, 1, c.K, c.V)
	if err := sc.Validate(); err != nil {
		return sc, 0, err
	}
	bb := kvstore.BlockBytes(sc)
	budget := c.Budget
	residual := int64(maxSeqs) * int64(kvstore.ResidualBytes(sc))
	if budget == 0 {
		blocks := int64(maxSeqs) * int64((ctx+c.BlockSize-1)/c.BlockSize)
		budget = min(blocks*int64(bb)+residual, AutoBudgetCap)
	}
	avail := budget - residual
	n, err := kvcache.NumBlocksFor(avail, bb)
	if err != nil || n < 1 {
		return sc, 0, fmt.Errorf("a cache budget of %d bytes holds no block: one block of %d tokens takes %d bytes at K %s / V %s", budget, c.BlockSize, bb, c.K, c.V)
	}
	if n > MaxBlocks {
		if c.Budget != 0 {
			return sc, 0, fmt.Errorf("a cache budget of %d bytes makes %d blocks of %d tokens; kvscope manages at most %d blocks (choose a larger block size or a smaller budget)", budget, n, c.BlockSize, MaxBlocks)
		}
		n = MaxBlocks
		budget = int64(n)*int64(bb) + residual
	}
	sc.Blocks = n
	return sc, budget, nil
}

func (e *Engine) storeConfig(c CacheConfig, ctx, maxSeqs int) (kvstore.Config, int64, error) {
	return PoolConfig(e.model, c, ctx, maxSeqs)
}

// validate checks a whole configuration against the model.
func (e *Engine) validate(c Config) error {
	if c.Context < 0 || c.Context > e.model.Context {
		return fmt.Errorf("context %d is outside 1..%d, the model's training context", c.Context, e.model.Context)
	}
	if c.Cache.Budget < 0 || c.Cache.HostBudget < 0 {
		return fmt.Errorf("cache budgets cannot be negative")
	}
	if c.Cache.Eviction > kvcache.FIFO {
		return fmt.Errorf("unknown eviction policy %d", c.Cache.Eviction)
	}
	if c.Cache.Allocator > kvcache.Contiguous {
		return fmt.Errorf("unknown allocator %d", c.Cache.Allocator)
	}
	if c.Cache.Overflow > kvcache.TruncateMiddle {
		return fmt.Errorf("unknown overflow policy %d", c.Cache.Overflow)
	}
	if c.Cache.BlockSize < 1 || c.Cache.BlockSize > kvcache.MaxBlockSize {
		return fmt.Errorf("a block size of %d tokens is outside 1..%d", c.Cache.BlockSize, kvcache.MaxBlockSize)
	}
	if err := kvcache.CheckLimit(e.context(c), c.Cache.Overflow, 0, c.Cache.BlockSize); err != nil {
		return fmt.Errorf("%s overflow with a context of %d tokens: %w", c.Cache.Overflow, e.context(c), err)
	}
	if err := c.schedConfig().Validate(); err != nil {
		return err
	}
	_, _, err := e.storeConfig(c.Cache, e.context(c), c.Sched.MaxSeqs)
	return err
}

func (c Config) schedConfig() sched.Config {
	return sched.Config{MaxSeqs: c.Sched.MaxSeqs, StepTokens: c.Sched.StepTokens, Policy: c.Sched.Policy, Preempt: c.Cache.Preempt, Watermark: c.Sched.Watermark}
}

// ContextFor is the context limit c gives sequences on model m: Context,
// or, when it is 0, the model's training context. It is the one place
// that reads "0 means the model's".
func (c Config) ContextFor(m *model.Model) int {
	if c.Context > 0 {
		return c.Context
	}
	return m.Context
}

// context is the sequence length limit in force.
func (e *Engine) context(c Config) int { return c.ContextFor(e.model) }
