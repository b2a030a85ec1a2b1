//go:build !race

package tokenizer

// scalingN is the input size of the scaling tests: large enough that a
// split takes a millisecond or more, well above timer noise, and small
// enough that the work on 2n bytes still fits in the processor's caches
// (at 128 KiB and more, time per byte grows by a third per doubling even
// for a linear scan).
const scalingN = 1 << 15
