/* simd.h: the few primitives whose speed matters, each with a scalar
 * definition and SIMD versions chosen by the flags the including file is
 * compiled with (one compilation per path). Integer primitives are exact,
 * and the float ones keep the scalar lane order, so every path returns the
 * same bits. */
#ifndef KVS_SIMD_H
#define KVS_SIMD_H

#include "common.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* --- float dot products: element j in lane j%16, summed by kvs_lane_sum16.
 * Kinds of weights: 0 f32, 1 f16 bits, 2 bf16 bits. */

static inline float kvs_w_at(const void *w, int kind, int64_t i) {
	switch (kind) {
	case 0: return ((const float *)w)[i];
	case 1: return kvs_h2f(((const uint16_t *)w)[i]);
	default: return kvs_bf2f(((const uint16_t *)w)[i]);
	}
}

static inline float dot_scalar(const void *w, int kind, const float *x, int64_t n) {
	float acc[16] = {0};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int l = 0; l < 16; l++) acc[l] += kvs_w_at(w, kind, i + l) * x[i + l];
	if (i < n)
		for (int l = 0; l < 16; l++) acc[l] += i + l < n ? kvs_w_at(w, kind, i + l) * x[i + l] : 0.0f;
	return kvs_lane_sum16(acc);
}

#if defined(__AVX2__)
static inline __m256 load8(const void *w, int kind, int64_t i) {
	switch (kind) {
	case 0: return _mm256_loadu_ps((const float *)w + i);
	case 1: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
	default:
		return _mm256_castsi256_ps(
		    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i))), 16));
	}
}

/* sum8 sums lanes of v as (l, l+4), (l, l+2), (l, l+1). */
static inline float sum8(__m256 v) {
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
	return _mm_cvtss_f32(a);
}
#endif

#if defined(__AVX512F__)
static inline __m512 load16(const void *w, int kind, int64_t i) {
	switch (kind) {
	case 0: return _mm512_loadu_ps((const float *)w + i);
	case 1: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
	default:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i))), 16));
	}
}

/* dot_any: AVX-512, one register of 16 lanes. */
static inline float dot_any(const void *w, int kind, const float *x, int64_t n) {
	__m512 a = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) a = _mm512_add_ps(a, _mm512_mul_ps(load16(w, kind, i), _mm512_loadu_ps(x + i)));
	if (i < n) {
		float tw[16] = {0}, tx[16] = {0};
		for (int64_t j = i; j < n; j++) tw[j - i] = kvs_w_at(w, kind, j), tx[j - i] = x[j];
		a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_loadu_ps(tw), _mm512_loadu_ps(tx)));
	}
	__m256 lo = _mm512_castps512_ps256(a);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
	return sum8(_mm256_add_ps(lo, hi));
}
#elif defined(__AVX2__)
/* dot_any: AVX2, two registers of 8 lanes (lanes 0-7 and 8-15). */
static inline float dot_any(const void *w, int kind, const float *x, int64_t n) {
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		a0 = _mm256_add_ps(a0, _mm256_mul_ps(load8(w, kind, i), _mm256_loadu_ps(x + i)));
		a1 = _mm256_add_ps(a1, _mm256_mul_ps(load8(w, kind, i + 8), _mm256_loadu_ps(x + i + 8)));
	}
	if (i < n) {
		float tw[16] = {0}, tx[16] = {0};
		for (int64_t j = i; j < n; j++) tw[j - i] = kvs_w_at(w, kind, j), tx[j - i] = x[j];
		a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(tw), _mm256_loadu_ps(tx)));
		a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(tw + 8), _mm256_loadu_ps(tx + 8)));
	}
	return sum8(_mm256_add_ps(a0, a1));
}
#elif defined(__ARM_NEON)
/* dot_any: NEON, four registers of 4 lanes (lanes 0-3, 4-7, 8-11, 12-15). */
static inline float dot_any(const void *w, int kind, const float *x, int64_t n) {
	if (kind != 0) return dot_scalar(w, kind, x, n);
	const float *wf = (const float *)w;
	float32x4_t a[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int k = 0; k < 4; k++) a[k] = vaddq_f32(a[k], vmulq_f32(vld1q_f32(wf + i + 4 * k), vld1q_f32(x + i + 4 * k)));
	float acc[16];
	for (int k = 0; k < 4; k++) vst1q_f32(acc + 4 * k, a[k]);
	if (i < n)
		for (int l = 0; l < 16; l++) acc[l] += i + l < n ? wf[i + l] * x[i + l] : 0.0f;
	return kvs_lane_sum16(acc);
}
#else
static inline float dot_any(const void *w, int kind, const float *x, int64_t n) { return dot_scalar(w, kind, x, n); }
#endif

/* --- exact integer dot products of 8-bit codes. */

#if defined(__AVX2__)
static inline int32_t hsum_i32(__m256i v) {
	__m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	a = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
	a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 1));
	return _mm_cvtsi128_si32(a);
}
/* dot_u8s8_v: sum of u*s over 32 bytes, as int32 lanes (u < 128). */
static inline __m256i dot_u8s8_v(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
#endif

/* dot_s8s8_32 returns sum a[i]*b[i] over 32 int8 (b within ±127). */
static inline int32_t dot_s8s8_32(const int8_t *a, const int8_t *b) {
#if defined(__AVX2__)
	__m256i va = _mm256_loadu_si256((const __m256i *)a), vb = _mm256_loadu_si256((const __m256i *)b);
	return hsum_i32(dot_u8s8_v(_mm256_sign_epi8(va, va), _mm256_sign_epi8(vb, va)));
#elif defined(__ARM_NEON)
	int16x8_t p0 = vmull_s8(vld1_s8(a), vld1_s8(b));
	p0 = vmlal_s8(p0, vld1_s8(a + 8), vld1_s8(b + 8));
	int16x8_t p1 = vmull_s8(vld1_s8(a + 16), vld1_s8(b + 16));
	p1 = vmlal_s8(p1, vld1_s8(a + 24), vld1_s8(b + 24));
	return vaddvq_s32(vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)));
#else
	int32_t s = 0;
	for (int i = 0; i < 32; i++) s += a[i] * b[i];
	return s;
#endif
}

/* dot_u8s8_32 returns sum u[i]*s[i] over 32 codes u < 64. */
static inline int32_t dot_u8s8_32(const uint8_t *u, const int8_t *s) {
#if defined(__AVX2__)
	return hsum_i32(dot_u8s8_v(_mm256_loadu_si256((const __m256i *)u), _mm256_loadu_si256((const __m256i *)s)));
#else
	int32_t r = 0;
	for (int i = 0; i < 32; i++) r += u[i] * s[i];
	return r;
#endif
}

/* dot_nib32 returns sum over j<16 of lo(qs[j])*s[j] + hi(qs[j])*s[j+16]:
 * a Q4_0/Q4_1 block's codes times an activation block's. */
static inline int32_t dot_nib32(const uint8_t *qs, const int8_t *s) {
#if defined(__AVX2__)
	__m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
	__m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
	return hsum_i32(dot_u8s8_v(u, _mm256_loadu_si256((const __m256i *)s)));
#else
	int32_t r = 0;
	for (int j = 0; j < 16; j++) r += (qs[j] & 15) * s[j] + (qs[j] >> 4) * s[j + 16];
	return r;
#endif
}

/* dot_u8s8_256_sc returns sum u[i]*s[i]*sc[i/16] over 256 codes u < 64,
 * |sc| < 128: a K-quant super-block's codes times its sub-block scales. */
static inline int32_t dot_u8s8_256_sc(const uint8_t *u, const int8_t *s, const int16_t *sc) {
#if defined(__AVX512BW__)
	__m512i acc = _mm512_setzero_si512();
	__m512i scv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)sc));
	for (int k = 0; k < 4; k++) {
		/* int16 lane i of this 64-byte chunk covers bytes 2i, 2i+1: group 4k + i/8. */
		__m512i idx = _mm512_set_epi16(4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3,
		                               4 * k + 3, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2,
		                               4 * k + 2, 4 * k + 2, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1,
		                               4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k,
		                               4 * k);
		__m512i p = _mm512_maddubs_epi16(_mm512_loadu_si512(u + 64 * k), _mm512_loadu_si512(s + 64 * k));
		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_permutexvar_epi16(idx, scv)));
	}
	return _mm512_reduce_add_epi32(acc);
#elif defined(__AVX2__)
	__m256i acc = _mm256_setzero_si256();
	for (int k = 0; k < 8; k++) {
		__m256i p = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(u + 32 * k)),
		                                 _mm256_loadu_si256((const __m256i *)(s + 32 * k)));
		__m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
	}
	return hsum_i32(acc);
#else
	int32_t r = 0;
	for (int g = 0; g < 16; g++) {
		int32_t t = 0;
		for (int i = 0; i < 16; i++) t += u[16 * g + i] * s[16 * g + i];
		r += t * sc[g];
	}
	return r;
#endif
}

#endif
