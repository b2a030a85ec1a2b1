//go:build race

package tokenizer

// scalingN is smaller under the race detector, which slows every memory
// access about tenfold (the ratio of two sizes is what is tested).
const scalingN = 1 << 12
