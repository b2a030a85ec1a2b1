package cli

import (
	"flag"
	"fmt"
	"strings"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
)

// cacheFlagSet holds the K/V cache flags shared by run and perplexity.
type cacheFlagSet struct {
	blockSize                         *int
	budget, k, v                      *string
	allocator, eviction, preempt, ovf *string
	ctx                               *int
}

func addCacheFlags(fs *flag.FlagSet) cacheFlagSet {
	return cacheFlagSet{
		blockSize: fs.Int("block-size", 16, "K/V cache block size in tokens (1..256)"),
		budget:    fs.String("cache-budget", "auto", "K/V cache memory, with units (e.g. 64MiB), or auto"),
		k:         fs.String("cache-k", "f16", "K cache precision: "+precisionNames()),
		v:         fs.String("cache-v", "f16", "V cache precision: "+precisionNames()),
		allocator: fs.String("allocator", "paged", "cache allocator: paged or contiguous"),
		eviction:  fs.String("eviction", "lru", "eviction policy for cached blocks: lru, lfu or fifo"),
		preempt:   fs.String("preempt", "recompute", "preemption mode when the cache is full: recompute or swap"),
		ovf:       fs.String("overflow", "stop", "at the context limit: stop, rolling or truncate"),
		ctx:       fs.Int("c", 0, "context length in tokens (0: the model's)"),
	}
}

func precisionNames() string {
	var names []string
	for _, p := range kvstore.Precisions() {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// config turns the flags into an engine configuration.
func (c cacheFlagSet) config() (engine.Config, error) {
	cfg := engine.DefaultConfig()
	cc := &cfg.Cache
	cc.BlockSize = *c.blockSize
	if *c.budget != "auto" && *c.budget != "" {
		b, err := humanize.ParseBytes(*c.budget)
		if err != nil {
			return cfg, fmt.Errorf("--cache-budget %q: %v (write e.g. 512MiB, 2GB or auto)", *c.budget, err)
		}
		if b == 0 {
			return cfg, fmt.Errorf("--cache-budget must be more than 0 bytes (or auto)")
		}
		cc.Budget = int64(b)
	}
	var err error
	if cc.K, err = kvstore.ParsePrecision(*c.k); err != nil {
		return cfg, fmt.Errorf("--cache-k: %w", err)
	}
	if cc.V, err = kvstore.ParsePrecision(*c.v); err != nil {
		return cfg, fmt.Errorf("--cache-v: %w", err)
	}
	if cc.Allocator, err = kvcache.ParseAllocator(*c.allocator); err != nil {
		return cfg, fmt.Errorf("--allocator: %w", err)
	}
	if cc.Eviction, err = kvcache.ParseEvictionPolicy(*c.eviction); err != nil {
		return cfg, fmt.Errorf("--eviction: %w", err)
	}
	if cc.Preempt, err = kvcache.ParsePreemptMode(*c.preempt); err != nil {
		return cfg, fmt.Errorf("--preempt: %w", err)
	}
	if cc.Overflow, err = kvcache.ParseOverflowPolicy(*c.ovf); err != nil {
		return cfg, fmt.Errorf("--overflow: %w", err)
	}
	if cc.BlockSize < 1 || cc.BlockSize > kvstore.MaxBlockSize {
		return cfg, fmt.Errorf("--block-size %d: the block size must be 1 to %d tokens", cc.BlockSize, kvstore.MaxBlockSize)
	}
	cfg.Context = *c.ctx
	return cfg, nil
}
