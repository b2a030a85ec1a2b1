// Package native loads kvscope's native CPU compute library (native/, the
// C ABI in native/include/kvscope.h) at run time with purego, no cgo, and
// exposes its kernels as Go functions over slices.
//
// Load finds libkvscope_cpu.so (.dylib on macOS), checks its ABI version and
// returns a *Lib, or a clear error when the library is missing or does not
// match: the caller then runs the Go kernels (engine/quant and the Go
// backend) and says so. Every method checks the lengths of its slices
// against the shapes it is given before calling C, so that C never reads or
// writes out of bounds; a tensor type or K/V precision the library does not
// implement gives an error wrapping ErrUnsupported, so the caller can fall
// back for that tensor alone.
//
// The library computes each output in a fixed order that depends neither on
// the batch, nor on how rows are split among threads, nor on the SIMD
// path, so its results are batch-invariant and identical on every path
// (SetPath forces one, for tests). Quantized matrix products round the
// activations to 8 bits first (as llama.cpp does), so they differ from
// engine/quant's float32 products by about that rounding; the package tests
// state and check each kernel's bound.
//
// Threads: the library splits its large kernels (matrix products, the
// rounding of many activations, SwiGLU, addition, attention) between the
// calling thread and threads of its own, GOMAXPROCS in all (kvs_set_threads,
// which every call keeps in step with GOMAXPROCS). Goroutines calling into
// C did this before and were slower: with both of Go's Ps inside C calls,
// the runtime handed them to fresh threads that then took turns with the
// computing ones (native/cpu/pool.c and native/README.md have the figures).
// Q4_0, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights are multiplied from a
// packed copy made at load (Pack, MatMulPacked): Go copies the file's rows
// (so that a fault reading the mapping is an error) and the library packs
// them; the mapped pages are then given back. Products of the same
// activations by several packed matrices (a layer's query, key and value,
// its gate and up: Backend.MatMuls) go out as one call (MatMulPackedN),
// so that the small key and value products do not each pay a call's
// start and end.
//
// Device backends: OpenDevice loads a GPU library of the same ABI
// (libkvscope_cuda.so from native/cuda, libkvscope_metal.dylib from
// native/metal) and returns a Device, an engine/backend Backend that owns
// its memory: weights uploaded once, activation buffers and the K/V cache
// (device copies behind kvcache.Storage) on the device, only token ids,
// positions, block tables and logits crossing per step (device*.go).
// NewHostDevice runs the same code on the CPU library's host memory, which
// is how it is tested on machines without a GPU. Choose picks CUDA first.
package native
