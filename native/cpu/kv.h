/* kv.h: decoding one (KV head, token) row of a K/V plane, shared by the
 * attention kernels. Every decode gives the bits engine/kvstore's ReadK and
 * ReadV give. */
#ifndef KVS_KV_H
#define KVS_KV_H

#include "common.h"

/* kvs_fp8 returns OCP E4M3FN byte c's value (NaN for S.1111.111). */
static inline float kvs_fp8(uint8_t c) {
	int e = (c >> 3) & 15, m = c & 7;
	float v;
	if ((c & 0x7f) == 0x7f) return __builtin_nanf("");
	if (e == 0) v = (float)m / 8 * 0x1p-6f;
	else v = (1 + (float)m / 8) * ldexpf(1, e - 7);
	return c & 0x80 ? -v : v;
}

/* kvs_decode_row writes head h, slot t of layer-block lb of plane p into
 * out[head_dim]. resid is the token's key group's residual slot (int8/int4
 * keys only; NULL when the group is quantized). */
static inline void kvs_decode_row(const struct kvs_kv_plane *p, int64_t lb, int h, int t, const uint8_t *resid,
                                  const float *fp8tab, float *out) {
	int D = p->head_dim, B = p->block_size;
	int64_t di = lb * p->data_per_block + (int64_t)(h * B + t) * (p->prec <= KVS_KV_BF16 ? D : p->row_bytes);
	switch (p->prec) {
	case KVS_KV_F32: memcpy(out, (const float *)p->data + di, (size_t)D * 4); return;
	case KVS_KV_F16: {
		const uint16_t *h = (const uint16_t *)p->data + di;
		int d = 0;
#if defined(__F16C__) && defined(__AVX__)
		for (; d + 8 <= D; d += 8) _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + d))));
#endif
		for (; d < D; d++) out[d] = kvs_h2f(h[d]);
		return;
	}
	case KVS_KV_BF16: {
		const uint16_t *h = (const uint16_t *)p->data + di;
		for (int d = 0; d < D; d++) {
			uint32_t o = (uint32_t)h[d] << 16;
			memcpy(out + d, &o, 4);
		}
		return;
	}
	}
	const uint8_t *src = (const uint8_t *)p->data + di;
	if (p->key) {
		int G = p->group, g = t / G;
		if (resid) {
			int64_t ri = (int64_t)(h * G + (t - g * G)) * D;
			if (p->prec == KVS_KV_INT8)
				for (int d = 0; d < D; d++) out[d] = kvs_h2f((uint16_t)(resid[ri + d] << 8 | src[d]));
			else
				for (int d = 0; d < D; d++) out[d] = kvs_h2f(kvs_le16(resid + 2 * (ri + d)));
			return;
		}
		int64_t si = lb * p->scales_per_block + (int64_t)(h * p->groups + g) * D;
		int d = 0;
#if defined(__AVX512F__)
		/* Sixteen channels at a time: the same multiply, then add. */
		for (; d + 16 <= D; d += 16) {
			__m512i q;
			if (p->prec == KVS_KV_INT8) {
				q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + d)));
			} else {
				long long w;
				memcpy(&w, src + d / 2, 8);
				__m128i b = _mm_cvtsi64_si128(w);
				__m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
				q = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
			}
			__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p->scale + si + d)));
			__m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p->zero + si + d)));
			_mm512_storeu_ps(out + d, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), s), m));
		}
#elif defined(__AVX2__)
		for (; d + 8 <= D; d += 8) {
			__m256i q;
			if (p->prec == KVS_KV_INT8) {
				q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + d)));
			} else {
				uint32_t w;
				memcpy(&w, src + d / 2, 4);
				__m128i b = _mm_cvtsi32_si128((int)w);
				__m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
				q = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
			}
			__m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p->scale + si + d)));
			__m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p->zero + si + d)));
			_mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), s), m));
		}
#endif
		for (; d < D; d++) {
			int q = p->prec == KVS_KV_INT8 ? src[d] : (src[d >> 1] >> ((d & 1) * 4)) & 15;
			out[d] = (float)q * kvs_h2f(p->scale[si + d]) + kvs_h2f(p->zero[si + d]);
		}
		return;
	}
	int G = p->group;
	int64_t si = lb * p->scales_per_block + (int64_t)t * p->groups;
	for (int d0 = 0; d0 < D;) {
		int g = (h * D + d0) / G, d1 = (g + 1) * G - h * D;
		if (d1 > D) d1 = D;
		float s = kvs_h2f(p->scale[si + g]);
		switch (p->prec) {
		case KVS_KV_Q8_0:
			for (int d = d0; d < d1; d++) out[d] = (float)(int8_t)src[d] * s;
			break;
		case KVS_KV_FP8:
			for (int d = d0; d < d1; d++) out[d] = fp8tab[src[d]] * s;
			break;
		case KVS_KV_INT8: {
			float m = kvs_h2f(p->zero[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)src[d] * s + m;
			break;
		}
		default: {
			float m = kvs_h2f(p->zero[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)((src[d >> 1] >> ((d & 1) * 4)) & 15) * s + m;
		}
		}
		d0 = d1;
	}
}

#endif
