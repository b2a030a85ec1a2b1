/* kv.cu: K/V rows in device blocks, in engine/kvstore's layouts (kvscope.h,
 * struct kvs_kv_plane): writes with the store's rounding, reads, block
 * copies, and the quantization of int8/int4 key groups from their f16
 * residual slots (KIVI): int8 symmetric with 8-bit scales, int4 asymmetric
 * with a 9-bit scale and 10-bit zero point a channel, searched (layout v3,
 * engine/kvstore's doc). Int4 values are rotated per head, then coded with
 * the IQ4_NL table at a searched signed 8-bit scale a group; int4 uses no
 * zero array. The CUDA library stores f16, q8_0, int8 and int4. */
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
		               p->row_bytes >= (p->prec == KVS_KV_INT8 ? p->head_dim : (p->head_dim + 1) / 2) &&
		               p->data_per_block >= (int64_t)p->row_bytes * p->kv_heads * p->block_size &&
		               p->scales_per_block >= (int64_t)p->kv_heads * p->groups * key_meta_bytes(p->prec, p->head_dim)
		           ? KVS_OK
		           : KVS_ERR_ARG;
	if (p->prec == KVS_KV_F16) return p->data_per_block == row * p->block_size ? KVS_OK : KVS_ERR_ARG;
	if (p->group < 1 || p->groups != (row + p->group - 1) / p->group || !p->scale || p->row_bytes < 1 ||
	    p->data_per_block < (int64_t)p->row_bytes * p->kv_heads * p->block_size ||
	    p->scales_per_block < (int64_t)p->groups * p->block_size)
		return KVS_ERR_ARG;
	return KVS_OK;
}

/* scale_up returns the smallest E5M3 code (an f16's bits 14..7) whose value
 * is at least x, saturating at 0xf7; 0 for x zero, negative or NaN (int8):
 * engine/kvstore's scaleUp. */
__device__ __forceinline__ uint8_t scale_up(float x) {
	if (!(x > 0)) return 0;
	uint16_t f = f16_finite(x);
	if (h2f(f) < x) f++;
	uint32_t c = ((uint32_t)f + 0x7f) >> 7;
	return (uint8_t)(c > 0xf7 ? 0xf7 : c);
}

/* e5m4_code returns the unsigned E5M4 code of x (an f16's bits 14..6,
 * nearest, saturating at 495; 0 for x zero, negative or NaN), e5m4_signed
 * the signed one as a signed integer (-mag for a negative f16), and
 * e5m4_value a signed code's value: int4 keys' scale and zero codes
 * (engine/kvstore's). */
__device__ __forceinline__ int e5m4_code(float x) {
	if (!(x > 0)) return 0;
	int c = ((int)f16_finite(x) + 32) >> 6;
	return c > 495 ? 495 : c;
}

__device__ __forceinline__ int e5m4_signed(float x) {
	uint16_t h = f16_finite(x);
	int mag = ((h & 0x7fff) + 32) >> 6;
	if (mag > 495) mag = 495;
	return h & 0x8000 ? -mag : mag;
}

__device__ __forceinline__ float e5m4_value(int c) { return c < 0 ? -e5m4((uint32_t)-c) : e5m4((uint32_t)c); }

/* iq4_code returns the IQ4_NL code of u: how many of the midpoints between
 * neighbouring entries of the table (iq4_value) u is above (a tie goes to
 * the lower entry; NaN to 0). */
__device__ __forceinline__ int iq4_code(float u) {
	return (u > -115.5f) + (u > -93.5f) + (u > -74.0f) + (u > -57.0f) + (u > -42.0f) + (u > -28.5f) + (u > -16.0f) +
	       (u > -4.5f) + (u > 7.0f) + (u > 19.0f) + (u > 31.5f) + (u > 45.5f) + (u > 61.0f) + (u > 79.0f) +
	       (u > 101.0f);
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

/* V4_CANDS is the most scales an int4 value group's search tries: 7 codes,
 * each with both signs. */
#define V4_CANDS 14

/* v4_smem is write_kernel's shared memory for a row of int4 values: the
 * rotated row, then per group its largest magnitude, scale, inverse scale
 * and the search's V4_CANDS squared errors. */
static size_t v4_smem(int64_t row, int64_t groups) { return (size_t)(row + groups * (3 + V4_CANDS)) * sizeof(float); }

/* v4_range returns the first and last scale code an int4 value group
 * whose largest magnitude is a (> 0) searches: 3 either side of the code
 * of a/127 (the top byte of its f16, nearest), within 1..0x7b. */
__device__ __forceinline__ void v4_range(float a, int *lo, int *hi) {
	int c0 = ((int)f16_finite(__fdiv_rn(a, 127.0f)) + 0x80) >> 8;
	if (c0 > 0x7b) c0 = 0x7b;
	*lo = max(c0 - 3, 1), *hi = min(c0 + 3, 0x7b);
}

/* write_int4_values stores row x of int4 values at slot t of layer-block
 * lb as engine/kvstore does: the row rotated per head (wht_rows), then per
 * group of p.group rotated values the signed scale d = ±h2f(sc << 8), sc
 * within 3 of a/127's code (a the group's largest magnitude), that codes
 * the group with the smallest squared error (summed in order; the first
 * such, codes ascending, + before -), the codes the IQ4_NL entries
 * nearest v/d. A group of zeros: scale byte 0, codes 8. sh: v4_smem. */
__device__ void write_int4_values(const struct kvs_kv_plane &p, int64_t lb, int64_t t, const float *x, float *sh) {
	int D = p.head_dim, H = p.kv_heads, row = H * D, G = p.group, NG = p.groups, R = wht_size(D);
	float *xr = sh, *am = xr + row, *dv = am + NG, *iv = dv + NG, *err = iv + NG;
	for (int e = threadIdx.x; e < row; e += blockDim.x) xr[e] = x[e];
	__syncthreads();
	wht_rows(xr, row, R, wht_scale(R));
	for (int g = threadIdx.x; g < NG; g += blockDim.x) {
		float a = 0;
		for (int e = g * G; e < min(g * G + G, row); e++) {
			float v = fabsf(xr[e]);
			if (v > a) a = v;
		}
		am[g] = a;
	}
	__syncthreads();
	/* a thread a (group, candidate): candidate k is code lo + k/2, sign k&1 */
	for (int c = threadIdx.x; c < NG * V4_CANDS; c += blockDim.x) {
		int g = c / V4_CANDS, k = c % V4_CANDS, lo, hi;
		if (am[g] == 0) continue;
		v4_range(am[g], &lo, &hi);
		if (lo + k / 2 > hi) continue;
		float d = z8f((uint8_t)((k & 1) << 7 | (lo + k / 2))), id = __frcp_rn(d), e = 0;
		for (int i = g * G; i < min(g * G + G, row); i++) {
			float v = xr[i], u = __fsub_rn(__fmul_rn(d, iq4_value(iq4_code(__fmul_rn(v, id)))), v);
			e = __fadd_rn(e, __fmul_rn(u, u));
		}
		err[c] = e;
	}
	__syncthreads();
	int64_t si = lb * p.scales_per_block + t * NG;
	for (int g = threadIdx.x; g < NG; g += blockDim.x) {
		uint8_t byte = 0;
		if (am[g] != 0) {
			int lo, hi, best = 0;
			v4_range(am[g], &lo, &hi);
			const float *eg = err + g * V4_CANDS;
			for (int k = 1; k < 2 * (hi - lo + 1); k++)
				if (eg[k] < eg[best]) best = k;
			byte = (uint8_t)((best & 1) << 7 | (lo + best / 2));
		}
		((uint8_t *)p.scale)[si + g] = byte;
		dv[g] = z8f(byte), iv[g] = byte ? __frcp_rn(dv[g]) : 0.0f;
	}
	__syncthreads();
	uint8_t *data = (uint8_t *)p.data;
	int64_t base = lb * p.data_per_block + t * p.row_bytes, stride = (int64_t)p.block_size * p.row_bytes;
	int per = (D + 1) / 2; /* bytes a head */
	for (int e = threadIdx.x; e < H * per; e += blockDim.x) {
		int h = e / per, d = 2 * (e % per);
		uint8_t byte = 0;
		for (int k = 0; k < 2 && d + k < D; k++) {
			int idx = h * D + d + k, g = idx / G;
			byte |= (uint8_t)((am[g] == 0 ? 8 : iq4_code(__fmul_rn(xr[idx], iv[g]))) << (4 * k));
		}
		data[base + h * stride + d / 2] = byte;
	}
}

/* write_kernel: one block per row. Quantized planes first compute every
 * group's scale into shared memory, one warp a group, then each thread
 * stores whole bytes; int4 values: write_int4_values. */
__global__ void write_kernel(struct kvs_kv_plane p, int32_t layer, const int32_t *slots, const float *rows,
                             uint8_t *const *resid) {
	KVS_DYNAMIC_SHARED(float, sh); /* per group: inverse scale (int4 values: v4_smem) */
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
	if (p.prec == KVS_KV_INT4) {
		write_int4_values(p, lb, t, x, sh);
		return;
	}
	int G = p.group, warp = threadIdx.x / KVS_WARP, lane = threadIdx.x % KVS_WARP, warps = blockDim.x / KVS_WARP;
	int64_t si = lb * p.scales_per_block + t * p.groups;
	for (int g = warp; g < p.groups; g += warps) {
		int lo = g * G, hi = min(lo + G, row);
		float amax = 0;
		for (int e = lo + lane; e < hi; e += KVS_WARP) amax = fmaxf(amax, fabsf(x[e]));
		amax = warp_max(amax);
		if (lane == 0) {
			float id = 0;
			if (p.prec == KVS_KV_Q8_0) {
				float dq = amax / 127;
				((uint16_t *)p.scale)[si + g] = f16_finite(dq);
				if (dq != 0) id = 1 / dq;
			} else {
				/* int8: symmetric, scale amax/127 rounded up to E5M3 */
				uint8_t sc = scale_up(__fdiv_rn(amax, 127.0f));
				/* the code below when its squared error is smaller */
				if (sc > 0 && sse8(x, lo, hi, (uint8_t)(sc - 1)) < sse8(x, lo, hi, sc)) sc--;
				((uint8_t *)p.scale)[si + g] = sc;
				if (s8f(sc) != 0) id = 1 / s8f(sc);
			}
			sh[g] = id;
		}
	}
	__syncthreads();
	uint8_t *data = (uint8_t *)p.data;
	int64_t base = lb * p.data_per_block + t * p.row_bytes, stride = (int64_t)B * p.row_bytes;
	for (int e = threadIdx.x; e < row; e += blockDim.x) {
		int g = e / G;
		float v = x[e];
		uint8_t q = (uint8_t)(int8_t)round_sym(__fmul_rn(v, sh[g]), 127); /* q8_0, int8 */
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
	size_t smem = p->prec == KVS_KV_F16 || p->key ? 0
	              : p->prec == KVS_KV_INT4          ? v4_smem((int64_t)p->kv_heads * p->head_dim, p->groups)
	                                                : (size_t)p->groups * sizeof(float);
	if (smem > (size_t)kvs_max_smem()) return KVS_ERR_ARG;
	if (smem > 48 * 1024) {
		cudaError_t err = cudaFuncSetAttribute(write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (err != cudaSuccess) return kvs_record("K/V write shared memory", err);
	}
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
	if (!p.key && p.prec == KVS_KV_INT4 && slot >= 0 && slot < total) { /* int4 values: rotated back */
		__syncthreads();
		int R = wht_size(D);
		wht_rows(rows + i * row, row, R, wht_scale(R));
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
	/* f16 scales for q8_0, bytes otherwise (int4 has no zero points) */
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

/* key4_search chooses int4 channel d's scale and zero codes over the gn
 * tokens of its key group (head h, residual slot r, data rows from row0),
 * as engine/kvstore does: from the zero code of the minimum and its two
 * neighbours (ascending), each with the scale code of (max-z)/15 and its
 * two neighbours (ascending), the first pair with the smallest squared
 * error, summed in token order. It returns the 9-bit scale code and the
 * 10-bit stored zero code. */
__device__ void key4_search(const struct kvs_kv_plane &p, const uint8_t *r, const uint8_t *row0, int h, int gn, int d,
                            uint32_t *sc, uint32_t *zc) {
	float mn = h2f(resid_bits(p, r, row0, h, 0, d)), mx = mn;
	for (int tg = 1; tg < gn; tg++) {
		float v = h2f(resid_bits(p, r, row0 + (int64_t)tg * p.row_bytes, h, tg, d));
		mn = go_min(mn, v), mx = go_max(mx, v);
	}
	int z0 = e5m4_signed(mn), bz = 0, bs = 0;
	bool first = true;
	float best = 0;
	for (int zi = z0 - 1; zi <= z0 + 1; zi++) {
		if (zi < -495 || zi > 495) continue;
		float z = e5m4_value(zi);
		int s0 = e5m4_code(__fdiv_rn(__fsub_rn(mx, z), 15.0f));
		for (int si = max(s0 - 1, 0); si <= min(s0 + 1, 495); si++) {
			float s = e5m4((uint32_t)si), id = s == 0 ? 0.0f : __frcp_rn(s), e = 0;
			for (int tg = 0; tg < gn; tg++) {
				float v = h2f(resid_bits(p, r, row0 + (int64_t)tg * p.row_bytes, h, tg, d));
				float q = (float)round_unsigned(__fmul_rn(__fsub_rn(v, z), id), 15.0f);
				float t = __fsub_rn(__fadd_rn(__fmul_rn(q, s), z), v);
				e = __fadd_rn(e, __fmul_rn(t, t));
			}
			if (first || e < best) first = false, best = e, bz = zi, bs = si;
		}
	}
	*sc = (uint32_t)bs;
	*zc = bz < 0 ? 1u << 9 | (uint32_t)-bz : (uint32_t)bz;
}

/* quantize_kernel: one thread block a key group, head by head. Int4: a
 * thread a channel searches its codes (key4_search) into shared memory,
 * then a thread a byte stores the scale bytes and each token's codes (a
 * pair of channels). Int8: a thread's pair of channels takes its largest
 * magnitudes into shared memory, thread 0 the head's base scale, then each
 * thread its pair's multipliers (one byte) and codes. */
__global__ void quantize_kernel(struct kvs_kv_plane p, const int64_t *groups, uint8_t *const *resid) {
	__shared__ float amax[KVS_MAX_HEAD_DIM];
	__shared__ uint16_t ksc[KVS_MAX_HEAD_DIM], kzc[KVS_MAX_HEAD_DIM];
	__shared__ float base;
	int64_t gi = groups[blockIdx.x], lb;
	int g, lo, gn;
	if (gi < 0 || gi >= (int64_t)p.layers * p.blocks * p.groups) return;
	key_span(p, gi, &lb, &g, &lo, &gn);
	const uint8_t *r = resid[blockIdx.x];
	if (!r) return;
	int D = p.head_dim, cols = (D + 1) / 2;
	uint8_t *data = (uint8_t *)p.data, *scale = (uint8_t *)p.scale;
	if (p.prec == KVS_KV_INT4) {
		int P = (D + 7) / 8;
		for (int h = 0; h < p.kv_heads; h++) {
			int64_t si = key_scale_index(p, lb, h, g);
			uint8_t *row0 = data + lb * p.data_per_block + ((int64_t)h * p.block_size + lo) * p.row_bytes;
			for (int d = threadIdx.x; d < D; d += blockDim.x) {
				uint32_t sc, zc;
				key4_search(p, r, row0, h, gn, d, &sc, &zc);
				ksc[d] = (uint16_t)sc, kzc[d] = (uint16_t)zc;
			}
			__syncthreads();
			uint8_t *m = scale + si;
			for (int d = threadIdx.x; d < D; d += blockDim.x) m[d] = (uint8_t)ksc[d], m[D + d] = (uint8_t)kzc[d];
			for (int b = threadIdx.x; b < P; b += blockDim.x) {
				uint8_t s8 = 0, z8 = 0, z9 = 0;
				for (int d = 8 * b; d < min(8 * b + 8, D); d++) {
					s8 |= (uint8_t)((ksc[d] >> 8 & 1) << (d & 7));
					z8 |= (uint8_t)((kzc[d] >> 8 & 1) << (d & 7));
					z9 |= (uint8_t)((kzc[d] >> 9 & 1) << (d & 7));
				}
				m[2 * D + b] = s8, m[2 * D + P + b] = z8, m[2 * D + 2 * P + b] = z9;
			}
			for (int c = threadIdx.x; c < cols; c += blockDim.x) {
				float z[2], s[2], id[2];
				for (int k = 0; k < 2 && 2 * c + k < D; k++) {
					z[k] = e5m4(kzc[2 * c + k]), s[k] = e5m4(ksc[2 * c + k]);
					id[k] = s[k] != 0 ? __frcp_rn(s[k]) : 0.0f;
				}
				for (int tg = 0; tg < gn; tg++) {
					uint8_t *drow = row0 + (int64_t)tg * p.row_bytes, byte = drow[c];
					for (int k = 0; k < 2 && 2 * c + k < D; k++) {
						float v = h2f(resid_bits(p, r, drow, h, tg, 2 * c + k));
						uint8_t q = (uint8_t)round_unsigned(__fmul_rn(__fsub_rn(v, z[k]), id[k]), 15.0f);
						byte = (uint8_t)((byte & ~(0xf << (4 * k))) | q << (4 * k));
					}
					drow[c] = byte;
				}
			}
			__syncthreads();
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
