/* common.h: what the per-path kernel files share: the function table each
 * path fills, half/bf16 conversions, and the activation block layouts. */
#ifndef KVS_COMMON_H
#define KVS_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../include/kvscope.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

/* Each kernel file is compiled once per path with KVS_SUFFIX set to the
 * path's name; KVS_FN gives its functions distinct names. */
#define KVS_CAT2(a, b) a##_##b
#define KVS_CAT(a, b) KVS_CAT2(a, b)
#define KVS_FN(name) KVS_CAT(name, KVS_SUFFIX)

/* kvs_ops is one path's kernels; dispatch.c checks arguments, then calls
 * the table of the path in force. */
struct kvs_ops {
	int (*quantize_acts)(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx);
	int (*matmul)(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
	              const float *x, const void *qx, int64_t n, float *out);
	int (*matmul_packed)(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
	                     const void *qx, int64_t n, float *out);
	int (*rmsnorm)(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps);
	int (*rope)(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
	            float base, float scale, const float *freq_factors, int neox);
	int (*swiglu)(float *out, const float *gate, const float *up, int64_t len);
	int (*add)(float *x, const float *y, int64_t len);
	int (*attention)(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
	                 int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
	                 const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out);
	uint64_t (*sum64)(const uint64_t *p, int64_t n);
};

/* kvs_par (pool.c) runs fn over ranges [a, b) that cover [0, total) once,
 * multiples of unit but the last, on the caller and kvs_threads()-1 library
 * threads when split is nonzero (else all of it on the caller); worker is
 * the running thread's index, below kvs_threads(), for per-thread scratch.
 * It returns the last nonzero status. */
typedef int (*kvs_par_fn)(void *ctx, int worker, int64_t a, int64_t b);
int kvs_par(int64_t total, int64_t unit, int split, kvs_par_fn fn, void *ctx);
int kvs_threads(void);

extern const struct kvs_ops kvs_ops_scalar, kvs_ops_avx2, kvs_ops_avx512, kvs_ops_avx512vnni,
    kvs_ops_neon;

/* kvs_plane_ok checks a K/V plane's description (not its memory, which the
 * caller vouches for): 1 when usable. */
int kvs_plane_ok(const struct kvs_kv_plane *p);

/* Activation blocks. act32 serves Q4_0..Q8_0 (32 weights a block): scale,
 * the sum of the codes, the codes. act256 serves the K-quants: scale, the
 * sums of each 16 codes, two forms of them that the packed kernels would
 * otherwise compute for each block of every row group (Q4_K/Q5_K's mins
 * take pairs by vpmaddwd, Q6_K's chains start at off6), the codes. */
struct act32 {
	float d;
	int32_t s;
	int8_t q[32];
};
struct act256 {
	float d;
	int16_t bsums[16];
	int32_t pairs[4]; /* (bsums[4p]+bsums[4p+1]) | (bsums[4p+2]+bsums[4p+3]) << 16, as int16: sub-blocks 2p and 2p+1 for vpmaddwd */
	int32_t off6[16]; /* -32*bsums[g]: Q6_K's offset of 32 times the codes' sums */
	int8_t q[256];
};

/* kvs_h2f converts IEEE half bits to float exactly (subnormals, inf, NaN). */
static inline float kvs_h2f(uint16_t h) {
#if defined(__F16C__)
	return _cvtsh_ss(h); /* exact too (a signalling NaN comes back quiet) */
#endif
	uint32_t o = (uint32_t)(h & 0x7fff) << 13, e = h & 0x7c00;
	float f;
	if (e == 0x7c00) {
		o += 0x70000000u;
	} else if (e != 0) {
		o += 0x38000000u;
	} else {
		memcpy(&f, &o, 4);
		f *= 0x1p112f;
		memcpy(&o, &f, 4);
	}
	o |= (uint32_t)(h & 0x8000) << 16;
	memcpy(&f, &o, 4);
	return f;
}

/* kvs_f2h rounds f to the nearest half (ties to even), as engine/quant's
 * F32ToF16: too large becomes infinity, NaN a quiet NaN (0x7e00 | sign). */
static inline uint16_t kvs_f2h(float f) {
	uint32_t b;
	memcpy(&b, &f, 4);
	uint16_t sign = (uint16_t)(b >> 16) & 0x8000;
	int32_t exp = (int32_t)(b >> 23) & 0xff;
	uint32_t mant = b & 0x7fffff;
	if (exp == 0xff) return sign | (mant ? 0x7e00 : 0x7c00);
	int32_t e = exp - 127 + 15;
	if (e >= 0x1f) return sign | 0x7c00;
	if (e <= 0) {
		if (e < -10) return sign;
		uint32_t m = mant | 0x800000, shift = (uint32_t)(14 - e);
		uint32_t half = 1u << (shift - 1), r = m >> shift, rem = m & ((1u << shift) - 1);
		if (rem > half || (rem == half && (r & 1))) r++;
		return sign | (uint16_t)r;
	}
	uint32_t r = (uint32_t)e << 10 | mant >> 13, rem = mant & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
	return sign | (uint16_t)r;
}

/* kvs_bf2f converts bfloat16 bits to float. */
static inline float kvs_bf2f(uint16_t h) {
	uint32_t o = (uint32_t)h << 16;
	float f;
	memcpy(&f, &o, 4);
	return f;
}

/* kvs_f2bf rounds f to bfloat16 (ties to even), NaN kept quiet, as
 * engine/quant's F32ToBF16. */
static inline uint16_t kvs_f2bf(float f) {
	uint32_t b;
	memcpy(&b, &f, 4);
	if ((b & 0x7fffffff) > 0x7f800000) return (uint16_t)(b >> 16) | 0x40;
	return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

/* kvs_le16 reads a little-endian uint16 at p. */
static inline uint16_t kvs_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* kvs_expf is e^x in float operations only, within 2 ulps (Cephes' expf:
 * x = n·ln2 + r with ln2 in two parts, a degree-7 polynomial for e^r on
 * |r| <= ln2/2, times 2^n built in the exponent bits), branch-free so that
 * the loops calling it vectorize on every path with the same bits. x is
 * clamped to [-87, 88], where e^x is a normal float. */
static inline float kvs_expf(float x) {
	x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
	float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
	float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * (r * r) + r + 1.0f;
	union {
		uint32_t u;
		float f;
	} sc = {.u = (uint32_t)((int32_t)n + 127) << 23};
	return p * sc.f;
}

/* kvs_lane_sum16 sums 16 lanes as (l, l+8), (l, l+4), (l, l+2), (l, l+1). */
static inline float kvs_lane_sum16(float *a) {
	for (int s = 8; s >= 1; s >>= 1)
		for (int l = 0; l < s; l++) a[l] += a[l + s];
	return a[0];
}

#endif
