/* kv.cuh: decoding one value of a K/V plane on the device, as
 * engine/kvstore's ReadK/ReadV do (f16, q8_0, int8 and int4 row planes, and
 * int8/int4 keys per channel with their f16 residual slots). */
#ifndef KVS_CUDA_KV_CUH
#define KVS_CUDA_KV_CUH

#include "common.cuh"

/* kvs_plane_check: see kv.cu. */
int kvs_plane_check(const struct kvs_kv_plane *p);

/* s8f returns an E5M3 scale code's value (the f16 of its bits << 7), z8f
 * an E5M2 zero point's (the f16 of its bits << 8). */
__device__ __forceinline__ float s8f(uint8_t c) { return h2f((uint16_t)(c << 7)); }
__device__ __forceinline__ float z8f(uint8_t c) { return h2f((uint16_t)(c << 8)); }

/* kv_value returns value d of head h, slot t of layer-block lb. */
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
	default:
		return __fadd_rn(__fmul_rn((float)((src[d >> 1] >> ((d & 1) * 4)) & 15), s8f(((const uint8_t *)p.scale)[si])),
		                 z8f(((const uint8_t *)p.zero)[si]));
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

/* key_scale_index returns the index in scale of layer-block lb, head h, key
 * group g's scales: head_dim E5M3 scales (int4), or an E5M3 base and a
 * 4-bit multiplier a channel, 1 + (head_dim+1)/2 bytes (int8). */
__device__ __forceinline__ int64_t key_scale_index(const struct kvs_kv_plane &p, int64_t lb, int h, int g) {
	int per = p.prec == KVS_KV_INT4 ? p.head_dim : 1 + (p.head_dim + 1) / 2;
	return lb * p.scales_per_block + ((int64_t)h * p.groups + g) * per;
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
	const uint8_t *zp = (const uint8_t *)p.zero + key_scale_index(p, lb, h, g);
	return __fadd_rn(__fmul_rn((float)((drow[d >> 1] >> ((d & 1) * 4)) & 15), s8f(sc[d])), z8f(zp[d]));
}

#endif
