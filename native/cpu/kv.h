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

/* kvs_int4_key_bytes is the bytes of one (kv head, key group)'s int4 key
 * metadata: a 9-bit scale code and a 10-bit zero code a channel, as D low
 * bytes of the scales, D low bytes of the zeros, then three planes of one
 * bit a channel (the scales' bit 8, the zeros' bits 8 and 9). */
static inline int kvs_int4_key_bytes(int D) { return 2 * D + 3 * ((D + 7) / 8); }

/* kvs_key_scale_index returns the index in scale of layer-block lb, head h,
 * key group g's scales of a key plane: kvs_int4_key_bytes (int4), or
 * 1 + (head_dim+1)/2 bytes (int8, fp8). */
static inline int64_t kvs_key_scale_index(const struct kvs_kv_plane *p, int64_t lb, int h, int g) {
	int per = p->prec == KVS_KV_INT4 ? kvs_int4_key_bytes(p->head_dim) : 1 + (p->head_dim + 1) / 2;
	return lb * p->scales_per_block + (int64_t)(h * p->groups + g) * per;
}

/* kvs_int4_key_sz decodes channel d's scale s (an f16's bits 14..6) and
 * zero point z (bits 15..6) from int4 key metadata m (head dim D). */
static inline void kvs_int4_key_sz(const uint8_t *m, int D, int d, float *s, float *z) {
	int P = (D + 7) / 8, i = 2 * D + (d >> 3), b = d & 7;
	unsigned s8 = (m[i] >> b) & 1, z8 = (m[i + P] >> b) & 1, z9 = (m[i + 2 * P] >> b) & 1;
	*s = kvs_h2f((uint16_t)((m[d] | s8 << 8) << 6));
	*z = kvs_h2f((uint16_t)((m[D + d] | z8 << 8 | z9 << 9) << 6));
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/* kvs_int4_key_sz16 is kvs_int4_key_sz for channels d..d+15 (d a multiple
 * of 16). */
static inline void kvs_int4_key_sz16(const uint8_t *m, int D, int d, __m512 *s, __m512 *z) {
	int P = (D + 7) / 8, i = 2 * D + d / 8;
	uint16_t b8, z8, z9;
	memcpy(&b8, m + i, 2);
	memcpy(&z8, m + i + P, 2);
	memcpy(&z9, m + i + 2 * P, 2);
	__m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(m + d)));
	__m256i z16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(m + D + d)));
	s16 = _mm256_mask_add_epi16(s16, (__mmask16)b8, s16, _mm256_set1_epi16(256));
	z16 = _mm256_mask_add_epi16(z16, (__mmask16)z8, z16, _mm256_set1_epi16(256));
	z16 = _mm256_mask_add_epi16(z16, (__mmask16)z9, z16, _mm256_set1_epi16(512));
	*s = _mm512_cvtph_ps(_mm256_slli_epi16(s16, 6));
	*z = _mm512_cvtph_ps(_mm256_slli_epi16(z16, 6));
}
#elif defined(__AVX2__)
/* kvs_int4_key_sz8 is kvs_int4_key_sz for channels d..d+7 (d a multiple
 * of 8): the high bits set from their bit planes, then converted exactly. */
static inline void kvs_int4_key_sz8(const uint8_t *m, int D, int d, __m256 *s, __m256 *z) {
	int P = (D + 7) / 8, i = 2 * D + d / 8;
	const __m128i bit = _mm_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128);
	__m128i b8 = _mm_cmpeq_epi16(_mm_and_si128(_mm_set1_epi16(m[i]), bit), bit);
	__m128i z8 = _mm_cmpeq_epi16(_mm_and_si128(_mm_set1_epi16(m[i + P]), bit), bit);
	__m128i z9 = _mm_cmpeq_epi16(_mm_and_si128(_mm_set1_epi16(m[i + 2 * P]), bit), bit);
	__m128i s16 = _mm_or_si128(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(m + d))), _mm_and_si128(b8, _mm_set1_epi16(256)));
	__m128i z16 = _mm_or_si128(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(m + D + d))),
	                           _mm_or_si128(_mm_and_si128(z8, _mm_set1_epi16(256)), _mm_and_si128(z9, _mm_set1_epi16(512))));
	*s = _mm256_cvtph_ps(_mm_slli_epi16(s16, 6));
	*z = _mm256_cvtph_ps(_mm_slli_epi16(z16, 6));
}
#endif

/* kvs_iq4 is int4 values' sixteen levels (llama.cpp's IQ4_NL table): a
 * value is d*kvs_iq4[q], d its group's signed 8-bit scale. */
static const float kvs_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* kvs_wht rotates a head's D values x in place by the orthonormal
 * Walsh-Hadamard transform, in blocks of R = D & -D values (the largest
 * power of two dividing D): butterflies, then one multiply by
 * float(1/sqrt(R)). It is its own inverse; int4 values are stored rotated. */
static inline void kvs_wht(float *x, int D) {
	int R = D & -D;
	float rs = (float)(1.0 / sqrt((double)R));
	for (int b0 = 0; b0 < D; b0 += R) {
		float *y = x + b0;
		for (int h = 1; h < R; h *= 2)
			for (int i = 0; i < R; i += 2 * h)
				for (int j = i; j < i + h; j++) {
					float a = y[j], c = y[j + h];
					y[j] = a + c;
					y[j + h] = a - c;
				}
		for (int j = 0; j < R; j++) y[j] *= rs;
	}
}

/* kvs_int4_vrow writes head h, slot t of layer-block lb of an int4 value
 * plane into out[head_dim] still rotated: d*kvs_iq4[q], one multiply a
 * value (attention weights these and rotates its output once). dtab is
 * kvs_z8's table of the 256 scale bytes, or NULL. */
static inline void kvs_int4_vrow(const struct kvs_kv_plane *p, int64_t lb, int h, int t, const float *dtab, float *out) {
	int D = p->head_dim, G = p->group;
	const uint8_t *src = (const uint8_t *)p->data + lb * p->data_per_block + (int64_t)(h * p->block_size + t) * p->row_bytes;
	const uint8_t *sc8 = (const uint8_t *)p->scale + lb * p->scales_per_block + (int64_t)t * p->groups;
#if defined(__AVX512F__)
	if (D % 32 == 0 && G % 16 == 0) {
		/* Thirty-two values from sixteen bytes: the low and the high
		 * nibbles looked up (permutexvar reads an index's low four bits),
		 * interleaved, then each 16's multiply by its group's scale. */
		const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
		const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
		__m512 tab = _mm512_loadu_ps(kvs_iq4);
		/* Sixteen values' group: g, and r of its G/16 runs of 16 past. */
		int per = G / 16, c = h * D / 16, g = c / per, r = c % per;
		for (int d = 0; d < D; d += 32) {
			__m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + d / 2)));
			__m512 e = _mm512_permutexvar_ps(b, tab), o = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
			float s0 = dtab ? dtab[sc8[g]] : kvs_z8(sc8[g]);
			if (++r == per) r = 0, g++;
			float s1 = dtab ? dtab[sc8[g]] : kvs_z8(sc8[g]);
			if (++r == per) r = 0, g++;
			_mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_set1_ps(s0), _mm512_permutex2var_ps(e, lo, o)));
			_mm512_storeu_ps(out + d + 16, _mm512_mul_ps(_mm512_set1_ps(s1), _mm512_permutex2var_ps(e, hi, o)));
		}
		return;
	}
#endif
	for (int d0 = 0; d0 < D;) {
		int g = (h * D + d0) / G, d1 = (g + 1) * G - h * D;
		if (d1 > D) d1 = D;
		float s = dtab ? dtab[sc8[g]] : kvs_z8(sc8[g]);
		int d = d0;
#if defined(__AVX512F__)
		__m512 sv = _mm512_set1_ps(s), tab = _mm512_loadu_ps(kvs_iq4);
		if (d & 1) out[d] = s * kvs_iq4[(src[d >> 1] >> 4) & 15], d++;
		for (; d + 16 <= d1; d += 16) _mm512_storeu_ps(out + d, _mm512_mul_ps(sv, _mm512_permutexvar_ps(kvs_nibbles16(src + d / 2), tab)));
#elif defined(__AVX2__)
		/* Sixteen values from eight bytes: the nibbles interleaved in
		 * order, each looked up in both halves of the table (vpermps reads
		 * an index's low three bits) and the half chosen by its bit 3. */
		__m256 sv = _mm256_set1_ps(s), t0 = _mm256_loadu_ps(kvs_iq4), t1 = _mm256_loadu_ps(kvs_iq4 + 8);
		if (d & 1) out[d] = s * kvs_iq4[(src[d >> 1] >> 4) & 15], d++;
		for (; d + 16 <= d1; d += 16) {
			__m128i x = _mm_loadl_epi64((const __m128i *)(src + d / 2)), m15 = _mm_set1_epi8(15);
			__m128i c = _mm_unpacklo_epi8(_mm_and_si128(x, m15), _mm_and_si128(_mm_srli_epi16(x, 4), m15));
			for (int u = 0; u < 2; u++) {
				__m256i q = _mm256_cvtepu8_epi32(u ? _mm_srli_si128(c, 8) : c);
				__m256 e = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, q), _mm256_permutevar8x32_ps(t1, q), _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
				_mm256_storeu_ps(out + d + 8 * u, _mm256_mul_ps(sv, e));
			}
		}
#endif
		for (; d < d1; d++) out[d] = s * kvs_iq4[(src[d >> 1] >> ((d & 1) * 4)) & 15];
		d0 = d1;
	}
}

/* kvs_key_group_scales decodes the per-channel scales of head h, key group g
 * of layer-block lb of an int8/int4/fp8 key plane into s[head_dim] and, for
 * int4, the zero points into z[head_dim]: a quantized key is code*s[d]
 * (+ z[d]), the values kvs_decode_row uses. */
static inline void kvs_key_group_scales(const struct kvs_kv_plane *p, int64_t lb, int h, int g, float *s, float *z) {
	const uint8_t *sc = (const uint8_t *)p->scale + kvs_key_scale_index(p, lb, h, g);
	int D = p->head_dim, d = 0;
	if (p->prec == KVS_KV_INT4) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
		for (; d + 16 <= D; d += 16) {
			__m512 sv, zv;
			kvs_int4_key_sz16(sc, D, d, &sv, &zv);
			_mm512_storeu_ps(s + d, sv);
			_mm512_storeu_ps(z + d, zv);
		}
#elif defined(__AVX2__)
		for (; d + 8 <= D; d += 8) {
			__m256 sv, zv;
			kvs_int4_key_sz8(sc, D, d, &sv, &zv);
			_mm256_storeu_ps(s + d, sv);
			_mm256_storeu_ps(z + d, zv);
		}
#endif
		for (; d < D; d++) kvs_int4_key_sz(sc, D, d, s + d, z + d);
		return;
	}
#if defined(__AVX512F__)
	__m512 base = _mm512_set1_ps(kvs_s8(sc[0])), sixteenth = _mm512_set1_ps(1.0f / 16);
	for (; d + 16 <= D; d += 16) {
		__m512 r = _mm512_cvtepi32_ps(_mm512_add_epi32(kvs_nibbles16(sc + 1 + d / 2), _mm512_set1_epi32(1)));
		_mm512_storeu_ps(s + d, _mm512_mul_ps(_mm512_mul_ps(base, r), sixteenth));
	}
#elif defined(__AVX2__)
	__m256 base = _mm256_set1_ps(kvs_s8(sc[0])), sixteenth = _mm256_set1_ps(1.0f / 16);
	for (; d + 8 <= D; d += 8) {
		int32_t w;
		memcpy(&w, sc + 1 + d / 2, 4);
		__m128i x = _mm_cvtsi32_si128(w), m15 = _mm_set1_epi8(15);
		__m128i c = _mm_unpacklo_epi8(_mm_and_si128(x, m15), _mm_and_si128(_mm_srli_epi16(x, 4), m15));
		__m256 r = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_cvtepu8_epi32(c), _mm256_set1_epi32(1)));
		_mm256_storeu_ps(s + d, _mm256_mul_ps(_mm256_mul_ps(base, r), sixteenth));
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
	const uint8_t *sc8 = (const uint8_t *)p->scale;
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
#if defined(__AVX512BW__) && defined(__AVX512VL__)
			/* Sixteen channels at a time: the codes shifted into f16 bits
			 * and converted exactly, then the same multiply and add. */
			for (; d + 16 <= D; d += 16) {
				__m512 q = _mm512_cvtepi32_ps(kvs_nibbles16(src + d / 2)), s, m;
				kvs_int4_key_sz16(sc8 + si, D, d, &s, &m);
				_mm512_storeu_ps(out + d, _mm512_add_ps(_mm512_mul_ps(q, s), m));
			}
#endif
			for (; d < D; d++) {
				float s, m;
				kvs_int4_key_sz(sc8 + si, D, d, &s, &m);
				out[d] = (float)((src[d >> 1] >> ((d & 1) * 4)) & 15) * s + m;
			}
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
	if (p->prec == KVS_KV_INT4) {
		kvs_int4_vrow(p, lb, h, t, NULL, out);
		kvs_wht(out, D);
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
		default: { /* int8 */
			float s = kvs_s8(sc8[si + g]);
			for (int d = d0; d < d1; d++) out[d] = (float)(int8_t)src[d] * s;
		}
		}
		d0 = d1;
	}
}

#endif
