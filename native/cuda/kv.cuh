/* kv.cuh: decoding one value of a K/V plane on the device, as
 * engine/kvstore's ReadK/ReadV do (f16, q8_0, int8 and int4 row planes). */
#ifndef KVS_CUDA_KV_CUH
#define KVS_CUDA_KV_CUH

#include "common.cuh"

/* kvs_plane_check: see kv.cu. */
int kvs_plane_check(const struct kvs_kv_plane *p);

/* kv_value returns value d of head h, slot t of layer-block lb. */
__device__ __forceinline__ float kv_value(const struct kvs_kv_plane &p, int64_t lb, int h, int t, int d) {
	int D = p.head_dim, B = p.block_size;
	if (p.prec == KVS_KV_F16)
		return h2f(((const uint16_t *)p.data)[lb * p.data_per_block + ((int64_t)h * B + t) * D + d]);
	const uint8_t *src = (const uint8_t *)p.data + lb * p.data_per_block + ((int64_t)h * B + t) * p.row_bytes;
	int g = (h * D + d) / p.group;
	int64_t si = lb * p.scales_per_block + (int64_t)t * p.groups + g;
	float s = h2f(p.scale[si]);
	switch (p.prec) {
	/* __fmul_rn, __fadd_rn: no fused multiply-add, for the store's bits */
	case KVS_KV_Q8_0: return __fmul_rn((float)(int8_t)src[d], s);
	case KVS_KV_INT8: return __fadd_rn(__fmul_rn((float)src[d], s), h2f(p.zero[si]));
	default: return __fadd_rn(__fmul_rn((float)((src[d >> 1] >> ((d & 1) * 4)) & 15), s), h2f(p.zero[si]));
	}
}

#endif
