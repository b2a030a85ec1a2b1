package cli

import (
	"flag"
)

// cacheFlagSet holds the K/V cache flags of a command.
type cacheFlagSet struct {
	blockSize *int
	k, v      *string
	ctx       *int
}

func addCacheFlags(fs *flag.FlagSet) cacheFlagSet {
	return cacheFlagSet{
		blockSize: fs.Int("block-size", 16, "K/V cache block size in tokens (1..256)"),
		k:         fs.String("cache-k", "f16", "K cache precision: f32, f16, bf16, q8_0, int8, int4, fp8"),
		v:         fs.String("cache-v", "f16", "V cache precision: f32, f16, bf16, q8_0, int8, int4, fp8"),
		ctx:       fs.Int("c", 0, "context length in tokens (0: the model's)"),
	}
}

func (c cacheFlagSet) get() cacheFlags {
	return cacheFlags{blockSize: *c.blockSize, k: *c.k, v: *c.v, ctx: *c.ctx}
}
