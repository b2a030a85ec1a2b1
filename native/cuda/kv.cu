/* kv.cu: K/V rows in device blocks, in engine/kvstore's layouts (kvscope.h,
 * struct kvs_kv_plane): writes with the store's rounding, reads, block
 * copies. The CUDA library stores f16, q8_0, int8 and int4 (int8/int4 for
 * values only: keys at those precisions are quantized per channel across a
 * group of tokens by the Go store, KIVI, which this library does not do). */
#include "common.cuh"
#include "kv.cuh"

KVS_EXPORT int kvs_kv_supported(int32_t prec, int32_t key) {
	switch (prec) {
	case KVS_KV_F16:
	case KVS_KV_Q8_0: return KVS_OK;
	case KVS_KV_INT8:
	case KVS_KV_INT4: return key ? KVS_ERR_TYPE : KVS_OK;
	}
	return KVS_ERR_TYPE;
}

/* kvs_plane_check checks a plane's description: KVS_OK, KVS_ERR_TYPE for a
 * precision this library does not store, or KVS_ERR_ARG. */
int kvs_plane_check(const struct kvs_kv_plane *p) {
	if (!p || p->layers < 1 || p->blocks < 1 || p->block_size < 1 || p->kv_heads < 1 || p->head_dim < 1 ||
	    p->head_dim > KVS_MAX_HEAD_DIM || !p->data)
		return KVS_ERR_ARG;
	if (kvs_kv_supported(p->prec, p->key) != KVS_OK) return KVS_ERR_TYPE;
	int64_t row = (int64_t)p->kv_heads * p->head_dim;
	if (p->prec == KVS_KV_F16) return p->data_per_block == row * p->block_size ? KVS_OK : KVS_ERR_ARG;
	if (p->group < 1 || p->groups != (row + p->group - 1) / p->group || !p->scale || p->row_bytes < 1 ||
	    p->data_per_block < (int64_t)p->row_bytes * p->kv_heads * p->block_size ||
	    p->scales_per_block < (int64_t)p->groups * p->block_size)
		return KVS_ERR_ARG;
	if ((p->prec == KVS_KV_INT8 || p->prec == KVS_KV_INT4) && !p->zero) return KVS_ERR_ARG;
	return KVS_OK;
}

/* round_sym rounds halves away from zero, clamped to ±lim; round_unsigned
 * rounds to [0, lim], halves up (engine/kvstore's rounding). */
__device__ __forceinline__ int round_sym(float v, float lim) {
	if (v >= lim) return (int)lim;
	if (v <= -lim) return -(int)lim;
	if (v >= 0) return (int)(v + 0.5f);
	if (v < 0) return (int)(v - 0.5f);
	return 0;
}

__device__ __forceinline__ int round_unsigned(float v, float lim) {
	if (v >= lim) return (int)lim;
	if (v > 0) return (int)(v + 0.5f);
	return 0;
}

/* write_kernel: one block per row. Quantized planes first compute every
 * group's scale (and zero) into shared memory, one warp a group, then
 * each thread stores whole bytes (int4: both nibbles of a byte). */
__global__ void write_kernel(struct kvs_kv_plane p, int32_t layer, const int32_t *slots, const float *rows) {
	extern __shared__ float sh[]; /* per group: inverse scale, zero */
	int64_t i = blockIdx.x, slot = slots[i], total = (int64_t)p.blocks * p.block_size;
	if (slot < 0 || slot >= total) return;
	int D = p.head_dim, B = p.block_size, H = p.kv_heads, row = H * D;
	int64_t lb = (int64_t)layer * p.blocks + slot / B, t = slot % B;
	const float *x = rows + i * row;
	if (p.prec == KVS_KV_F16) {
		uint16_t *data = (uint16_t *)p.data;
		for (int e = threadIdx.x; e < row; e += blockDim.x)
			data[lb * p.data_per_block + ((int64_t)(e / D) * B + t) * D + e % D] = f2h(x[e]);
		return;
	}
	int G = p.group, warp = threadIdx.x / KVS_WARP, lane = threadIdx.x % KVS_WARP, warps = blockDim.x / KVS_WARP;
	uint16_t *scale = (uint16_t *)p.scale, *zero = (uint16_t *)p.zero;
	int64_t si = lb * p.scales_per_block + t * p.groups;
	float qm = p.prec == KVS_KV_INT4 ? 15 : 255;
	for (int g = warp; g < p.groups; g += warps) {
		int lo = g * G, hi = min(lo + G, row);
		float amax = 0, mn = x[lo], mx = x[lo];
		for (int e = lo + lane; e < hi; e += KVS_WARP) amax = fmaxf(amax, fabsf(x[e])), mn = fminf(mn, x[e]), mx = fmaxf(mx, x[e]);
		amax = warp_max(amax), mn = warp_min(mn), mx = warp_max(mx);
		if (lane == 0) {
			float id = 0, m = 0;
			if (p.prec == KVS_KV_Q8_0) {
				float dq = amax / 127;
				scale[si + g] = f16_finite(dq);
				if (dq != 0) id = 1 / dq;
			} else {
				uint16_t sc = f16_finite((mx - mn) / qm), zp = f16_finite(mn);
				scale[si + g] = sc, zero[si + g] = zp;
				m = h2f(zp);
				if (h2f(sc) != 0) id = 1 / h2f(sc);
			}
			sh[2 * g] = id, sh[2 * g + 1] = m;
		}
	}
	__syncthreads();
	uint8_t *data = (uint8_t *)p.data;
	int64_t base = lb * p.data_per_block + t * p.row_bytes, stride = (int64_t)B * p.row_bytes;
	if (p.prec == KVS_KV_INT4) {
		int per = (D + 1) / 2; /* bytes a head */
		for (int e = threadIdx.x; e < H * per; e += blockDim.x) {
			int h = e / per, d = 2 * (e % per);
			uint8_t byte = 0;
			for (int k = 0; k < 2 && d + k < D; k++) {
				int idx = h * D + d + k, g = idx / G;
				byte |= (uint8_t)(round_unsigned((x[idx] - sh[2 * g + 1]) * sh[2 * g], qm) << (4 * k));
			}
			data[base + h * stride + d / 2] = byte;
		}
		return;
	}
	for (int e = threadIdx.x; e < row; e += blockDim.x) {
		int g = e / G;
		float v = x[e];
		uint8_t q = p.prec == KVS_KV_Q8_0 ? (uint8_t)(int8_t)round_sym(v * sh[2 * g], 127)
		                                 : (uint8_t)round_unsigned((v - sh[2 * g + 1]) * sh[2 * g], qm);
		data[base + (e / D) * stride + e % D] = q;
	}
}

KVS_EXPORT int kvs_kv_write(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots,
                            const float *rows) {
	if (p && p->key && (p->prec == KVS_KV_INT8 || p->prec == KVS_KV_INT4)) return KVS_ERR_TYPE;
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (layer < 0 || layer >= p->layers || n < 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!slots || !rows) return KVS_ERR_ARG;
	size_t smem = p->prec == KVS_KV_F16 ? 0 : (size_t)p->groups * 2 * sizeof(float);
	if (smem > 48 * 1024) return KVS_ERR_ARG;
	write_kernel<<<(unsigned)n, 256, smem, kvs_stream()>>>(*p, layer, slots, rows);
	return kvs_launched("K/V write");
}

__global__ void read_kernel(struct kvs_kv_plane p, int32_t layer, const int32_t *slots, float *rows) {
	int64_t i = blockIdx.x, slot = slots[i], total = (int64_t)p.blocks * p.block_size;
	int D = p.head_dim, row = p.kv_heads * D;
	for (int e = threadIdx.x; e < row; e += blockDim.x) {
		float v = 0;
		if (slot >= 0 && slot < total)
			v = kv_value(p, (int64_t)layer * p.blocks + slot / p.block_size, e / D, (int)(slot % p.block_size), e % D);
		rows[i * row + e] = v;
	}
}

KVS_EXPORT int kvs_kv_read(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, float *rows) {
	if (p && p->key && (p->prec == KVS_KV_INT8 || p->prec == KVS_KV_INT4)) return KVS_ERR_TYPE;
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (layer < 0 || layer >= p->layers || n < 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!slots || !rows) return KVS_ERR_ARG;
	read_kernel<<<(unsigned)n, 256, 0, kvs_stream()>>>(*p, layer, slots, rows);
	return kvs_launched("K/V read");
}

KVS_EXPORT int kvs_kv_copy_block(const struct kvs_kv_plane *p, int32_t dst, int32_t src) {
	if (p && p->key && (p->prec == KVS_KV_INT8 || p->prec == KVS_KV_INT4)) return KVS_ERR_TYPE;
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (dst < 0 || dst >= p->blocks || src < 0 || src >= p->blocks) return KVS_ERR_ARG;
	if (dst == src) return KVS_OK;
	int64_t db = p->data_per_block * (p->prec == KVS_KV_F16 ? 2 : 1), sb = p->scales_per_block * 2;
	cudaStream_t st = kvs_stream();
	/* One strided copy per array: every layer's block at once. */
	int64_t pitch = (int64_t)p->blocks;
	cudaError_t err = cudaMemcpy2DAsync((uint8_t *)p->data + dst * db, pitch * db, (const uint8_t *)p->data + src * db,
	                                    pitch * db, db, p->layers, cudaMemcpyDeviceToDevice, st);
	if (err == cudaSuccess && p->scale && p->prec != KVS_KV_F16)
		err = cudaMemcpy2DAsync((uint8_t *)p->scale + dst * sb, pitch * sb, (const uint8_t *)p->scale + src * sb,
		                        pitch * sb, sb, p->layers, cudaMemcpyDeviceToDevice, st);
	if (err == cudaSuccess && p->zero && p->prec != KVS_KV_F16)
		err = cudaMemcpy2DAsync((uint8_t *)p->zero + dst * sb, pitch * sb, (const uint8_t *)p->zero + src * sb,
		                        pitch * sb, sb, p->layers, cudaMemcpyDeviceToDevice, st);
	return err == cudaSuccess ? KVS_OK : kvs_record("K/V block copy", err);
}
