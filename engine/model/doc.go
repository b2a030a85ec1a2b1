// Package model provides the Llama family's forward pass (llama, including
// Llama 3's rope_freqs and tied output; qwen2; qwen3 with its per-head q/k
// norms; phi3 with its fused q/k/v and gate/up matrices, cut into the
// layer's matrices at load without a copy) over
// a batch of tokens from several sequences, with weights bound from a GGUF
// file by name and K/V kept in paged blocks.
//
// A forward call takes rows of (token, position, block table, wants logits).
// For each layer it normalises, projects Q, K and V for every row, rotates Q
// and K (RoPE), writes each row's K and V into its sequence's block at
// position/BlockSize, slot position%BlockSize, then lets every row attend to
// positions 0..position of its own sequence through its block table. It
// returns logits only for the rows that ask for them.
//
// Forward (forward.go) is written once, step by step, against the
// engine/backend interface; the backend does the arithmetic and owns the
// memory: the weights (bound on first use, or by Use), the K/V pool
// (NewCache) and the activations. The model runs on backend.Go, the pure Go
// reference, unless Use moves it. Its activation buffers live in a run state
// (llama2.c's RunState) that Forward reuses from call to call and grows when
// a batch is larger than any before, so a step of a size already seen
// allocates only the logits it returns.
//
// Every row's arithmetic runs in an order that depends only on that row, its
// sequence's cache and the weights, never on the other rows of the batch:
// the result of a row is bit-identical whether it runs alone or batched.
// Attention scores over all positions are gathered before the softmax, so
// the sums also run in the same order whatever the block size.
//
// Weights are bound to the structs in weights.go by struct tags naming GGUF
// tensors (as Ollama's Go models do), so the model code itself stays short.
// A second tag gives each tensor's shape in the configuration's sizes, and
// bind checks it before it dequantizes a vector or keeps a matrix; the
// layers are made only after block_count is checked against the number of
// tensors in the file, so a hostile file costs memory in proportion to its
// size, never to a count it states.
package model
