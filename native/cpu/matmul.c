/* matmul.c: activation rounding and the weight-by-activations products,
 * compiled once per path. */
#include "simd.h"

#if !defined(__AVX2__) && !defined(__AVX512F__)
/* act_scale returns d = max|x|/127 over n values (a NaN passed over) and
 * sets id to 1/d, or 0 where d is. */
static inline float act_scale(const float *xs, int n, float *id) {
	float amax = 0;
	for (int j = 0; j < n; j++) {
		float v = fabsf(xs[j]);
		amax = v > amax ? v : amax;
	}
	float d = amax / 127;
	*id = d != 0 ? 1 / d : 0;
	return d;
}
#endif

#if defined(__AVX2__) && !(defined(__AVX512F__) && defined(__AVX512BW__))
/* hmax256 returns the largest of m's lanes (a NaN passed over), as the
 * scalar comparison would over them in order. */
static inline float hmax256(__m256 m) {
	float t[8], amax = 0;
	_mm256_storeu_ps(t, m);
	for (int j = 0; j < 8; j++) amax = t[j] > amax ? t[j] : amax;
	return amax;
}
#endif

/* quant32 rounds one 32-value block: d = max|x|/127, q = rint(x/d) (as
 * x times 1/d), s = the codes' sum; the SIMD versions give the same bits
 * (the max and the integer sum are exact in any order). */
static inline void quant32(const float *xs, struct act32 *a) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
	__m512 v0 = _mm512_loadu_ps(xs), v1 = _mm512_loadu_ps(xs + 16);
	float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
	float d = amax / 127, id = d != 0 ? 1 / d : 0;
	__m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
	__m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
	a->d = d;
	_mm_storeu_si128((__m128i *)a->q, _mm512_cvtepi32_epi8(q0));
	_mm_storeu_si128((__m128i *)(a->q + 16), _mm512_cvtepi32_epi8(q1));
	a->s = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#elif defined(__AVX2__)
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 v[4], m = _mm256_setzero_ps();
	for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(xs + 8 * k), m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
	float amax = hmax256(m);
	float d = amax / 127, id = d != 0 ? 1 / d : 0;
	__m256i sum = _mm256_setzero_si256();
	for (int k = 0; k < 4; k++) {
		__m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
		sum = _mm256_add_epi32(sum, q);
		int32_t qi[8];
		_mm256_storeu_si256((__m256i *)qi, q);
		for (int j = 0; j < 8; j++) a->q[8 * k + j] = (int8_t)qi[j];
	}
	int32_t si[8], s = 0;
	_mm256_storeu_si256((__m256i *)si, sum);
	for (int j = 0; j < 8; j++) s += si[j];
	a->d = d;
	a->s = s;
#else
	float id, d = act_scale(xs, 32, &id);
	int s = 0;
	for (int j = 0; j < 32; j++) s += a->q[j] = (int8_t)__builtin_rintf(xs[j] * id);
	a->d = d;
	a->s = s;
#endif
}

/* quant256 rounds one 256-value block for the K-quants as quant32 does,
 * with bsums[g] the sum of codes 16g..16g+15 instead of one sum; the SIMD
 * versions give the same bits (a NaN is passed over in the max, as the
 * scalar comparison does). */
static inline void quant256(const float *xs, struct act256 *a) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
	__m512 m = _mm512_setzero_ps();
	for (int g = 0; g < 16; g++) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xs + 16 * g)), m);
	float amax = _mm512_reduce_max_ps(m);
	float d = amax / 127, id = d != 0 ? 1 / d : 0;
	const __m512 vid = _mm512_set1_ps(id);
	for (int g = 0; g < 16; g++) {
		__m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 16 * g), vid));
		_mm_storeu_si128((__m128i *)(a->q + 16 * g), _mm512_cvtepi32_epi8(q));
		a->bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
	}
	a->d = d;
#elif defined(__AVX2__)
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 m = _mm256_setzero_ps();
	for (int k = 0; k < 32; k++) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xs + 8 * k)), m);
	float amax = hmax256(m);
	float d = amax / 127, id = d != 0 ? 1 / d : 0;
	const __m256 vid = _mm256_set1_ps(id);
	for (int g = 0; g < 16; g++) {
		__m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xs + 16 * g), vid));
		__m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xs + 16 * g + 8), vid));
		/* int32 -> int16 (saturating, exact for codes within ±127) -> int8 */
		__m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
		__m128i b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
		_mm_storeu_si128((__m128i *)(a->q + 16 * g), b);
		__m256i s = _mm256_add_epi32(q0, q1);
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		a->bsums[g] = (int16_t)_mm_cvtsi128_si32(s4);
	}
	a->d = d;
#else
	float id, d = act_scale(xs, 256, &id);
	for (int j = 0; j < 256; j++) a->q[j] = (int8_t)__builtin_rintf(xs[j] * id);
	for (int g = 0; g < 16; g++) {
		int s = 0;
		for (int j = 0; j < 16; j++) s += a->q[16 * g + j];
		a->bsums[g] = (int16_t)s;
	}
	a->d = d;
#endif
	for (int p = 0; p < 4; p++) {
		int32_t lo = a->bsums[4 * p] + a->bsums[4 * p + 1], hi = a->bsums[4 * p + 2] + a->bsums[4 * p + 3];
		a->pairs[p] = (int32_t)(((uint32_t)(uint16_t)lo) | ((uint32_t)(uint16_t)hi << 16));
	}
	for (int g = 0; g < 16; g++) a->off6[g] = -32 * a->bsums[g];
}

static int quantize_acts(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx) {
	if (type == 0 || type == 1 || type == 30) return KVS_OK;
	int k = type >= 10 && type <= 14;
	int64_t bs = k ? 256 : 32, nb = cols / bs;
	for (int64_t b = 0; b < n; b++)
		for (int64_t i = 0; i < nb; i++) {
			if (k)
				quant256(x + b * cols + i * 256, (struct act256 *)qx + b * nb + i);
			else
				quant32(x + b * cols + i * 32, (struct act32 *)qx + b * nb + i);
		}
	return KVS_OK;
}

/* unpack5 returns a Q5_1 block's 32 five-bit codes. */
static inline kvs_u32 unpack5(const uint8_t *qh4, const uint8_t *qs) {
	uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
	kvs_u32 u = unpack_nib(qs);
	for (int j = 0; j < 32; j++) u[j] |= (uint8_t)(((qh >> j) & 1) << 4);
	return u;
}

/* iq4nl maps IQ4_NL's 4-bit codes to its 16 non-linear levels. */
static inline kvs_b32 iq4nl(kvs_u32 u) {
#if defined(__AVX2__)
	const __m128i lut = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
	return (kvs_b32)_mm256_shuffle_epi8(_mm256_set_m128i(lut, lut), (__m256i)u);
#else
	static const int8_t lut[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
	kvs_b32 c;
	for (int j = 0; j < 32; j++) c[j] = lut[u[j]];
	return c;
#endif
}

/* A tile is up to tr rows by tv vectors; each (row, vector) keeps eight
 * float lanes (acc) and one float sum of offsets and mins (accm). */
enum { tr = 4, tv = 4 };

#define CVT(i) __builtin_convertvector((i), kvs_f8)

/* mm32_tile computes rows [r0, r0+nr) for vectors [b0, b0+nv); inlined with
 * constant nr and nv, its sums stay in registers. */
static inline __attribute__((always_inline)) void mm32_tile(uint32_t type, const uint8_t *w, int64_t rows,
                                                           int64_t nb, int64_t tsz, int64_t r0, int64_t b0,
                                                           const struct act32 *qx, float *out, const int nr,
                                                           const int nv) {
	kvs_f8 acc[tr][tv] = {{{0}}};
	float accm[tr][tv] = {{0}};
	for (int64_t i = 0; i < nb; i++) {
		const struct act32 *a = qx + b0 * nb + i;
		for (int rr = 0; rr < nr; rr++) {
			const uint8_t *blk = w + ((r0 + rr) * nb + i) * tsz;
			float d = kvs_h2f(kvs_le16(blk));
			switch (type) {
			case 20: { /* IQ4_NL: d | qs[16], x = d*kvalues[q] */
				kvs_b32 c = iq4nl(unpack_nib(blk + 2));
				for (int v = 0; v < nv; v++) acc[rr][v] += CVT(lanes_s8s8(c, a[v * nb].q)) * (d * a[v * nb].d);
				break;
			}
			default: { /* Q4_1: d | m | qs[16]; Q5_1: d | m | qh | qs[16]; x = d*q + m */
				float m = kvs_h2f(kvs_le16(blk + 2));
				kvs_u32 u = type == 3 ? unpack_nib(blk + 4) : unpack5(blk + 4, blk + 8);
				for (int v = 0; v < nv; v++) {
					acc[rr][v] += CVT(lanes_u8s8(u, a[v * nb].q)) * (d * a[v * nb].d);
					accm[rr][v] += (m * a[v * nb].d) * (float)a[v * nb].s;
				}
			}
			}
		}
	}
	for (int rr = 0; rr < nr; rr++)
		for (int v = 0; v < nv; v++) out[(b0 + v) * rows + r0 + rr] = lane_sum8(acc[rr][v]) + accm[rr][v];
}

/* mm32 multiplies rows of Q4_1, Q5_1 or IQ4_NL (Q5_0 runs packed:
 * dispatch.c's mm_repacked). Per (row, vector), in block order:
 * acc += float(lane sums of codes × activation codes) × (dw·dx), then for
 * Q4_1 and Q5_1
 * accm += (mw·dx)·float(s), s the block's activation code sum. Tiles are
 * 4 rows × 1 vector for one vector (independent sums to overlap), else
 * 2 rows × 4 vectors (weights decoded once for four vectors). */
static void mm32(uint32_t type, const uint8_t *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                 const struct act32 *qx, int64_t n, float *out) {
	int64_t nb = cols / 32;
	int64_t tsz = type == 20 ? 18 : type == 3 ? 20 : 24;
#define TILE(R, V) mm32_tile(type, w, rows, nb, tsz, r0, b0, qx, out, R, V)
	/* Chunks of rows small enough to stay in cache while every group of
	 * vectors passes over them. */
	int64_t chunk = 65536 / (nb * tsz) + 1;
	for (int64_t c0 = row0; c0 < row1; c0 += chunk) {
		int64_t c1 = c0 + chunk < row1 ? c0 + chunk : row1;
		for (int64_t b0 = 0; b0 < n;) {
			int64_t left = n - b0;
			int nv = left >= 4 ? 4 : left == 3 ? 3 : left == 2 ? 2 : 1;
			int step = nv == 1 ? 4 : 2;
			int64_t r0 = c0;
			for (; r0 + step <= c1; r0 += step) {
				switch (nv) {
				case 1: TILE(4, 1); break;
				case 2: TILE(2, 2); break;
				case 3: TILE(2, 3); break;
				default: TILE(2, 4);
				}
			}
			for (; r0 < c1; r0++) {
				switch (nv) {
				case 1: TILE(1, 1); break;
				case 2: TILE(1, 2); break;
				case 3: TILE(1, 3); break;
				default: TILE(1, 4);
				}
			}
			b0 += nv;
		}
	}
#undef TILE
}

/* unpack_k decodes one Q2_K or Q3_K super-block into 256 unsigned codes,
 * 16 scales (one per 16 codes) and, for Q2_K, 16 mins; it returns d and
 * sets *dmin. Q3_K's codes are q+4 (the offset is taken off in mmk).
 * Q2_K: scales[16] | qs[64] | d | dmin; Q3_K: hmask[32] | qs[64] |
 * scales[12] | d. Element 128h+32j+l takes bits 2j of qs[32h+l] (and, for
 * Q3_K, bit 4h+j of hmask[l]); element e is in sub-block e/16. */
static inline float unpack_k(uint32_t type, const uint8_t *b, uint8_t *u, int16_t *sc, int16_t *mn, float *dmin) {
	const uint8_t *qs = b + (type == 10 ? 16 : 32), *hm = b;
	for (int h = 0; h < 2; h++)
		for (int j = 0; j < 4; j++)
			for (int l = 0; l < 32; l++) {
				uint8_t q = (qs[32 * h + l] >> (2 * j)) & 3;
				if (type == 11) q |= (uint8_t)(((hm[l] >> (4 * h + j)) & 1) << 2);
				u[128 * h + 32 * j + l] = q;
			}
	if (type == 10) {
		for (int g = 0; g < 16; g++) sc[g] = b[g] & 15, mn[g] = b[g] >> 4;
		*dmin = kvs_h2f(kvs_le16(b + 82));
		return kvs_h2f(kvs_le16(b + 80));
	}
	const uint8_t *q = b + 96;
	for (int g = 0; g < 16; g++) {
		int lo = g < 8 ? q[g] & 15 : q[g - 8] >> 4, hi = (q[8 + g % 4] >> (2 * (g / 4))) & 3;
		sc[g] = (int16_t)((lo | hi << 4) - 32);
	}
	*dmin = 0;
	return kvs_h2f(kvs_le16(b + 108));
}

/* mmk multiplies rows of Q2_K or Q3_K (Q4_K, Q5_K and Q6_K run packed:
 * dispatch.c's mm_repacked). Per (row, vector), in super-block order:
 * acc += float(lanes_k of codes, activation codes and scales) × (d·dx),
 * then accm += (d·dx)·float(-4·msum) for Q3_K (msum: scales × activation
 * sums of 16), or accm -= (dmin·dx)·float(msum) for Q2_K (msum: mins ×
 * activation sums of 16). */
static void mmk(uint32_t type, const uint8_t *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                const struct act256 *qx, int64_t n, float *out) {
	int64_t nb = cols / 256, tsz = type == 10 ? 84 : 110;
	uint8_t u[256];
	int16_t sc[16], mn[16] = {0};
	for (int64_t r = row0; r < row1; r++) {
		const uint8_t *wr = w + r * nb * tsz;
		for (int64_t b0 = 0; b0 < n; b0 += 32) {
			int nv = (int)(n - b0 < 32 ? n - b0 : 32);
			kvs_f8 acc[32] = {{0}};
			float accm[32] = {0};
			for (int64_t i = 0; i < nb; i++) {
				float dmin, d = unpack_k(type, wr + i * tsz, u, sc, mn, &dmin);
				for (int v = 0; v < nv; v++) {
					const struct act256 *a = qx + (b0 + v) * nb + i;
					int32_t msum = 0;
					acc[v] += CVT(lanes_k(u, a->q, sc)) * (d * a->d);
					if (type == 11) {
						for (int g = 0; g < 16; g++) msum += sc[g] * a->bsums[g];
						accm[v] += (d * a->d) * (float)(-4 * msum);
					} else {
						for (int g = 0; g < 16; g++) msum += mn[g] * a->bsums[g];
						accm[v] -= (dmin * a->d) * (float)msum;
					}
				}
			}
			for (int v = 0; v < nv; v++) out[(b0 + v) * rows + r] = lane_sum8(acc[v]) + accm[v];
		}
	}
}

/* mm_exact multiplies rows of Q4_0 or Q8_0 in kvscope.h's order for them
 * (kvs_matmul_packed's): per block an exact integer sum, then one float sum
 * acc += float(isum) * (dw*dx). */
static void mm_exact(uint32_t type, const uint8_t *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                     const struct act32 *qx, int64_t n, float *out) {
	int64_t nb = cols / 32, tsz = type == 2 ? 18 : 34;
	for (int64_t r = row0; r < row1; r++) {
		const uint8_t *wr = w + r * nb * tsz;
		for (int64_t b0 = 0; b0 < n; b0 += 4) {
			int nv = n - b0 < 4 ? (int)(n - b0) : 4;
			float acc[4] = {0};
			for (int64_t i = 0; i < nb; i++) {
				const uint8_t *blk = wr + i * tsz;
				float d = kvs_h2f(kvs_le16(blk));
				kvs_b32 c = type == 2 ? (kvs_b32)unpack_nib(blk + 2) - 8 : (kvs_b32)load32(blk + 2);
				for (int v = 0; v < nv; v++) {
					const struct act32 *a = qx + (b0 + v) * nb + i;
					kvs_i8 l = lanes_s8s8(c, a->q);
					int32_t s = 0;
					for (int m = 0; m < 8; m++) s += l[m];
					acc[v] += (float)s * (d * a->d);
				}
			}
			for (int v = 0; v < nv; v++) out[(b0 + v) * rows + r] = acc[v];
		}
	}
}

static int matmul(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                  const float *x, const void *qx, int64_t n, float *out) {
	switch (type) {
	case 0: case 1: case 30: {
		int kind = type == 0 ? 0 : type == 1 ? 1 : 2;
		int64_t es = type == 0 ? 4 : 2;
		for (int64_t r = row0; r < row1; r++) {
			const uint8_t *wr = (const uint8_t *)w + r * cols * es;
			int64_t b = 0;
			for (; b + 4 <= n; b += 4) {
				const float *xs[4] = {x + b * cols, x + (b + 1) * cols, x + (b + 2) * cols, x + (b + 3) * cols};
				float o[4];
				dot_any4(wr, kind, xs, cols, o);
				for (int v = 0; v < 4; v++) out[(b + v) * rows + r] = o[v];
			}
			for (; b < n; b++) out[b * rows + r] = dot_any(wr, kind, x + b * cols, cols);
		}
		return KVS_OK;
	}
	case 2: case 8:
		mm_exact(type, w, rows, cols, row0, row1, qx, n, out);
		return KVS_OK;
	case 3: case 7: case 20:
		mm32(type, w, rows, cols, row0, row1, qx, n, out);
		return KVS_OK;
	case 10: case 11:
		mmk(type, w, rows, cols, row0, row1, qx, n, out);
		return KVS_OK;
	}
	return KVS_ERR_TYPE;
}

int KVS_FN(kvs_quantize_acts)(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx) {
	return quantize_acts(type, x, cols, n, qx);
}

int KVS_FN(kvs_matmul)(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                       const float *x, const void *qx, int64_t n, float *out) {
	return matmul(type, w, rows, cols, row0, row1, x, qx, n, out);
}
