// Package backend provides the seam between the model and the hardware it
// computes on: the Backend interface, whose operations are the steps of a
// Llama-family forward pass, and Go, the pure Go implementation that is
// every other backend's reference and the fallback when none loads.
//
// It exists so that the forward pass is written once (engine/model) while
// the arithmetic can run elsewhere: a native library loaded at run time
// (engine/backend/native) implements the same interface over raw pointers.
// As in ggml's backends and Ollama's ml.Backend, a backend owns the memory it
// computes on: weight handles (uploaded once where it has its own memory;
// the Go backend reads the mapped file in place), the paged K/V pool (a
// Cache, which the cache manager moves blocks of through kvcache.Storage),
// and activation buffers, which stay on the backend between operations.
// Per step only token ids, positions, cache slots and block tables go in,
// as int32 slices, and logits come out (Read).
//
// Operations are eager and return no error: the model checks every batch
// before calling them, and a backend reports a failure inside it (a kernel,
// device memory) from the next Read or Sync. Handles of one backend must not
// be passed to another.
//
// # The Go backend
//
// Go's arithmetic is the engine's: quant.MatMul for weights, f32 RMSNorm
// and softmax with float64 sums as in ggml, RoPE angles stepped in float32,
// and attention whose sums run in position order whatever the block size.
// Every row's result depends only on that row, its sequence's cache and the
// weights, never on the other rows of the step, so a sequence's output is
// bit-identical alone or batched.
//
// Its paged attention decodes each K/V block once per call for all the rows
// of a sequence (a prefill chunk), into a buffer laid out as the blocks,
// then lets every row read it; a sequence with one row (a decode) streams
// through its blocks with one block of scratch. Either way a row sees the
// same values in the same order, so the choice never changes a bit.
package backend
