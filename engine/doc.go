// Package engine is kvscope's public Go API: it runs many chats at once on
// one model and one paged KV cache, streams their tokens, and publishes
// snapshots and events of the cache for the UI.
//
// One goroutine owns all mutable state: the scheduler (package sched), the
// cache manager (package kvcache), the K/V tensors (package kvstore) and the
// model. Everything else talks to it through methods that queue commands:
// Submit, cancellation through the request's context, Reconfigure, Pause,
// Step and Resume. After each step the engine publishes an immutable
// Snapshot through an atomic pointer and appends events to a bounded log
// that readers poll with their own cursor, so drawing never stalls
// generation. A reader that must see every step (a lesson checking what it
// promised) subscribes instead (Subscribe, WaitFor): while anyone does,
// a snapshot follows every step. Each event has a typed Kind and its line
// written once, by the engine (DescribeCacheEvent for the cache's).
//
// Slow motion (SetDelay) holds each step to the delay however many
// requests wake the engine meanwhile, and DecodeTPS counts tokens over the
// last RateWindow of wall time, so it follows slow motion and falls to zero
// when nothing runs. Capacity says how many sequences of a length a pool
// holds; NewPool is the one constructor of a pool.
//
// Each step is one batch (iteration-level scheduling): every running
// sequence's next decode token, then prompt chunks under a per-step token
// budget. The model's kernels are batch-invariant, so a request's output
// does not depend on which other requests share its steps.
package engine
