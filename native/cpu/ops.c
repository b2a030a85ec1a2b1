/* ops.c: one path's function table, compiled once per path. */
#include "simd.h"

int KVS_FN(kvs_quantize_acts)(uint32_t, const float *, int64_t, int64_t, void *);
int KVS_FN(kvs_matmul)(uint32_t, const void *, int64_t, int64_t, int64_t, int64_t, const float *, const void *,
                       int64_t, float *);
int KVS_FN(kvs_matmul_packed)(uint32_t, const void *, int64_t, int64_t, int64_t, int64_t, const void *, int64_t,
                              float *);
int KVS_FN(kvs_rmsnorm)(float *, const float *, const float *, int64_t, int64_t, float);
int KVS_FN(kvs_rope)(float *, int64_t, int64_t, int64_t, int64_t, const int32_t *, float, float, const float *, int);
int KVS_FN(kvs_swiglu)(float *, const float *, const float *, int64_t);
int KVS_FN(kvs_add)(float *, const float *, int64_t);
int KVS_FN(kvs_attention)(const struct kvs_kv_plane *, const struct kvs_kv_plane *, int32_t, int64_t, int32_t, int32_t, int32_t, int32_t, float,
                          const float *, const int32_t *, const int32_t *, const int64_t *, const uint8_t *const *,
                          float *, float *);

/* sum64 adds n 64-bit words (modulo 2^64) with the path's widest loads and
 * four independent sums: a memory read as fast as this core reads. */
static uint64_t KVS_FN(sum64)(const uint64_t *p, int64_t n) {
	int64_t i = 0;
	uint64_t s = 0;
#if defined(__AVX512F__)
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	for (; i + 32 <= n; i += 32) {
		a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
		a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
		a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
		a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
	}
	s = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
#elif defined(__AVX2__)
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (; i + 16 <= n; i += 16) {
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
	}
	__m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	uint64_t l[4];
	_mm256_storeu_si256((__m256i *)l, a);
	s = l[0] + l[1] + l[2] + l[3];
#else
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (; i + 4 <= n; i += 4) {
		uint64_t w[4];
		memcpy(w, p + i, 32);
		s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
	}
	s = s0 + s1 + s2 + s3;
#endif
	for (; i < n; i++) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		s += w;
	}
	return s;
}

const struct kvs_ops KVS_CAT(kvs_ops, KVS_SUFFIX) = {
    KVS_FN(kvs_quantize_acts), KVS_FN(kvs_matmul), KVS_FN(kvs_matmul_packed), KVS_FN(kvs_rmsnorm),
    KVS_FN(kvs_rope),          KVS_FN(kvs_swiglu), KVS_FN(kvs_add),           KVS_FN(kvs_attention),
    KVS_FN(sum64),
};
