package engine

import (
	"fmt"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// Fit says what a pool holds under one set of cache settings.
type Fit struct {
	Blocks     int   // blocks in the pool
	BlockBytes int   // bytes a block takes, all layers, K and V
	Tokens     int   // token slots: Blocks × block size
	PerSeq     int   // blocks one sequence of the asked length takes
	Seqs       int   // sequences of that length that fit at once
	Budget     int64 // the budget in bytes (the automatic one worked out)
}

// Capacity works out how many sequences of seqLen tokens fit at once in the
// pool that cfg buys on model m: the pool's blocks (after the per-sequence
// residual quantized keys keep) over the blocks one sequence takes. The
// paged allocator gives a sequence ceil(seqLen / block size) blocks; the
// contiguous one reserves each sequence's whole context (cfg.Context, or
// the model's) up front, since it cannot know how long a reply will grow.
// The scheduler's limit (cfg.Sched.MaxSeqs) is not applied: Fit.Seqs is
// what the memory holds.
func Capacity(m *model.Model, cfg Config, seqLen int) (Fit, error) {
	ctx := cfg.ContextFor(m)
	if seqLen < 1 {
		return Fit{}, fmt.Errorf("a sequence of %d tokens is too short to place", seqLen)
	}
	seqLen = min(seqLen, ctx)
	sc, budget, err := PoolConfig(m, cfg.Cache, ctx, cfg.Sched.MaxSeqs)
	if err != nil {
		return Fit{}, err
	}
	bs := cfg.Cache.BlockSize
	reserve := seqLen
	if cfg.Cache.Allocator == kvcache.Contiguous {
		reserve = ctx
	}
	per := (reserve + bs - 1) / bs
	return Fit{Blocks: sc.Blocks, BlockBytes: kvstore.BlockBytes(sc), Tokens: sc.Blocks * bs, PerSeq: per, Seqs: sc.Blocks / per, Budget: budget}, nil
}
