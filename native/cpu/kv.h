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

/* kvs_s8 returns an E5M3 scale code's value (the f16 of its bits << 7);
 * kvs_z8 an E5M2 zero point's (the f16 of its bits << 8). */
static inline float kvs_s8(uint8_t c) { return kvs_h2f((uint16_t)(c << 7)); }
static inline float kvs_z8(uint8_t c) { return kvs_h2f((uint16_t)(c << 8)); }

/* kvs_key_scale returns channel d's scale of symmetric keys (int8, fp8)
 * whose (kv_head, key group) scale bytes start at sc: the E5M3 base times
 * (the channel's 4-bit multiplier + 1)/16, exact. */
static inline float kvs_key_scale(const uint8_t *sc, int d) {
	return kvs_s8(sc[0]) * (float)(((sc[1 + (d >> 1)] >> ((d & 1) * 4)) & 15) + 1) * (1.0f / 16);
}

#if defined(__AVX512F__)
/* kvs_nibbles16 returns the sixteen 4-bit codes of the eight bytes at b
 * (an even index in its byte's low nibble) as 32-bit integers. */
static inline __m512i kvs_nibbles16(const uint8_t *b) {
	long long w;
	memcpy(&w, b, 8);
	__m128i x = _mm_cvtsi64_si128(w), m15 = _mm_set1_epi8(15);
	return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(_mm_and_si128(x, m15), _mm_and_si128(_mm_srli_epi16(x, 4), m15)));
}
#endif

/* kvs_key_scale_index returns the index in scale of layer-block lb, head h,
 * key group g's scales of a key plane: head_dim E5M3 scales (int4), or
 * 1 + (head_dim+1)/2 bytes (int8, fp8). */
static inline int64_t kvs_key_scale_index(const struct kvs_kv_plane *p, int64_t lb, int h, int g) {
	int per = p->prec == KVS_KV_INT4 ? p->head_dim : 1 + (p->head_dim + 1) / 2;
	return lb * p->scales_per_block + (int64_t)(h * p->groups + g) * per;
}

/* kvs_key_group_scales decodes the per-channel scales of head h, key group g
 * of layer-block lb of an int8/int4/fp8 key plane into s[head_dim] and, for
 * int4, the zero points into z[head_dim]: a quantized key is code*s[d]
 * (+ z[d]), the values kvs_decode_row uses. */
static inline void kvs_key_group_scales(const struct kvs_kv_plane *p, int64_t lb, int h, int g, float *s, float *z) {
	const uint8_t *sc = (const uint8_t *)p->scale + kvs_key_scale_index(p, lb, h, g);
	int D = p->head_dim, d = 0;
	if (p->prec == KVS_KV_INT4) {
		const uint8_t *zp = (const uint8_t *)p->zero + kvs_key_scale_index(p, lb, h, g);
#if defined(__AVX512F__)
		for (; d + 16 <= D; d += 16) {
			__m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(sc + d)));
			__m256i z16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(zp + d)));
			_mm512_storeu_ps(s + d, _mm512_cvtph_ps(_mm256_slli_epi16(s16, 7)));
			_mm512_storeu_ps(z + d, _mm512_cvtph_ps(_mm256_slli_epi16(z16, 8)));
		}
#endif
		for (; d < D; d++) s[d] = kvs_s8(sc[d]), z[d] = kvs_z8(zp[d]);
		return;
	}
#if defined(__AVX512F__)
	__m512 base = _mm512_set1_ps(kvs_s8(sc[0])), sixteenth = _mm512_set1_ps(1.0f / 16);
	for (; d + 16 <= D; d += 16) {
		__m512 r = _mm512_cvtepi32_ps(_mm512_add_epi32(kvs_nibbles16(sc + 1 + d / 2), _mm512_set1_epi32(1)));
		_mm512_storeu_ps(s + d, _mm512_mul_ps(_mm512_mul_ps(base, r), sixteenth));
	}
#endif
	for (; d < D; d++) s[d] = kvs_key_scale(sc, d);
}

/* kvs_byte_resid: int8 and fp8 keys keep only the high byte of each f16
 * residual value in the slot, the low byte in data. */
static inline int kvs_byte_resid(const struct kvs_kv_plane *p) { return p->prec == KVS_KV_INT8 || p->prec == KVS_KV_FP8; }

/* kvs_decode_row writes head h, slot t of layer-block lb of plane p into
 * out[head_dim]. resid is the token's key group's residual slot (int8/int4/
 * fp8 keys only; NULL when the group is quantized). fp8tab is kvs_fp8's
 * table, or NULL (then kvs_fp8 is called). */
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
	const uint8_t *sc8 = (const uint8_t *)p->scale, *z8 = (const uint8_t *)p->zero;
	if (p->key) {
		int G = p->group, g = t / G;
		if (resid) {
			int64_t ri = (int64_t)(h * G + (t - g * G)) * D;
			if (kvs_byte_resid(p))
				for (int d = 0; d < D; d++) out[d] = kvs_h2f((uint16_t)(resid[ri + d] << 8 | src[d]));
			else
				for (int d = 0; d < D; d++) out[d] = kvs_h2f(kvs_le16(resid + 2 * (ri + d)));
			return;
		}
		int64_t si = kvs_key_scale_index(p, lb, h, g);
		if (p->prec == KVS_KV_INT4) {
			int d = 0;
#if defined(__AVX512F__)
			/* Sixteen channels at a time: the 8-bit codes shifted into f16
			 * bits and converted exactly, then the same multiply and add. */
			for (; d + 16 <= D; d += 16) {
				__m512 q = _mm512_cvtepi32_ps(kvs_nibbles16(src + d / 2));
				__m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(sc8 + si + d)));
				__m256i z16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(z8 + si + d)));
				__m512 s = _mm512_cvtph_ps(_mm256_slli_epi16(s16, 7)), m = _mm512_cvtph_ps(_mm256_slli_epi16(z16, 8));
				_mm512_storeu_ps(out + d, _mm512_add_ps(_mm512_mul_ps(q, s), m));
			}
#endif
			for (; d < D; d++)
				out[d] = (float)((src[d >> 1] >> ((d & 1) * 4)) & 15) * kvs_s8(sc8[si + d]) + kvs_z8(z8[si + d]);
			return;
		}
		const uint8_t *sc = sc8 + si;
		int d = 0;
#if defined(__AVX512F__)
		/* Sixteen channels at a time: the same exact scales, then one
		 * multiply a value. */
		{
			__m512 base = _mm512_set1_ps(kvs_s8(sc[0])), sixteenth = _mm512_set1_ps(1.0f / 16);
			for (; d + 16 <= D; d += 16) {
				__m512 r = _mm512_cvtepi32_ps(_mm512_add_epi32(kvs_nibbles16(sc + 1 + d / 2), _mm512_set1_epi32(1)));
				__m512 s = _mm512_mul_ps(_mm512_mul_ps(base, r), sixteenth);
				__m512 q;
				if (p->prec == KVS_KV_INT8) {
					q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + d))));
				} else {
					float tmp[16];
					for (int i = 0; i < 16; i++) tmp[i] = fp8tab ? fp8tab[src[d + i]] : kvs_fp8(src[d + i]);
					q = _mm512_loadu_ps(tmp);
				}
				_mm512_storeu_ps(out + d, _mm512_mul_ps(q, s));
			}
		}
#endif
		for (; d < D; d++) {
			float q = p->prec == KVS_KV_INT8 ? (float)(int8_t)src[d] : fp8tab ? fp8tab[src[d]] : kvs_fp8(src[d]);
			out[d] = q * kvs_key_scale(sc, d);
		}
		return;
	}
	int G = p->group;
	int64_t si = lb * p->scales_per_block + (int64_t)t * p->groups;
	for (int d0 = 0; d0 < D;) {
		int g = (h * D + d0) / G, d1 = (g + 1) * G - h * D;
		if (d1 > D) d1 = D;
		switch (p->prec) {
		case KVS_KV_Q8_0: {
			float s = kvs_h2f(((const uint16_t *)p->scale)[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)(int8_t)src[d] * s;
			break;
		}
		case KVS_KV_FP8: {
			float s = kvs_s8(sc8[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (fp8tab ? fp8tab[src[d]] : kvs_fp8(src[d])) * s;
			break;
		}
		case KVS_KV_INT8: {
			float s = kvs_s8(sc8[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)(int8_t)src[d] * s;
			break;
		}
		default: {
			float s = kvs_s8(sc8[si + g]), m = kvs_z8(z8[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)((src[d >> 1] >> ((d & 1) * 4)) & 15) * s + m;
		}
		}
		d0 = d1;
	}
}

#endif
