/* matmul.cu: quantized GEMV and GEMM, activation rounding and embedding
 * rows, for F32, F16, Q4_0, Q8_0, Q4_K and Q6_K weights in ggml's block
 * layout (the bytes of the GGUF file, uploaded as they are).
 *
 * Quantized types multiply by activations rounded to 8 bits in blocks of 32
 * (scale max|x|/127, codes rounded to even, and the block's code sum), as
 * llama.cpp's mmvq does with q8_1: each (weight block, activation block)
 * pair is one exact integer dot product (__dp4a for Q4_0 and Q8_0) times
 * the two scales. One warp computes one output row: lane l takes the
 * 32-element blocks l, l+32, l+64, ... of the row in order, the lanes' sums
 * are added by a fixed butterfly, so a (row, vector) result does not depend
 * on the other vectors or rows. The GEMV kernel keeps up to 8 vectors in
 * registers and reads each weight block once for all of them; the GEMM
 * kernel (more than 8 vectors: prefill) keeps 32, so the weights stream
 * from memory once per 32 vectors. Both give the same bits per vector. */
#include "common.cuh"

/* block_elems and block_bytes of the types this library multiplies. */
static int64_t block_elems(uint32_t t) { return t == T_Q4_K || t == T_Q6_K ? 256 : t == T_Q4_0 || t == T_Q8_0 ? 32 : 1; }

static int64_t block_bytes(uint32_t t) {
	switch (t) {
	case T_F32: return 4;
	case T_F16: return 2;
	case T_Q4_0: return sizeof(blk_q4_0);
	case T_Q8_0: return sizeof(blk_q8_0);
	case T_Q4_K: return sizeof(blk_q4_k);
	case T_Q6_K: return sizeof(blk_q6_k);
	}
	return 0;
}

static bool quantized(uint32_t t) { return t != T_F32 && t != T_F16; }

KVS_EXPORT int64_t kvs_row_bytes(uint32_t type, int64_t cols) {
	int64_t be = block_elems(type), bb = block_bytes(type);
	if (bb == 0 || cols <= 0 || cols % be) return 0;
	if (quantized(type) && cols % 32) return 0;
	return cols / be * bb;
}

KVS_EXPORT int64_t kvs_act_bytes(uint32_t type, int64_t cols, int64_t n) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	if (cols <= 0 || n < 0 || kvs_row_bytes(type, cols) == 0) return KVS_ERR_ARG;
	return quantized(type) ? n * (cols / 32) * (int64_t)sizeof(act_blk) : 0;
}

/* quantize_kernel: one warp per 32-value block, lane j holding value j. */
__global__ void quantize_kernel(const float *__restrict__ x, int64_t blocks, act_blk *__restrict__ qx) {
	int lane = threadIdx.x % KVS_WARP;
	for (int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / KVS_WARP; b < blocks;
	     b += (int64_t)gridDim.x * blockDim.x / KVS_WARP) {
		float v = x[b * 32 + lane];
		float amax = warp_max(fabsf(v));
		float d = amax / 127;
		int q = d == 0 ? 0 : __float2int_rn(v / d);
		q = max(-127, min(127, q));
		int s = __reduce_add_sync(0xffffffffu, q);
		qx[b].q[lane] = (int8_t)q;
		if (lane == 0) qx[b].d = d, qx[b].s = s;
	}
}

KVS_EXPORT int kvs_quantize_acts(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx) {
	int64_t ab = kvs_act_bytes(type, cols, n);
	if (ab < 0) return (int)ab;
	if (ab == 0 || n == 0) return KVS_OK;
	if (!x || !qx) return KVS_ERR_ARG;
	int64_t blocks = n * (cols / 32);
	KVS_LAUNCH(grid_1d(blocks * 32, 256), 256, 0, kvs_stream(), quantize_kernel)(x, blocks, (act_blk *)qx);
	return kvs_launched("quantize activations");
}

/* ---------------------------------------------------- block dot products */

/* dot_q4_0 returns the exact integer dot of a Q4_0 block with an activation
 * block (codes offset to signed: q-8), times the two scales. */
__device__ __forceinline__ float dot_q4_0(const blk_q4_0 *w, const act_blk *a) {
	int sum = 0;
	const int *aq = (const int *)a->q;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		int v = load_int(w->qs + 4 * k);
		sum = __dp4a(v & 0x0f0f0f0f, aq[k], sum);
		sum = __dp4a((v >> 4) & 0x0f0f0f0f, aq[k + 4], sum);
	}
	return (float)(sum - 8 * a->s) * (h2f(w->d) * a->d);
}

__device__ __forceinline__ float dot_q8_0(const blk_q8_0 *w, const act_blk *a) {
	int sum = 0;
	const int *aq = (const int *)a->q;
#pragma unroll
	for (int k = 0; k < 8; k++) sum = __dp4a(load_int(w->qs + 4 * k), aq[k], sum);
	return (float)sum * (h2f(w->d) * a->d);
}

/* q4k_scale_min: sub-block j's 6-bit scale and min (ggml's get_scale_min_k4). */
__device__ __forceinline__ void q4k_scale_min(int j, const uint8_t *q, int *sc, int *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* dot_q4_k: sub-block j (32 values) of a Q4_K super-block: elements
 * 64*(j/2) + l take the low nibbles of qs[32*(j/2) + l] (even j) or the
 * high ones (odd j). */
__device__ __forceinline__ float dot_q4_k(const blk_q4_k *w, int j, const act_blk *a) {
	int sc, m;
	q4k_scale_min(j, w->scales, &sc, &m);
	const uint8_t *qs = w->qs + 32 * (j / 2);
	int shift = (j & 1) * 4, sum = 0;
	const int *aq = (const int *)a->q;
#pragma unroll
	for (int k = 0; k < 8; k++) sum = __dp4a((load_int(qs + 4 * k) >> shift) & 0x0f0f0f0f, aq[k], sum);
	return (float)(sum * sc) * (h2f(w->d) * a->d) - (float)(m * a->s) * (h2f(w->dmin) * a->d);
}

/* dot_q6_k: sub-block j (32 values) of a Q6_K super-block: half h = j/4,
 * quarter r = j%4; value l is ql[64h + 32*(r&1) + l] (low nibble for r < 2,
 * high for r >= 2) with bits 2r, 2r+1 of qh[32h + l] on top, minus 32, and
 * scale scales[8h + 2r + l/16]. */
__device__ __forceinline__ float dot_q6_k(const blk_q6_k *w, int j, const act_blk *a) {
	int h = j / 4, r = j % 4;
	const uint8_t *ql = w->ql + 64 * h + 32 * (r & 1), *qh = w->qh + 32 * h;
	int shift = r >= 2 ? 4 : 0, sum0 = 0, sum1 = 0;
#pragma unroll
	for (int l = 0; l < 32; l++) {
		int q = ((ql[l] >> shift) & 0xF) | (((qh[l] >> (2 * r)) & 3) << 4);
		int p = (q - 32) * a->q[l];
		if (l < 16) sum0 += p;
		else sum1 += p;
	}
	const int8_t *s = w->scales + 8 * h + 2 * r;
	return (float)(sum0 * s[0] + sum1 * s[1]) * (h2f(w->d) * a->d);
}

/* --------------------------------------------------------------- kernels */

/* matvec_quant: warp (blockIdx.x, threadIdx.y) computes row r for vectors
 * [v0, v0+NV) (fewer at the end). Blocks of 32 elements: kb per row. */
template <uint32_t T, int NV>
__global__ void matvec_quant(const uint8_t *__restrict__ w, int64_t rows, int64_t row0, int64_t row1, int64_t cols,
                             int64_t rb, const act_blk *__restrict__ qx, int64_t n, float *__restrict__ out) {
	int64_t r = row0 + (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
	int64_t v0 = (int64_t)blockIdx.y * NV;
	if (r >= row1) return;
	int lane = threadIdx.x;
	int64_t kb = cols / 32;
	int nv = (int)min((int64_t)NV, n - v0);
	const uint8_t *row = w + r * rb;
	float acc[NV];
#pragma unroll
	for (int v = 0; v < NV; v++) acc[v] = 0;
	for (int64_t i = lane; i < kb; i += KVS_WARP) {
#pragma unroll
		for (int v = 0; v < NV; v++) {
			if (v >= nv) break;
			const act_blk *a = qx + (v0 + v) * kb + i;
			float d;
			if (T == T_Q4_0) d = dot_q4_0((const blk_q4_0 *)row + i, a);
			else if (T == T_Q8_0) d = dot_q8_0((const blk_q8_0 *)row + i, a);
			else if (T == T_Q4_K) d = dot_q4_k((const blk_q4_k *)row + i / 8, (int)(i % 8), a);
			else d = dot_q6_k((const blk_q6_k *)row + i / 8, (int)(i % 8), a);
			acc[v] += d;
		}
	}
#pragma unroll
	for (int v = 0; v < NV; v++) {
		if (v >= nv) break;
		float s = warp_sum(acc[v]);
		if (lane == 0) out[(v0 + v) * rows + r] = s;
	}
}

/* matvec_float: the same for F32 and F16 weights times float activations:
 * lane l takes elements 2l, 2l+1 of every 64. */
template <uint32_t T, int NV>
__global__ void matvec_float(const uint8_t *__restrict__ w, int64_t rows, int64_t row0, int64_t row1, int64_t cols,
                             const float *__restrict__ x, int64_t n, float *__restrict__ out) {
	int64_t r = row0 + (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
	int64_t v0 = (int64_t)blockIdx.y * NV;
	if (r >= row1) return;
	int lane = threadIdx.x;
	int nv = (int)min((int64_t)NV, n - v0);
	float acc[NV];
#pragma unroll
	for (int v = 0; v < NV; v++) acc[v] = 0;
	for (int64_t c = 2 * lane; c < cols; c += 2 * KVS_WARP) {
		float w0, w1 = 0;
		bool two = c + 1 < cols;
		if (T == T_F16) {
			const uint16_t *h = (const uint16_t *)w + r * cols + c;
			w0 = h2f(h[0]);
			if (two) w1 = h2f(h[1]);
		} else {
			const float *f = (const float *)w + r * cols + c;
			w0 = f[0];
			if (two) w1 = f[1];
		}
#pragma unroll
		for (int v = 0; v < NV; v++) {
			if (v >= nv) break;
			const float *xv = x + (v0 + v) * cols + c;
			acc[v] += w0 * xv[0];
			if (two) acc[v] += w1 * xv[1];
		}
	}
#pragma unroll
	for (int v = 0; v < NV; v++) {
		if (v >= nv) break;
		float s = warp_sum(acc[v]);
		if (lane == 0) out[(v0 + v) * rows + r] = s;
	}
}

#define ROWS_PER_BLOCK 4

template <uint32_t T, int NV>
static void run(const void *w, int64_t rows, int64_t row0, int64_t row1, int64_t cols, const float *x, const void *qx,
                int64_t n, float *out) {
	dim3 grid((unsigned)((row1 - row0 + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), (unsigned)((n + NV - 1) / NV));
	dim3 block(KVS_WARP, ROWS_PER_BLOCK);
	if (quantized(T))
		KVS_LAUNCH(grid, block, 0, kvs_stream(), matvec_quant<T, NV>)((const uint8_t *)w, rows, row0, row1, cols,
		                                                       kvs_row_bytes(T, cols), (const act_blk *)qx, n, out);
	else
		KVS_LAUNCH(grid, block, 0, kvs_stream(), matvec_float<T, NV>)((const uint8_t *)w, rows, row0, row1, cols, x, n, out);
}

template <uint32_t T>
static void run_type(const void *w, int64_t rows, int64_t row0, int64_t row1, int64_t cols, const float *x,
                     const void *qx, int64_t n, float *out) {
	if (n <= 8) run<T, 8>(w, rows, row0, row1, cols, x, qx, n, out); /* GEMV */
	else run<T, 32>(w, rows, row0, row1, cols, x, qx, n, out);       /* GEMM */
}

KVS_EXPORT int kvs_matmul(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                          const float *x, const void *qx, int64_t n, float *out) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	if (kvs_row_bytes(type, cols) == 0 || rows < 0 || row0 < 0 || row1 < row0 || row1 > rows || n < 0) return KVS_ERR_ARG;
	if (row0 == row1 || n == 0) return KVS_OK;
	if (!w || !out || (quantized(type) ? !qx : !x)) return KVS_ERR_ARG;
	if ((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK > 0x7fffffff || (n + 7) / 8 > 65535) return KVS_ERR_ARG;
	switch (type) {
	case T_F32: run_type<T_F32>(w, rows, row0, row1, cols, x, qx, n, out); break;
	case T_F16: run_type<T_F16>(w, rows, row0, row1, cols, x, qx, n, out); break;
	case T_Q4_0: run_type<T_Q4_0>(w, rows, row0, row1, cols, x, qx, n, out); break;
	case T_Q8_0: run_type<T_Q8_0>(w, rows, row0, row1, cols, x, qx, n, out); break;
	case T_Q4_K: run_type<T_Q4_K>(w, rows, row0, row1, cols, x, qx, n, out); break;
	case T_Q6_K: run_type<T_Q6_K>(w, rows, row0, row1, cols, x, qx, n, out); break;
	}
	return kvs_launched("matmul");
}

/* ------------------------------------------------------ embedding rows */

/* dequant decodes element c of a row of type T, as engine/quant does. */
template <uint32_t T>
__device__ __forceinline__ float dequant(const uint8_t *row, int64_t c) {
	if (T == T_F32) return ((const float *)row)[c];
	if (T == T_F16) return h2f(((const uint16_t *)row)[c]);
	if (T == T_Q4_0) {
		const blk_q4_0 *b = (const blk_q4_0 *)row + c / 32;
		int j = c % 32, q = j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4;
		return (float)(q - 8) * h2f(b->d);
	}
	if (T == T_Q8_0) {
		const blk_q8_0 *b = (const blk_q8_0 *)row + c / 32;
		return (float)b->qs[c % 32] * h2f(b->d);
	}
	if (T == T_Q4_K) {
		const blk_q4_k *b = (const blk_q4_k *)row + c / 256;
		int e = c % 256, j = e / 32, l = e % 32, sc, m;
		q4k_scale_min(j, b->scales, &sc, &m);
		int q = (b->qs[32 * (j / 2) + l] >> ((j & 1) * 4)) & 0xF;
		return h2f(b->d) * (float)sc * (float)q - h2f(b->dmin) * (float)m;
	}
	const blk_q6_k *b = (const blk_q6_k *)row + c / 256;
	int e = c % 256, h = e / 128, r = (e % 128) / 32, l = e % 32;
	int q = ((b->ql[64 * h + 32 * (r & 1) + l] >> (r >= 2 ? 4 : 0)) & 0xF) | (((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
	return h2f(b->d) * (float)b->scales[8 * h + 2 * r + l / 16] * (float)(q - 32);
}

/* get_rows_kernel: out row i is row ids[i] of w (ids NULL: row0 + i);
 * ids outside [0, rows) give zeros. */
template <uint32_t T>
__global__ void get_rows_kernel(const uint8_t *__restrict__ w, int64_t rows, int64_t cols, int64_t rb,
                                const int32_t *__restrict__ ids, int64_t row0, float *__restrict__ out) {
	int64_t i = blockIdx.y;
	int64_t id = ids ? ids[i] : row0 + i;
	for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x)
		out[i * cols + c] = id < 0 || id >= rows ? 0.0f : dequant<T>(w + id * rb, c);
}

static int rows_of(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t row0, int64_t n,
                   float *out) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	int64_t rb = kvs_row_bytes(type, cols);
	if (rb == 0 || n < 0 || rows < 0 || n > 65535) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!w || !out) return KVS_ERR_ARG;
	dim3 grid(grid_1d(cols, 256) > 64 ? 64 : grid_1d(cols, 256), (unsigned)n);
	const uint8_t *wb = (const uint8_t *)w;
	cudaStream_t st = kvs_stream();
	switch (type) {
	case T_F32: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_F32>)(wb, rows, cols, rb, ids, row0, out); break;
	case T_F16: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_F16>)(wb, rows, cols, rb, ids, row0, out); break;
	case T_Q4_0: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_Q4_0>)(wb, rows, cols, rb, ids, row0, out); break;
	case T_Q8_0: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_Q8_0>)(wb, rows, cols, rb, ids, row0, out); break;
	case T_Q4_K: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_Q4_K>)(wb, rows, cols, rb, ids, row0, out); break;
	case T_Q6_K: KVS_LAUNCH(grid, 256, 0, st, get_rows_kernel<T_Q6_K>)(wb, rows, cols, rb, ids, row0, out); break;
	}
	return kvs_launched("get rows");
}

KVS_EXPORT int kvs_get_rows(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t n,
                            float *out) {
	if (n > 0 && !ids) return KVS_ERR_ARG;
	return rows_of(type, w, rows, cols, ids, 0, n, out);
}

KVS_EXPORT int kvs_dequant_rows(uint32_t type, const void *w, int64_t cols, int64_t row0, int64_t row1, float *out) {
	if (row0 < 0 || row1 < row0) return KVS_ERR_ARG;
	return rows_of(type, w, row1, cols, NULL, row0, row1 - row0, out);
}
