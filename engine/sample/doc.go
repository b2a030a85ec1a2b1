// Package sample provides token samplers over a logits vector: greedy,
// repetition/frequency/presence penalties, top-k, top-p, min-p and
// temperature, applied in llama.cpp's default order with a seeded,
// per-sampler random source.
//
// We write this rather than use a library because no Go library does
// llama.cpp-compatible sampling, and the whole job is a few hundred lines
// that must not allocate per token on 150k-entry vocabularies.
//
// # Order of the stages
//
// llama.cpp's common/common.h (common_params_sampling.samplers) lists the
// default chain as penalties → DRY → top-n-σ → top-k → typical-p → top-p →
// min-p → XTC → temperature, followed by a draw from the distribution. DRY,
// top-n-σ, typical-p and XTC are off by default there and are not
// implemented here, so a Sampler runs:
//
//  1. penalties (repeat, then frequency and presence) over the last
//     RepeatLastN tokens of the history;
//  2. top-k;
//  3. top-p, on the softmax of the surviving logits at temperature 1;
//  4. min-p, relative to the most probable surviving token;
//  5. temperature;
//  6. a draw from the resulting distribution.
//
// Because top-p and min-p run before temperature, as in llama.cpp, the
// temperature changes how the kept tokens are weighted but not which tokens
// are kept. A temperature of zero or less selects the arg-max after the
// penalties (the filters never remove the arg-max), which is what llama.cpp
// does too.
//
// SampleAllowed runs the same chain over the tokens of a mask (a grammar's,
// from package constrain): the others count as -Inf from the start.
//
// The defaults (DefaultParams) are llama.cpp's: temperature 0.8, top-k 40,
// top-p 0.95, min-p 0.05, repeat penalty 1.0 (off) over the last 64 tokens.
package sample
