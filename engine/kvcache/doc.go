// Package kvcache manages the paged KV cache's blocks: the pool (free queue,
// reference counts, prefix hashes, eviction), per-sequence block tables,
// forks with copy on write, preemption by recompute or swap, context
// overflow, and the metrics, snapshots and events that describe it.
//
// It holds no tensors. The K/V bytes live in a Storage (kvstore.Store),
// which the manager asks to copy, save, load and reset whole blocks. No
// library does this bookkeeping for Go; the design follows vLLM v1: a block
// pool (the unexported pool: free blocks, hash → cached block, reference
// counts, eviction order) kept apart from the Manager (block tables,
// allocation, prefix matching, copy on write, preemption).
//
// One owner drives the Manager, on one goroutine (the engine's): the
// scheduler (engine/sched). It makes the decisions (admission with
// CachedPrefix, FreeBlocks and Allocate; a step's slots with Append;
// preemption and swapping with Preempt and SwapIn; the end of a sequence
// with Free), and every other change goes through it too: Commit after the
// K/V are written, Fork for parallel samples, Tick once per step and the
// eviction policy (SetEviction), which the engine asks the scheduler for
// (sched's manage.go). The engine only reads the Manager (Snapshot,
// Metrics, Events, block tables). A reconfiguration that changes the pool
// replaces the Manager: the engine drains the scheduler's sequences, builds
// a new Manager and hands it to the scheduler (sched.SetManager), which
// requeues them to recompute.
//
// # Blocks span all layers
//
// A block id names the same slot in every layer, as in vLLM: one block
// table per sequence serves all layers, a prefix-cache hit reuses a token
// range for the whole model at once, and the pool accounts per block rather
// than per layer. Blocks per layer would only pay off for layers that keep
// different token ranges (sliding-window layers), at the cost of one table
// and one hash chain per layer; Llama-family models do not need that.
//
// So the cache keeps every block of a sequence even for a model with
// sliding-window layers (gemma3): those layers attend only to the last W
// positions, but a block spans all layers, and the global layers still
// read the whole history, so no block can be freed while its sequence
// lives. The windowed layers' slots of old blocks are simply not read
// (the window is applied in attention, engine/model); the inspector marks
// which blocks of a sequence still fall in its window.
//
// # The engine's contract
//
// A token's RoPE position is its index in Manager.Tokens, always.
//
//   - Allocate(seq, prompt) gives a new sequence slots for its whole prompt
//     and reports Computed: the engine computes Tokens()[Computed:] at
//     positions Computed…, writing K/V into the slots BlockTable names
//     (token i lives in block table[i/BlockSize], slot i%BlockSize).
//   - Append(seq, tokens) gives slots to the tokens of this step (the token
//     just sampled) and reports Start: the engine computes Tokens()[Start:].
//     Start is the old length unless an overflow policy acted.
//   - Commit(seq, n) after the forward pass says the first n tokens' K/V
//     are written; only then do full blocks enter the prefix cache, so a
//     request can never reuse a block whose K/V are not there yet.
//   - Chunked prefill: Allocate the whole prompt once, then compute it a
//     chunk per step, calling Commit(seq, computedSoFar) after each.
//   - Tick() once per engine step; Free(seq) when a sequence ends.
//     CachedPrefix and FreeBlocks let a scheduler check admission (with its
//     watermark) before calling Allocate.
//
// Every method either does all of its work or, on error, changes nothing.
// A *NoSpaceError (errors.Is(err, ErrNoSpace)) means the pool is full: the
// caller chooses a victim and calls Preempt, then retries.
//
// # Prefix caching
//
// A full block is identified by HashBlock(parent's hash, its token ids), so
// a hash names a whole prefix. Allocate reuses every cached block of the
// prompt's prefix, except that the block holding the last prompt token is
// always computed (the model needs that token's logits), as vLLM does.
// Blocks stay cached after their sequences end, until evicted. Queries and
// hits are counted in tokens. Cached blocks keep their parent hash and
// token ids, which each hit compares, so even a hash collision cannot make
// a wrong reuse.
//
// # Eviction
//
// When no block is free, an allocation evicts a cached block nobody
// references, chosen by the run-time policy: LRU (default; blocks released
// in the same step go tail first, so a shared prefix's head lives longest),
// LFU (fewest prefix hits first, then LRU) or FIFO (first cached first).
//
// # Forks and copy on write
//
// Fork makes a child share all of its parent's blocks (n > 1 samples,
// regenerate). The first Append into a shared, partly filled block copies it
// (Storage.Copy) for the appending sequence; full blocks are never written
// again, so they are never copied.
//
// # Preemption
//
// Preempt(seq, Recompute) frees the blocks and returns the tokens for the
// caller to requeue; its cached full blocks often make the recomputation
// short. Preempt(seq, Swap) saves the blocks' bytes (Storage.Save) in a host
// pool bounded by Config.HostBudget and frees the device blocks; SwapIn loads
// them back (Storage.Load), reusing blocks whose hash is still cached. When
// the host pool is full, Swap falls back to Recompute and the result and an
// event say so. Recompute reproduces a sequence's K/V exactly, except after
// a rolling-window shift (its kept K/V depend on tokens it no longer holds):
// such a sequence recomputes as its shortened text; swap keeps it exact.
//
// # Context overflow
//
// Each sequence has a context limit and a policy for reaching it: Stop
// (a *ContextLimitError), RollingWindow (StreamingLLM: keep the sink blocks
// holding the first Sinks tokens and the most recent blocks; the engine
// re-rotates the kept keys, see Overflow) or TruncateMiddle (keep the head
// and the most recent half of the limit, recompute after the head). The
// Overflow report says exactly what the engine must do.
//
// # Contiguous mode
//
// Allocator Contiguous reserves each sequence's maximum length up front as
// one run of adjacent blocks (first fit), as systems did before
// PagedAttention, with no prefix sharing and forks that copy. It exists to
// compare: Metrics reports its internal fragmentation (reserved slots
// holding no token) and external fragmentation (free blocks outside the
// longest free run; UnservableBlocks says what the next request cannot use).
// ReplayWorkload and WasteTable replay ShareGPT-like and Alpaca-like
// workloads in both modes for `kvscope bench cache`.
//
// # Observing
//
// Metrics is cheap (O(1) in paged mode). Snapshot copies every block's and
// sequence's bookkeeping into an immutable value any goroutine may read.
// Events go to a bounded ring (EventLog): the manager never waits for a
// reader; a slow reader learns how many events it missed. Check verifies
// every invariant, for tests.
//
// The Manager itself is not safe for concurrent use: one goroutine (the
// engine's) owns it.
package kvcache
