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
#if defined(__ARM_NEON) && !defined(KVS_SCALAR)
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

/* kvs_expf8 is common.h's kvs_expf in eight lanes: the same operations in
 * the same order, so each lane has kvs_expf's bits (max(-87, x) then
 * min(88, .) keep a NaN, as the scalar clamp does). */
static inline __m256 kvs_expf8(__m256 x) {
	x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
	__m256 big = _mm256_set1_ps(12582912.0f);
	__m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), big), big);
	__m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f))), _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
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
#elif defined(__ARM_NEON) && !defined(KVS_SCALAR)
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

/* dot_any4 computes dot_any(w, kind, x[v], n) for four vectors, reading w
 * once: out[v] gets the same bits as dot_any would. */
static inline void dot_any4(const void *w, int kind, const float *const *x, int64_t n, float *out) {
#if defined(__AVX512F__)
	__m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 wv = load16(w, kind, i);
		for (int v = 0; v < 4; v++) a[v] = _mm512_add_ps(a[v], _mm512_mul_ps(wv, _mm512_loadu_ps(x[v] + i)));
	}
	for (int v = 0; v < 4; v++) {
		if (i < n) {
			float tw[16] = {0}, tx[16] = {0};
			for (int64_t j = i; j < n; j++) tw[j - i] = kvs_w_at(w, kind, j), tx[j - i] = x[v][j];
			a[v] = _mm512_add_ps(a[v], _mm512_mul_ps(_mm512_loadu_ps(tw), _mm512_loadu_ps(tx)));
		}
		__m256 lo = _mm512_castps512_ps256(a[v]);
		__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[v]), 1));
		out[v] = sum8(_mm256_add_ps(lo, hi));
	}
#elif defined(__AVX2__)
	__m256 a[4][2];
	for (int v = 0; v < 4; v++) a[v][0] = a[v][1] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 w0 = load8(w, kind, i), w1 = load8(w, kind, i + 8);
		for (int v = 0; v < 4; v++) {
			a[v][0] = _mm256_add_ps(a[v][0], _mm256_mul_ps(w0, _mm256_loadu_ps(x[v] + i)));
			a[v][1] = _mm256_add_ps(a[v][1], _mm256_mul_ps(w1, _mm256_loadu_ps(x[v] + i + 8)));
		}
	}
	for (int v = 0; v < 4; v++) {
		if (i < n) {
			float tw[16] = {0}, tx[16] = {0};
			for (int64_t j = i; j < n; j++) tw[j - i] = kvs_w_at(w, kind, j), tx[j - i] = x[v][j];
			a[v][0] = _mm256_add_ps(a[v][0], _mm256_mul_ps(_mm256_loadu_ps(tw), _mm256_loadu_ps(tx)));
			a[v][1] = _mm256_add_ps(a[v][1], _mm256_mul_ps(_mm256_loadu_ps(tw + 8), _mm256_loadu_ps(tx + 8)));
		}
		out[v] = sum8(_mm256_add_ps(a[v][0], a[v][1]));
	}
#else
	for (int v = 0; v < 4; v++) out[v] = dot_any(w, kind, x[v], n);
#endif
}

/* --- exact integer products of 8-bit codes, as eight int32 lane sums: lane
 * m of a 32-code block sums codes 4m..4m+3 (the layout of x86's
 * maddubs+madd and VNNI's dpbusd). GCC vector types carry them, so the
 * scalar path runs the same lane arithmetic on baseline SIMD. */

typedef int8_t kvs_b32 __attribute__((vector_size(32)));
typedef uint8_t kvs_u32 __attribute__((vector_size(32)));
typedef int32_t kvs_i8 __attribute__((vector_size(32)));
typedef float kvs_f8 __attribute__((vector_size(32)));

/* load32 reads 32 bytes. */
static inline kvs_u32 load32(const void *p) {
	kvs_u32 v;
	memcpy(&v, p, 32);
	return v;
}

/* unpack_nib returns a Q4 block's 32 codes: lo(qs[j]) at j, hi(qs[j]) at j+16. */
static inline kvs_u32 unpack_nib(const uint8_t *qs) {
#if defined(__AVX2__)
	__m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
	return (kvs_u32)_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
#else
	kvs_u32 u;
	for (int j = 0; j < 16; j++) u[j] = qs[j] & 15, u[j + 16] = qs[j] >> 4;
	return u;
#endif
}

#if defined(__AVX2__)
/* lanes_v: the lane sums of u*q as AVX2 registers (u < 128, |q| <= 127). */
static inline __m256i lanes_v(__m256i u, __m256i q) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
#else
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
#endif
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* dp512 adds, to each int32 lane of acc, the four products of unsigned
 * bytes u and signed bytes a in it (the packed kernels): vpdpbusd with
 * VNNI; without, vpmaddubsw's int16 pairs must not saturate (u < 128, or
 * the caller makes them fit). */
static inline __m512i dp512(__m512i acc, __m512i u, __m512i a) {
#if defined(__AVX512VNNI__)
	return _mm512_dpbusd_epi32(acc, u, a);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, a), _mm512_set1_epi16(1)));
#endif
}

/* X16 is set where a nibble type's high nibbles can be used in place, as
 * 16 times the code (one mask a chunk instead of a shift and a mask; the
 * sum shifted back once): vpdpbusd sums them exactly in int32, where
 * vpmaddubsw's int16 pairs would saturate (2 · 240 · 127). */
#if defined(__AVX512VNNI__)
#define X16 1
#else
#define X16 0
#endif

/* dp512b is dp512 with the int32 at q in every lane: with VNNI one
 * vpdpbusd that loads it itself ({1to16}; GCC emits a vpbroadcastd of its
 * own for each, one more instruction a product). */
static inline __attribute__((always_inline)) __m512i dp512b(__m512i acc, __m512i u, const int8_t *q) {
#if defined(__AVX512VNNI__)
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)q));
	return acc;
#else
	int32_t v;
	memcpy(&v, q, 4);
	return dp512(acc, u, _mm512_set1_epi32(v));
#endif
}
#endif

/* lanes_u8s8 returns the lane sums of u*q (codes u < 128, q within ±127). */
static inline kvs_i8 lanes_u8s8(kvs_u32 u, const int8_t *q) {
#if defined(__AVX2__)
	return (kvs_i8)lanes_v((__m256i)u, _mm256_loadu_si256((const __m256i *)q));
#else
	kvs_i8 r;
	for (int m = 0; m < 8; m++) {
		int32_t s = 0;
		for (int e = 4 * m; e < 4 * m + 4; e++) s += u[e] * q[e];
		r[m] = s;
	}
	return r;
#endif
}

/* lanes_s8s8 returns the lane sums of a*q (int8 codes a, q within ±127). */
static inline kvs_i8 lanes_s8s8(kvs_b32 a, const int8_t *q) {
#if defined(__AVX2__)
	__m256i va = (__m256i)a, vq = _mm256_loadu_si256((const __m256i *)q);
	return (kvs_i8)lanes_v(_mm256_sign_epi8(va, va), _mm256_sign_epi8(vq, va));
#else
	kvs_i8 r;
	for (int m = 0; m < 8; m++) {
		int32_t s = 0;
		for (int e = 4 * m; e < 4 * m + 4; e++) s += a[e] * q[e];
		r[m] = s;
	}
	return r;
#endif
}

/* lanes_k returns, for 256 codes u < 64 with a scale per 16 (|sc| < 128),
 * lane m = sum over chunks k < 8 of codes 32k+4m..32k+4m+3 times their
 * activation codes and scale. */
static inline kvs_i8 lanes_k(const uint8_t *u, const int8_t *q, const int16_t *sc) {
#if defined(__AVX2__)
	__m256i acc = _mm256_setzero_si256();
	for (int k = 0; k < 8; k++) {
		__m256i p = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(u + 32 * k)),
		                                 _mm256_loadu_si256((const __m256i *)(q + 32 * k)));
		__m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
	}
	return (kvs_i8)acc;
#else
	kvs_i8 r = {0};
	for (int k = 0; k < 8; k++)
		for (int m = 0; m < 8; m++) {
			int32_t s = 0;
			for (int e = 32 * k + 4 * m; e < 32 * k + 4 * m + 4; e++) s += u[e] * q[e];
			r[m] += s * sc[(32 * k + 4 * m) / 16];
		}
	return r;
#endif
}

/* lane_sum8 sums eight lanes as (l, l+4), (l, l+2), (l, l+1). */
static inline float lane_sum8(kvs_f8 v) {
	float a[8];
	memcpy(a, &v, 32);
	for (int s = 4; s >= 1; s >>= 1)
		for (int l = 0; l < s; l++) a[l] += a[l + s];
	return a[0];
}

#endif
