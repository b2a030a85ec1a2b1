// Package prefixcache models a vLLM instance's prefix cache from its KV-cache
// events, as a forest of block-hash chains that a view can draw (shared
// prefixes as trunks, sized by block count), with evictions as they happen,
// hit counts where known, and totals across sources.
//
// Events carry no physical block ids, so a [Cache] holds what vLLM's events
// say: which block hashes are cached (per KV-cache group and medium), each
// one's parent, its token ids (kept so that a tokenizer can decode them
// later) and when it was stored. [Cache.Tree] snapshots the forest;
// [Cluster] keeps one Cache per source and sums them.
package prefixcache
