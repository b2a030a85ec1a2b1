// Package synth makes Llama models with random weights, as GGUF bytes, for
// the app's demo model and for benchmarks.
//
// Generate writes a complete file in memory: the llama.* metadata
// model.ReadConfig reads, an SPM vocabulary in the tokenizer.ggml.* keys
// tokenizer.FromGGUF reads, and every tensor, with random matrices quantized
// to the Shape's type and norm weights of 1. The same shape and seed give
// the same bytes. Demo is the app's built-in model; Presets holds the
// shapes of real models (TinyLlama 1.1B, Llama 3.2 1B, Qwen 2.5 0.5B) that
// kvscope gen-model writes and llama.cpp loads too, for benchmarks side by
// side. A Shape also chooses the qwen2 architecture (Q/K/V biases), a tied
// output, Llama 3's RoPE factors and llama-quantize's Q4_K_M/Q5_K_M mixes.
//
// The SPM vocabulary is <unk>, <s>, </s>, the 256 byte tokens, single
// characters, then ▁-prefixed pieces: about a thousand common English words
// with all their prefixes, then derived and made-up words to fill the size.
// Any text tokenizes (byte tokens catch what the pieces do not), common words
// become one token each, and sampled output decodes to word-like text.
// The byte-level BPE vocabulary (Shape.Pre) has the same words as merges
// over GPT-2's 256 byte tokens, and ends with 256 control tokens.
//
// Why our own: the ways to get a test model (converting a trained model with
// llama.cpp's Python tools, downloading one) need files or tools the app and
// its tests cannot count on; a random model of any shape takes a few
// hundred lines and a fraction of a second.
package synth
