/* common.cuh: what the CUDA library's files share: the stream, the sticky
 * device error, launch checks, half conversions and warp sums.
 *
 * The sources build two ways: with nvcc for a GPU (make cuda), and with
 * g++ on ROCm's HIP-CPU runtime (make cuda-emu; KVS_HIPCPU), whose
 * kernels run on the CPU for the tests (hipcpu.h). Kernels are launched
 * with KVS_LAUNCH and take dynamic shared memory with KVS_DYNAMIC_SHARED,
 * which are CUDA's own syntax under nvcc. */
#ifndef KVS_CUDA_COMMON_CUH
#define KVS_CUDA_COMMON_CUH

#ifdef KVS_HIPCPU
#include "hipcpu.h"
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* KVS_LAUNCH(grid, block, smem, stream, kernel)(args...) is
 * kernel<<<grid, block, smem, stream>>>(args...); the kernel comes last so
 * that a template's commas need no parentheses. */
#define KVS_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
/* KVS_DYNAMIC_SHARED(type, name) declares the block's dynamic shared memory. */
#define KVS_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
#include <stdint.h>

#include "../include/kvscope.h"

#define KVS_WARP 32
#ifdef KVS_HIPCPU
static_assert(KVS_WARP == kvs_emu::warp_size, "the emulation's warps are CUDA's 32 lanes");
#endif

/* kvs_stream returns the library's one stream (created on first use). */
cudaStream_t kvs_stream(void);

/* kvs_record keeps the first device failure (what, and CUDA's message) for
 * kvs_synchronize and kvs_last_error; it returns KVS_ERR_DEVICE. */
int kvs_record(const char *what, cudaError_t err);

/* kvs_launched checks the launch just queued: KVS_OK, or the failure
 * recorded. */
int kvs_launched(const char *what);

/* kvs_set_error sets kvs_last_error's message without a device failure. */
void kvs_set_error(const char *msg);

/* kvs_max_smem returns the dynamic shared memory a kernel may opt in to
 * (attention.cu). */
int kvs_max_smem(void);

/* Blocks of the weight types (ggml's layouts). */
struct __align__(2) blk_q4_0 {
	uint16_t d;
	uint8_t qs[16];
};
struct __align__(2) blk_q8_0 {
	uint16_t d;
	int8_t qs[32];
};
struct __align__(2) blk_q4_k {
	uint16_t d, dmin;
	uint8_t scales[12];
	uint8_t qs[128];
};
struct __align__(2) blk_q6_k {
	uint8_t ql[128];
	uint8_t qh[64];
	int8_t scales[16];
	uint16_t d;
};

/* Weight type numbers (kvscope.h). */
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14 };

/* act_blk: one 32-value block of an activation vector rounded to 8 bits
 * (this library's kvs_quantize_acts layout): scale, code sum, codes. */
struct __align__(4) act_blk {
	float d;
	int32_t s;
	int8_t q[32];
};

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* f16_finite rounds to a finite half, saturating at ±65504, NaN as 0
 * (engine/kvstore's rounding of scales). */
__device__ __forceinline__ uint16_t f16_finite(float x) {
	if (x != x) return 0;
	x = fminf(fmaxf(x, -65504.0f), 65504.0f);
	return f2h(x);
}

/* warp_sum adds v over the warp in a fixed butterfly order: every lane gets
 * the same bits, whatever else runs. The emulation (hipcpu.h) does the same
 * butterfly in one exchange of the lanes' values, not five. */
__device__ __forceinline__ float warp_sum(float v) {
#ifdef KVS_HIPCPU
	return kvs_emu::warp_butterfly(v, [](float a, float b) { return a + b; });
#else
#pragma unroll
	for (int m = KVS_WARP / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
#endif
}

__device__ __forceinline__ float warp_max(float v) {
#ifdef KVS_HIPCPU
	return kvs_emu::warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
#else
#pragma unroll
	for (int m = KVS_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
	return v;
#endif
}

__device__ __forceinline__ float warp_min(float v) {
#ifdef KVS_HIPCPU
	return kvs_emu::warp_butterfly(v, [](float a, float b) { return fminf(a, b); });
#else
#pragma unroll
	for (int m = KVS_WARP / 2; m > 0; m >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, m));
	return v;
#endif
}

/* load_int reads 4 bytes at a 2-byte aligned address (ggml's blocks are). */
__device__ __forceinline__ int load_int(const void *p) {
	const uint16_t *h = (const uint16_t *)p;
	return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
}

/* grid_1d returns the blocks of `threads` covering n items, capped for a
 * grid-stride loop. */
static inline unsigned grid_1d(int64_t n, int threads) {
	int64_t b = (n + threads - 1) / threads;
	if (b > 65535 * 16) b = 65535 * 16;
	return (unsigned)(b < 1 ? 1 : b);
}

#define KVS_EXPORT extern "C" KVS_API

#endif
