// Package remote provides kvscope's Remote tab: vLLM instances' prefix
// caches drawn live from their KV-cache events and metrics, and a remote
// `kvscope serve`'s cache shown on a second inspector.
//
// The vLLM side subscribes to each instance's ZeroMQ publisher (package
// vllm/kvsub, replaying from sequence 0 and filling gaps), models its
// prefix cache (vllm/prefixcache) and scrapes its /metrics (vllm/metrics).
// Per instance a row gives the cached blocks, the chains, the churn and
// the prefix-hit rate, with one total over all; the chosen instance's
// cache is drawn by TreeView as a forest of block-hash chains (LayoutTree,
// RenderTree: pure functions the tests check), evictions marked as they
// happen, and a selected chain's token ids decoded through the tokenizer
// the user opens: a GGUF or the served model's tokenizer.json. The
// metrics are charted beside it.
//
// The kvscope side (Client, Feed) polls GET /v1/kvcache/snapshot and
// follows GET /v1/kvcache/events, with the server's API key, decoding
// them into engine.Snapshot and engine.Event, and feeds an
// app/inspector.Inspector of its own through its public API, as the app's
// live loop feeds the local one: heatmap, gauges, history and event log
// work as they do locally.
//
// Widgets are touched only on the UI goroutine; background goroutines
// hand their results over through app/uithread (fyne.Do). Close stops
// every goroutine the view started.
package remote
