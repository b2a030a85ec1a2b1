/* kv.cuh: decoding one value of a K/V plane on the device, as
 * engine/kvstore's ReadK/ReadV do (f16, q8_0, int8 and int4 row planes, and
 * int8/int4 keys per channel with their f16 residual slots). Int4 is layout
 * v3 (engine/kvstore's doc): keys with 19 bits of scale and zero point a
 * channel, values rotated per head (a Walsh-Hadamard transform) and coded
 * with the IQ4_NL table at a signed 8-bit scale; kv_value returns an int4
 * value still rotated (attention rotates each head's output once, kvs_kv_read
 * each row: wht_rows). */
#ifndef KVS_CUDA_KV_CUH
#define KVS_CUDA_KV_CUH

#include "common.cuh"

/* kvs_plane_check: see kv.cu. */
int kvs_plane_check(const struct kvs_kv_plane *p);

/* s8f returns an E5M3 scale code's value (the f16 of its bits << 7), z8f
 * an E5M2 zero point's (the f16 of its bits << 8). */
__device__ __forceinline__ float s8f(uint8_t c) { return h2f((uint16_t)(c << 7)); }
__device__ __forceinline__ float z8f(uint8_t c) { return h2f((uint16_t)(c << 8)); }

/* iq4_value returns entry q of IQ4_NL's table {-127, -104, -83, -65, -49,
 * -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}, int4 values' codes (times
 * the group's scale d), from four words of its int8 bytes held in
 * registers: a table in constant memory would serialize a warp's lanes
 * reading different entries. */
__device__ __forceinline__ float iq4_value(int q) {
	uint32_t w = q & 8 ? (q & 4 ? 0x71594535u : 0x26190d01u) : (q & 4 ? 0xf6eaddcfu : 0xbfad9881u);
	return (float)(int8_t)(uint8_t)(w >> (8 * (q & 3)));
}

/* kv_value returns value d of head h, slot t of layer-block lb (int4
 * values: rotated, d*T[q]). */
__device__ __forceinline__ float kv_value(const struct kvs_kv_plane &p, int64_t lb, int h, int t, int d) {
	int D = p.head_dim, B = p.block_size;
	if (p.prec == KVS_KV_F16)
		return h2f(((const uint16_t *)p.data)[lb * p.data_per_block + ((int64_t)h * B + t) * D + d]);
	const uint8_t *src = (const uint8_t *)p.data + lb * p.data_per_block + ((int64_t)h * B + t) * p.row_bytes;
	int g = (h * D + d) / p.group;
	int64_t si = lb * p.scales_per_block + (int64_t)t * p.groups + g;
	switch (p.prec) {
	/* __fmul_rn, __fadd_rn: no fused multiply-add, for the store's bits */
	case KVS_KV_Q8_0: return __fmul_rn((float)(int8_t)src[d], h2f(((const uint16_t *)p.scale)[si]));
	case KVS_KV_INT8: return __fmul_rn((float)(int8_t)src[d], s8f(((const uint8_t *)p.scale)[si]));
	default: /* int4: the signed scale is the top byte of an f16 */
		return __fmul_rn(z8f(((const uint8_t *)p.scale)[si]), iq4_value((src[d >> 1] >> ((d & 1) * 4)) & 15));
	}
}

/* resid_bits returns the f16 bits of head h, token tg of its key group, dim
 * d, held in residual slot r (int8 keys: the high byte there, the low byte
 * in data at the token's row drow). */
__device__ __forceinline__ uint16_t resid_bits(const struct kvs_kv_plane &p, const uint8_t *r, const uint8_t *drow, int h,
                                               int tg, int d) {
	int64_t ri = (int64_t)(h * p.group + tg) * p.head_dim + d;
	if (p.prec == KVS_KV_INT8) return (uint16_t)(r[ri] << 8 | drow[d]);
	return (uint16_t)(r[2 * ri] | r[2 * ri + 1] << 8);
}

/* key_meta_bytes returns the scale bytes of one (head, key group) of a
 * key plane of precision prec: for int4 2*D + 3*ceil(D/8) (a channel's
 * 9-bit scale code and 10-bit zero code: their low bytes, then bit planes of
 * the scales' bit 8, the zeros' bit 8 and the zeros' sign), for int8 an
 * E5M3 base and a 4-bit multiplier a channel, 1 + (D+1)/2. */
__host__ __device__ __forceinline__ int64_t key_meta_bytes(int32_t prec, int D) {
	return prec == KVS_KV_INT4 ? 2 * D + 3 * ((D + 7) / 8) : 1 + (D + 1) / 2;
}

/* key_scale_index returns the index in scale of layer-block lb, head h, key
 * group g's scale bytes (key_meta_bytes). */
__device__ __forceinline__ int64_t key_scale_index(const struct kvs_kv_plane &p, int64_t lb, int h, int g) {
	return lb * p.scales_per_block + ((int64_t)h * p.groups + g) * key_meta_bytes(p.prec, p.head_dim);
}

/* e5m4 returns an int4 key's scale or zero code's value: the f16 of its
 * bits << 6 (a zero code's bit 9 is the sign). */
__device__ __forceinline__ float e5m4(uint32_t c) { return h2f((uint16_t)(c << 6)); }

/* key4_codes returns channel d's 9-bit scale code and 10-bit zero code of
 * int4 keys whose (head, group) scale bytes start at m (key_meta_bytes). */
__device__ __forceinline__ void key4_codes(const uint8_t *m, int D, int d, uint32_t *sc, uint32_t *zc) {
	int P = (D + 7) / 8, b = d >> 3, s = d & 7;
	*sc = m[d] | (uint32_t)(m[2 * D + b] >> s & 1) << 8;
	*zc = m[D + d] | (uint32_t)(m[2 * D + P + b] >> s & 1) << 8 | (uint32_t)(m[2 * D + 2 * P + b] >> s & 1) << 9;
}

/* key_scale returns channel d's scale of int8 keys whose scale bytes start
 * at sc: base*(multiplier+1)/16, exact. */
__device__ __forceinline__ float key_scale(const uint8_t *sc, int d) {
	return __fmul_rn(__fmul_rn(s8f(sc[0]), (float)(((sc[1 + (d >> 1)] >> ((d & 1) * 4)) & 15) + 1)), 1.0f / 16);
}

/* key_value is kv_value for any key plane: for int8/int4 keys (p.key) the
 * value per channel, or from resid, the residual slot of the token's key
 * group when it is not yet quantized (NULL when it is). */
__device__ __forceinline__ float key_value(const struct kvs_kv_plane &p, int64_t lb, int h, int t, int d,
                                           const uint8_t *resid) {
	if (!p.key) return kv_value(p, lb, h, t, d);
	int g = t / p.group;
	const uint8_t *drow = (const uint8_t *)p.data + lb * p.data_per_block + ((int64_t)h * p.block_size + t) * p.row_bytes;
	if (resid) return h2f(resid_bits(p, resid, drow, h, t - g * p.group, d));
	const uint8_t *sc = (const uint8_t *)p.scale + key_scale_index(p, lb, h, g);
	if (p.prec == KVS_KV_INT8) return __fmul_rn((float)(int8_t)drow[d], key_scale(sc, d));
	uint32_t s, z;
	key4_codes(sc, p.head_dim, d, &s, &z);
	return __fadd_rn(__fmul_rn((float)((drow[d >> 1] >> ((d & 1) * 4)) & 15), e5m4(s)), e5m4(z));
}

/* wht_size returns the rotation's block of int4 values of heads of D: the
 * largest power of two dividing D; wht_scale its 1/sqrt(R), rounded once
 * from double (engine/kvstore's). */
__host__ __device__ __forceinline__ int wht_size(int D) { return D & -D; }
__host__ __device__ __forceinline__ float wht_scale(int R) { return (float)(1.0 / sqrt((double)R)); }

/* wht_rows rotates x[0..n) (n a multiple of R) in place, in blocks of R
 * consecutive values, as engine/kvstore rotates int4 values: the
 * unnormalized Walsh-Hadamard butterflies (a+b, a-b), stage by stage, then
 * every value times rs; its own inverse. Every thread of the block calls
 * it; each stage's pairs are independent, so a thread a pair gives the
 * store's bits. x is in shared or global memory. */
__device__ __forceinline__ void wht_rows(float *x, int n, int R, float rs) {
	for (int h = 1; h < R; h *= 2) {
		for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
			int w = i % (R / 2), j = i / (R / 2) * R + w / h * 2 * h + w % h;
			float a = x[j], b = x[j + h];
			x[j] = __fadd_rn(a, b), x[j + h] = __fsub_rn(a, b);
		}
		__syncthreads();
	}
	for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = __fmul_rn(x[i], rs);
	__syncthreads();
}

#endif
