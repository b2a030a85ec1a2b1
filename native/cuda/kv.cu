/* kv.cu: K/V rows in device blocks, in engine/kvstore's layouts (kvscope.h,
 * struct kvs_kv_plane): writes with the store's rounding, reads, block
 * copies, and the quantization of int8/int4 key groups from their f16
 * residual slots (KIVI): int8 symmetric and int4 asymmetric with 8-bit
 * scales (engine/kvstore's doc). The CUDA library stores f16, q8_0, int8
 * and int4. */
#include "common.cuh"
#include "kv.cuh"

KVS_EXPORT int kvs_kv_supported(int32_t prec, int32_t key) {
	switch (prec) {
	case KVS_KV_F16:
	case KVS_KV_Q8_0: return KVS_OK;
	case KVS_KV_INT8:
	case KVS_KV_INT4: return KVS_OK;
	}
	(void)key;
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
	if (p->key && p->prec != KVS_KV_INT8 && p->prec != KVS_KV_INT4) return KVS_ERR_ARG;
	if (p->key)
		return p->group >= 1 && p->groups == (p->block_size + p->group - 1) / p->group && p->scale &&
		               (p->prec != KVS_KV_INT4 || p->zero) &&
		               p->row_bytes >= (p->prec == KVS_KV_INT8 ? p->head_dim : (p->head_dim + 1) / 2) &&
		               p->data_per_block >= (int64_t)p->row_bytes * p->kv_heads * p->block_size &&
		               p->scales_per_block >= (int64_t)p->kv_heads * p->groups *
		                                          (p->prec == KVS_KV_INT4 ? p->head_dim : 1 + (p->head_dim + 1) / 2)
		           ? KVS_OK
		           : KVS_ERR_ARG;
	if (p->prec == KVS_KV_F16) return p->data_per_block == row * p->block_size ? KVS_OK : KVS_ERR_ARG;
	if (p->group < 1 || p->groups != (row + p->group - 1) / p->group || !p->scale || p->row_bytes < 1 ||
	    p->data_per_block < (int64_t)p->row_bytes * p->kv_heads * p->block_size ||
	    p->scales_per_block < (int64_t)p->groups * p->block_size)
		return KVS_ERR_ARG;
	if (p->prec == KVS_KV_INT4 && !p->zero) return KVS_ERR_ARG;
	return KVS_OK;
}

/* scale_up returns the smallest E5M3 code (an f16's bits 14..7) whose value
 * is at least x, saturating at 0xf7; 0 for x zero, negative or NaN (int8).
 * scale_near and zero_near return the E5M3 and E5M2 (bits 15..8) codes
 * nearest x's f16, saturating (int4, whose codes clamp): engine/kvstore's
 * scaleUp, scaleNear, zeroNear. */
__device__ __forceinline__ uint8_t scale_up(float x) {
	if (!(x > 0)) return 0;
	uint16_t f = f16_finite(x);
	if (h2f(f) < x) f++;
	uint32_t c = ((uint32_t)f + 0x7f) >> 7;
	return (uint8_t)(c > 0xf7 ? 0xf7 : c);
}

__device__ __forceinline__ uint8_t scale_near(float x) {
	if (!(x > 0)) return 0;
	uint32_t c = ((uint32_t)f16_finite(x) + 0x40) >> 7;
	return (uint8_t)(c > 0xf7 ? 0xf7 : c);
}

__device__ __forceinline__ uint8_t zero_near(float x) {
	if (x != x) return 0;
	uint16_t f = f16_finite(x);
	uint32_t m = ((uint32_t)(f & 0x7fff) + 0x80) >> 8;
	return (uint8_t)((f >> 8 & 0x80) | (m > 0x7b ? 0x7b : m));
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

/* sse8 returns the squared error of x[lo..hi) coded as int8 at scale code
 * c, summed in order, no operation fused (engine/kvstore's sse8). */
__device__ float sse8(const float *x, int lo, int hi, uint8_t c) {
	float s = s8f(c), id = s != 0 ? 1 / s : 0.0f, e = 0;
	for (int i = lo; i < hi; i++) {
		float d = __fsub_rn(__fmul_rn((float)round_sym(__fmul_rn(x[i], id), 127), s), x[i]);
		e = __fadd_rn(e, __fmul_rn(d, d));
	}
	return e;
}

/* write_kernel: one block per row. Quantized planes first compute every
 * group's scale (and zero) into shared memory, one warp a group, then
 * each thread stores whole bytes (int4: both nibbles of a byte). */
__global__ void write_kernel(struct kvs_kv_plane p, int32_t layer, const int32_t *slots, const float *rows,
                             uint8_t *const *resid) {
	KVS_DYNAMIC_SHARED(float, sh); /* per group: inverse scale, zero */
	int64_t i = blockIdx.x, slot = slots[i], total = (int64_t)p.blocks * p.block_size;
	if (slot < 0 || slot >= total) return;
	int D = p.head_dim, B = p.block_size, H = p.kv_heads, row = H * D;
	int64_t lb = (int64_t)layer * p.blocks + slot / B, t = slot % B;
	const float *x = rows + i * row;
	if (p.key) { /* int8/int4 keys: the row at f16 into its group's residual slot */
		uint8_t *r = resid[i];
		if (!r) return;
		int tg = (int)(t % p.group);
		for (int e = threadIdx.x; e < row; e += blockDim.x) {
			int h = e / D, d = e % D;
			uint16_t f = f2h(x[e]);
			int64_t ri = (int64_t)(h * p.group + tg) * D + d;
			if (p.prec == KVS_KV_INT8) {
				r[ri] = (uint8_t)(f >> 8);
				((uint8_t *)p.data)[lb * p.data_per_block + ((int64_t)h * B + t) * p.row_bytes + d] = (uint8_t)f;
			} else {
				r[2 * ri] = (uint8_t)f, r[2 * ri + 1] = (uint8_t)(f >> 8);
			}
		}
		return;
	}
	if (p.prec == KVS_KV_F16) {
		uint16_t *data = (uint16_t *)p.data;
		for (int e = threadIdx.x; e < row; e += blockDim.x)
			data[lb * p.data_per_block + ((int64_t)(e / D) * B + t) * D + e % D] = f2h(x[e]);
		return;
	}
	int G = p.group, warp = threadIdx.x / KVS_WARP, lane = threadIdx.x % KVS_WARP, warps = blockDim.x / KVS_WARP;
	int64_t si = lb * p.scales_per_block + t * p.groups;
	float qm = p.prec == KVS_KV_INT4 ? 15 : 127;
	for (int g = warp; g < p.groups; g += warps) {
		int lo = g * G, hi = min(lo + G, row);
		float amax = 0, mn = x[lo], mx = x[lo];
		for (int e = lo + lane; e < hi; e += KVS_WARP) amax = fmaxf(amax, fabsf(x[e])), mn = fminf(mn, x[e]), mx = fmaxf(mx, x[e]);
		amax = warp_max(amax), mn = warp_min(mn), mx = warp_max(mx);
		if (lane == 0) {
			float id = 0, m = 0;
			if (p.prec == KVS_KV_Q8_0) {
				float dq = amax / 127;
				((uint16_t *)p.scale)[si + g] = f16_finite(dq);
				if (dq != 0) id = 1 / dq;
			} else {
				/* int8: symmetric, scale amax/127 rounded up to E5M3; int4:
				 * zero point nearest min (E5M2), scale nearest
				 * (max-zero)/15 (E5M3). */
				uint8_t sc;
				if (p.prec == KVS_KV_INT4) {
					uint8_t zp = zero_near(mn);
					((uint8_t *)p.zero)[si + g] = zp;
					m = z8f(zp);
					sc = scale_near(__fdiv_rn(__fsub_rn(mx, m), qm));
				} else {
					sc = scale_up(__fdiv_rn(amax, qm));
					/* the code below when its squared error is smaller */
					if (sc > 0 && sse8(x, lo, hi, (uint8_t)(sc - 1)) < sse8(x, lo, hi, sc)) sc--;
				}
				((uint8_t *)p.scale)[si + g] = sc;
				if (s8f(sc) != 0) id = 1 / s8f(sc);
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
		uint8_t q = (uint8_t)(int8_t)round_sym(__fmul_rn(v, sh[2 * g]), 127); /* q8_0, int8 */
		data[base + (e / D) * stride + e % D] = q;
	}
}

KVS_EXPORT int kvs_kv_write(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots,
                            const float *rows, uint8_t *const *resid) {
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (layer < 0 || layer >= p->layers || n < 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!slots || !rows || (p->key && !resid)) return KVS_ERR_ARG;
	size_t smem = p->prec == KVS_KV_F16 || p->key ? 0 : (size_t)p->groups * 2 * sizeof(float);
	if (smem > 48 * 1024) return KVS_ERR_ARG;
	KVS_LAUNCH((unsigned)n, 256, smem, kvs_stream(), write_kernel)(*p, layer, slots, rows, resid);
	return kvs_launched("K/V write");
}

__global__ void read_kernel(struct kvs_kv_plane p, int32_t layer, const int32_t *slots, float *rows,
                            const uint8_t *const *resid) {
	int64_t i = blockIdx.x, slot = slots[i], total = (int64_t)p.blocks * p.block_size;
	int D = p.head_dim, row = p.kv_heads * D;
	const uint8_t *r = p.key ? resid[i] : NULL;
	for (int e = threadIdx.x; e < row; e += blockDim.x) {
		float v = 0;
		if (slot >= 0 && slot < total)
			v = key_value(p, (int64_t)layer * p.blocks + slot / p.block_size, e / D, (int)(slot % p.block_size), e % D, r);
		rows[i * row + e] = v;
	}
}

KVS_EXPORT int kvs_kv_read(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, float *rows,
                           const uint8_t *const *resid) {
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (layer < 0 || layer >= p->layers || n < 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!slots || !rows || (p->key && !resid)) return KVS_ERR_ARG;
	KVS_LAUNCH((unsigned)n, 256, 0, kvs_stream(), read_kernel)(*p, layer, slots, rows, resid);
	return kvs_launched("K/V read");
}

KVS_EXPORT int kvs_kv_copy_block(const struct kvs_kv_plane *p, int32_t dst, int32_t src) {
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (dst < 0 || dst >= p->blocks || src < 0 || src >= p->blocks) return KVS_ERR_ARG;
	if (dst == src) return KVS_OK;
	/* f16 scales for q8_0, 8-bit scales (and int4's zero points) otherwise */
	int64_t db = p->data_per_block * (p->prec == KVS_KV_F16 ? 2 : 1), sb = p->scales_per_block * (p->prec == KVS_KV_Q8_0 ? 2 : 1),
	        zb = p->scales_per_block;
	cudaStream_t st = kvs_stream();
	/* One strided copy per array: every layer's block at once. */
	int64_t pitch = (int64_t)p->blocks;
	cudaError_t err = cudaMemcpy2DAsync((uint8_t *)p->data + dst * db, pitch * db, (const uint8_t *)p->data + src * db,
	                                    pitch * db, db, p->layers, cudaMemcpyDeviceToDevice, st);
	if (err == cudaSuccess && p->scale && p->prec != KVS_KV_F16)
		err = cudaMemcpy2DAsync((uint8_t *)p->scale + dst * sb, pitch * sb, (const uint8_t *)p->scale + src * sb,
		                        pitch * sb, sb, p->layers, cudaMemcpyDeviceToDevice, st);
	if (err == cudaSuccess && p->zero && p->prec != KVS_KV_F16)
		err = cudaMemcpy2DAsync((uint8_t *)p->zero + dst * zb, pitch * zb, (const uint8_t *)p->zero + src * zb,
		                        pitch * zb, zb, p->layers, cudaMemcpyDeviceToDevice, st);
	return err == cudaSuccess ? KVS_OK : kvs_record("K/V block copy", err);
}

/* key_span returns layer-block lb, first slot lo and token count gn of key
 * group index gi (lb*groups + g). */
__device__ __forceinline__ void key_span(const struct kvs_kv_plane &p, int64_t gi, int64_t *lb, int *g, int *lo, int *gn) {
	*lb = gi / p.groups, *g = (int)(gi % p.groups), *lo = *g * p.group;
	*gn = min(p.group, p.block_size - *lo);
}

/* go_min and go_max are Go's min and max of two floats: NaN wins, and -0
 * is below +0 (engine/kvstore takes a group's range with them). */
__device__ __forceinline__ float go_min(float a, float b) {
	if (a != a || b != b) return a != a ? a : b;
	if (a == b) return signbit(a) ? a : b;
	return a < b ? a : b;
}

__device__ __forceinline__ float go_max(float a, float b) {
	if (a != a || b != b) return a != a ? a : b;
	if (a == b) return signbit(a) ? b : a;
	return a > b ? a : b;
}

/* quantize_kernel: one thread block a key group. Int4: a thread a pair of
 * channels, whose nibbles share each byte. Int8, head by head: a thread's
 * pair of channels takes its largest magnitudes into shared memory, thread
 * 0 the head's base scale, then each thread its pair's multipliers (one
 * byte) and codes. */
__global__ void quantize_kernel(struct kvs_kv_plane p, const int64_t *groups, uint8_t *const *resid) {
	__shared__ float amax[KVS_MAX_HEAD_DIM];
	__shared__ float base;
	int64_t gi = groups[blockIdx.x], lb;
	int g, lo, gn;
	if (gi < 0 || gi >= (int64_t)p.layers * p.blocks * p.groups) return;
	key_span(p, gi, &lb, &g, &lo, &gn);
	const uint8_t *r = resid[blockIdx.x];
	if (!r) return;
	int D = p.head_dim, cols = (D + 1) / 2;
	uint8_t *data = (uint8_t *)p.data, *scale = (uint8_t *)p.scale, *zero = (uint8_t *)p.zero;
	if (p.prec == KVS_KV_INT4) {
		for (int e = threadIdx.x; e < p.kv_heads * cols; e += blockDim.x) {
			int h = e / cols, c = e % cols;
			int64_t si = key_scale_index(p, lb, h, g);
			float zp[2], id[2];
			for (int k = 0; k < 2 && 2 * c + k < D; k++) {
				int d = 2 * c + k;
				const uint8_t *drow = data + lb * p.data_per_block + ((int64_t)h * p.block_size + lo) * p.row_bytes;
				float mn = h2f(resid_bits(p, r, drow, h, 0, d)), mx = mn;
				for (int tg = 1; tg < gn; tg++) {
					float v = h2f(resid_bits(p, r, drow + (int64_t)tg * p.row_bytes, h, tg, d));
					mn = go_min(mn, v), mx = go_max(mx, v);
				}
				uint8_t z = zero_near(mn);
				zp[k] = z8f(z);
				uint8_t s = scale_near(__fdiv_rn(__fsub_rn(mx, zp[k]), 15.0f));
				scale[si + d] = s, zero[si + d] = z;
				id[k] = s8f(s) != 0 ? __frcp_rn(s8f(s)) : 0.0f;
			}
			for (int tg = 0; tg < gn; tg++) {
				uint8_t *drow = data + lb * p.data_per_block + ((int64_t)h * p.block_size + lo + tg) * p.row_bytes;
				uint8_t byte = drow[c];
				for (int k = 0; k < 2 && 2 * c + k < D; k++) {
					float v = h2f(resid_bits(p, r, drow, h, tg, 2 * c + k));
					uint8_t q = (uint8_t)round_unsigned(__fmul_rn(__fsub_rn(v, zp[k]), id[k]), 15.0f);
					byte = (uint8_t)((byte & ~(0xf << (4 * k))) | q << (4 * k));
				}
				drow[c] = byte;
			}
		}
		return;
	}
	for (int h = 0; h < p.kv_heads; h++) {
		int64_t si = key_scale_index(p, lb, h, g);
		const uint8_t *row0 = data + lb * p.data_per_block + ((int64_t)h * p.block_size + lo) * p.row_bytes;
		for (int d = threadIdx.x; d < D; d += blockDim.x) {
			float a = 0;
			for (int tg = 0; tg < gn; tg++) {
				float v = fabsf(h2f(resid_bits(p, r, row0 + (int64_t)tg * p.row_bytes, h, tg, d)));
				if (v > a) a = v;
			}
			amax[d] = a;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			float top = 0;
			for (int d = 0; d < D; d++)
				if (amax[d] > top) top = amax[d];
			scale[si] = scale_up(__fdiv_rn(top, 127.0f));
			base = s8f(scale[si]);
		}
		__syncthreads();
		for (int c = threadIdx.x; c < cols; c += blockDim.x) {
			float id[2];
			uint8_t byte = 0;
			for (int k = 0; k < 2 && 2 * c + k < D; k++) {
				float want = __fdiv_rn(amax[2 * c + k], 127.0f);
				int m = 0;
				while (m < 15 && __fmul_rn(__fmul_rn(base, (float)(m + 1)), 1.0f / 16) < want) m++;
				byte |= (uint8_t)(m << (4 * k));
				float s = __fmul_rn(__fmul_rn(base, (float)(m + 1)), 1.0f / 16);
				id[k] = s != 0 ? __frcp_rn(s) : 0.0f;
			}
			scale[si + 1 + c] = byte;
			/* Each token's value is read before its byte is overwritten. */
			for (int tg = 0; tg < gn; tg++) {
				uint8_t *drow = data + lb * p.data_per_block + ((int64_t)h * p.block_size + lo + tg) * p.row_bytes;
				for (int k = 0; k < 2 && 2 * c + k < D; k++) {
					int d = 2 * c + k;
					float v = h2f(resid_bits(p, r, drow, h, tg, d));
					drow[d] = (uint8_t)(int8_t)round_sym(__fmul_rn(v, id[k]), 127.0f);
				}
			}
		}
		__syncthreads();
	}
}

/* dequantize_kernel: one thread block a key group, a thread a value. */
__global__ void dequantize_kernel(struct kvs_kv_plane p, const int64_t *groups, uint8_t *const *resid) {
	int64_t gi = groups[blockIdx.x], lb;
	int g, lo, gn;
	if (gi < 0 || gi >= (int64_t)p.layers * p.blocks * p.groups) return;
	key_span(p, gi, &lb, &g, &lo, &gn);
	uint8_t *r = resid[blockIdx.x];
	if (!r) return;
	int D = p.head_dim;
	for (int e = threadIdx.x; e < p.kv_heads * gn * D; e += blockDim.x) {
		int h = e / (gn * D), tg = e / D % gn, d = e % D;
		uint16_t f = f2h(key_value(p, lb, h, lo + tg, d, NULL));
		int64_t ri = (int64_t)(h * p.group + tg) * D + d;
		if (p.prec == KVS_KV_INT8) {
			r[ri] = (uint8_t)(f >> 8);
			((uint8_t *)p.data)[lb * p.data_per_block + ((int64_t)h * p.block_size + lo + tg) * p.row_bytes + d] = (uint8_t)f;
		} else {
			r[2 * ri] = (uint8_t)f, r[2 * ri + 1] = (uint8_t)(f >> 8);
		}
	}
}

/* key_groups_call checks and launches a quantize or dequantize call. */
static int key_groups_call(bool quantize, const struct kvs_kv_plane *p, int64_t n, const int64_t *groups,
                           uint8_t *const *resid) {
	int rc = kvs_plane_check(p);
	if (rc != KVS_OK) return rc;
	if (!p->key) return KVS_ERR_TYPE;
	if (n < 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!groups || !resid) return KVS_ERR_ARG;
	if (quantize) {
		KVS_LAUNCH((unsigned)n, 128, 0, kvs_stream(), quantize_kernel)(*p, groups, resid);
		return kvs_launched("key group quantize");
	}
	KVS_LAUNCH((unsigned)n, 256, 0, kvs_stream(), dequantize_kernel)(*p, groups, resid);
	return kvs_launched("key group dequantize");
}

KVS_EXPORT int kvs_key_quantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	return key_groups_call(true, p, n, groups, resid);
}

KVS_EXPORT int kvs_key_dequantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	return key_groups_call(false, p, n, groups, resid);
}
