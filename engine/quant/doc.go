// Package quant provides ggml's tensor types: their block layouts, and, in
// Go (with SSE2 and AVX assembly on amd64, which needs no C toolchain),
// dequantization to float32, quantization from float32, dot products of
// quantized rows with float32 activations, and a batched, parallel
// matrix-vector product.
//
// Supported types (see Supported): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_NL, with ggml's exact block
// layouts, so GGUF tensor bytes are used as they are. The entry points are:
//
//   - Dequantize decodes a run of blocks to float32.
//   - DotFunc returns the dot product of one quantized row with a float32
//     vector.
//   - MatMul multiplies a quantized matrix by one or more vectors on all
//     cores; each block of weights is dequantized once for all the vectors,
//     so a batch of nx vectors costs much less than nx calls. Its result
//     for a given (vector, row) is bit-identical to DotFunc's whatever the
//     batch, so batching never changes a sequence's output.
//   - Quantize encodes float32 values (reference encoders, for making test
//     models and data; the K-quant encoders are simpler than llama.cpp's).
//
// The dot products dequantize the weights to float32 and sum the products
// in float32 in a fixed order: four lanes, element j in lane j%4, then
// (lane0+lane1)+(lane2+lane3). That is the order of a four-wide SIMD
// multiply-add, so on amd64 assembly kernels (SSE2, which every amd64 has,
// and an AVX one used where CPUID reports AVX; the multiply-adds generated
// by macgen.go, the dequantizers of F16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K
// written by hand) compute exactly the bits of the portable Go code, which
// runs elsewhere (or with -tags noasm) and which the tests compare them
// with. The results differ from llama.cpp's (which rounds activations to 8
// bits) by less than the quantization error itself.
//
// We wrote this rather than binding ggml because the engine must run with
// no C toolchain; it is kvscope's reference for every weight format it
// reads, and its CPU fallback. The native C library (native/, loaded at
// run time by engine/backend/native, with no cgo) runs the forward pass's
// quantized products faster, and the model's tests compare its results
// with this package's.
package quant
