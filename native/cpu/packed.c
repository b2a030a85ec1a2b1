/* packed.c: products of Q4_0 and Q8_0 weights in the packed layout
 * (kvscope.h's KVS_PACK_ROWS), compiled once per path.
 *
 * A group of KVS_PACK_ROWS (16) rows is one AVX-512 register of int32 lanes,
 * lane r for row r: for each weight block, four activation codes broadcast
 * to every lane times four codes of each row (vpdpbusd) sum the block's
 * codes of all 16 rows at once, with no horizontal sums. Each loaded chunk
 * of codes serves up to eight activation vectors. Per (row, vector), the
 * arithmetic is kvscope.h's: an exact integer sum per block, then
 * acc += float(isum) * (dw * dx), in block order, so every path (and the
 * raw-layout kvs_matmul) gives the same bits. */
#include "packed_layout.h"
#include "simd.h"

enum { PR = KVS_PACK_ROWS, NV = 8 };

/* PF is how far ahead (bytes) the kernels prefetch weights into L2: the
 * AVX-512 tiles of three or more vectors and every AVX2 tile (tile's
 * comment says why not the others). Prefetches past the weights' end are
 * harmless (they never fault). */
#define PF 49152

static inline int32_t ld32(const void *p) {
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* nib_off is the offset making a nibble type's codes signed: Q4_0 8, Q5_0 16. */
static inline int32_t nib_off(uint32_t type) { return type == 6 ? 16 : 8; }

/* The scalar definition, run by the scalar and NEON paths. */
static void packed_ref(uint32_t type, const uint8_t *wp, int64_t rows, int64_t nb, int64_t g, const struct act32 *qx,
                       int64_t n, float *out) {
	const uint8_t *gp = wp + g * pk32_group_bytes(type, nb);
	for (int64_t v = 0; v < n; v++) {
		float acc[PR] = {0};
		for (int64_t i = 0; i < nb; i++) {
			const struct act32 *a = qx + v * nb + i;
			const uint8_t *c = gp + pk32_codes(type, i), *ds = gp + pk32_scales(type, i);
			for (int r = 0; r < PR; r++) {
				int32_t s = 0;
				if (type != 8) {
					for (int k = 0; k < 4; k++)
						for (int j = 0; j < 4; j++) {
							uint8_t b = c[64 * k + 4 * r + j];
							int32_t lo = b & 15, hi = b >> 4;
							if (type == 6) {
								uint8_t h = c[256 + 4 * r + j];
								lo |= ((h >> k) & 1) << 4;
								hi |= ((h >> (4 + k)) & 1) << 4;
							}
							s += lo * a->q[4 * k + j] + hi * a->q[16 + 4 * k + j];
						}
					s -= nib_off(type) * a->s;
				} else {
					for (int k = 0; k < 8; k++)
						for (int j = 0; j < 4; j++) s += c[64 * k + 4 * r + j] * a->q[4 * k + j];
					s -= 128 * a->s;
				}
				acc[r] += (float)s * (kvs_h2f(kvs_le16(ds + 2 * r)) * a->d);
			}
		}
		for (int r = 0; r < PR && g * PR + r < rows; r++) out[v * rows + g * PR + r] = acc[r];
	}
}

#if defined(__AVX2__) || defined(__AVX512F__)
/* prefetch asks for the lines of block i's pair (group gp) PF bytes
 * ahead, at the pair's first block. */
static inline __attribute__((always_inline)) void prefetch(uint32_t type, const uint8_t *gp, int64_t i) {
	if (i & 1) return;
	const char *c = (const char *)gp + pk32_scales(type, i) + PF;
	for (int64_t l = 0; l < pk32_pair_bytes(type); l += 64) _mm_prefetch(c + l, _MM_HINT_T1);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)

/* dp8 adds Q8_0's products with the four activation codes at q: u holds
 * codes + 128. With VNNI the caller takes off 128 × the activation sum;
 * without, the codes are made signed again and multiplied as |w| × (a
 * with w's sign), which fits maddubs's int16. */
static inline __attribute__((always_inline)) __m512i dp8(__m512i acc, __m512i u, const int8_t *q) {
#if defined(__AVX512VNNI__)
	return dp512b(acc, u, q);
#else
	__m512i a = _mm512_set1_epi32(ld32(q));
	__m512i w = _mm512_xor_si512(u, _mm512_set1_epi8((char)0x80));
	__m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sa), _mm512_set1_epi16(1)));
#endif
}

#if defined(__AVX512VNNI__)
#define Q8_OFFSET 128
#else
#define Q8_OFFSET 0
#endif

/* fifth512 adds Q5_0's fifth bits to chunk k's codes: bit k of byte b of
 * the block's 64 high-bit bytes hb is the low nibble's, bit 4+k the high
 * nibble's. */
static inline __attribute__((always_inline)) void fifth512(const uint8_t *hb, int k, __m512i *lo, __m512i *hi) {
	const __m512i m = _mm512_set1_epi8(16);
	__m512i h = _mm512_loadu_si512(hb);
	*lo = _mm512_or_si512(*lo, _mm512_and_si512(_mm512_slli_epi16(h, 4 - k), m));
	*hi = _mm512_or_si512(*hi, _mm512_and_si512(_mm512_srli_epi16(h, k), m));
}

/* tile computes one group (16 rows) for vectors [0, nv) of qx (nb blocks a
 * vector), writing out[v*rows + lane] for the first valid lanes. A tile of
 * one or two vectors (a decode step) asks for nothing ahead: a group is
 * one run of memory, and the hardware prefetcher alone streamed a
 * 5632×2048 product from memory at 95-97% of kvs_sum64's rate on the
 * development machine (Q4_0; Q8_0 96-99%), where four groups at a time
 * sharing each activation broadcast, each asking for its lines PF ahead
 * (the one-vector tile until then, over the old layout's separate scales),
 * gave 72-91% (Q8_0 85-93%). From three vectors on it prefetches. */
static inline __attribute__((always_inline)) void tile(uint32_t type, const uint8_t *gp, int64_t nb,
                                                      const struct act32 *qx, float *out, int64_t rows, __mmask16 valid,
                                                      int pf, const int nv) {
	__m512 acc[NV];
	for (int v = 0; v < nv; v++) acc[v] = _mm512_setzero_ps();
	const __m512i m4 = _mm512_set1_epi8(15);
	const int two = nv < 4; /* two integer chains a vector, for overlap */
	for (int64_t i = 0; i < nb; i++) {
		__m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gp + pk32_scales(type, i))));
		if (pf && nv > 2) prefetch(type, gp, i);
		__m512i s0[NV], s1[NV];
		for (int v = 0; v < nv; v++) {
			int32_t off = type != 8 ? -nib_off(type) * qx[v * nb + i].s : -Q8_OFFSET * qx[v * nb + i].s;
			s0[v] = _mm512_set1_epi32(off);
			s1[v] = _mm512_setzero_si512();
		}
		const uint8_t *c = gp + pk32_codes(type, i);
		if (type != 8) {
			for (int k = 0; k < 4; k++) {
				__m512i raw = _mm512_loadu_si512(c + 64 * k);
				__asm__("" : "+v"(raw)); /* one load (packed_k.c's kblock says why) */
				__m512i lo = _mm512_and_si512(raw, m4),
				        hi = X16 && type == 2 && two ? _mm512_andnot_si512(m4, raw) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
				if (type == 6) fifth512(c + 256, k, &lo, &hi);
				for (int v = 0; v < nv; v++) {
					const int8_t *q = qx[v * nb + i].q;
					s0[v] = dp512b(s0[v], lo, q + 4 * k);
					if (two)
						s1[v] = dp512b(s1[v], hi, q + 16 + 4 * k);
					else
						s0[v] = dp512b(s0[v], hi, q + 16 + 4 * k);
				}
			}
		} else {
			for (int k = 0; k < 8; k++) {
				__m512i u = _mm512_loadu_si512(c + 64 * k);
				for (int v = 0; v < nv; v++) {
					const int8_t *q = qx[v * nb + i].q + 4 * k;
					if (two && (k & 1))
						s1[v] = dp8(s1[v], u, q);
					else
						s0[v] = dp8(s0[v], u, q);
				}
			}
		}
		for (int v = 0; v < nv; v++) {
			__m512i s = !two ? s0[v] : _mm512_add_epi32(s0[v], X16 && type == 2 ? _mm512_srai_epi32(s1[v], 4) : s1[v]);
			__m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(qx[v * nb + i].d));
			acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(_mm512_cvtepi32_ps(s), dd));
		}
	}
	for (int v = 0; v < nv; v++) _mm512_mask_storeu_ps(out + v * rows, valid, acc[v]);
}


static inline __attribute__((always_inline)) void packed_group(uint32_t type, const uint8_t *wp, int64_t rows, int64_t nb, int64_t g,
                         const struct act32 *qx, int64_t n, float *out) {
	const uint8_t *gp = wp + g * pk32_group_bytes(type, nb);
	int64_t left = rows - g * PR;
	__mmask16 valid = left >= PR ? 0xffff : (__mmask16)((1u << left) - 1);
	float *o = out + g * PR;
	for (int64_t v0 = 0; v0 < n; v0 += NV) {
		const struct act32 *a = qx + v0 * nb;
		float *ov = o + v0 * rows;
#define T(NVC) tile(type, gp, nb, a, ov, rows, valid, v0 == 0, NVC)
		KVS_TILES(n - v0, T)
#undef T
	}
}

#elif defined(__AVX2__)

/* The AVX2 path: each group as two halves of eight rows (lanes 0-7 of a
 * chunk's first 32 bytes, rows 8-15 of its last 32). */
static inline __m256i dp(__m256i acc, __m256i u, __m256i a) {
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
}

/* fifth256 is fifth512 for one half (32 bytes) of a chunk. */
static inline __attribute__((always_inline)) void fifth256(const uint8_t *hb, int k, __m256i *lo, __m256i *hi) {
	const __m256i m = _mm256_set1_epi8(16);
	__m256i h = _mm256_loadu_si256((const __m256i *)hb);
	*lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(h, 4 - k), m));
	*hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(h, k), m));
}

/* dp8: Q8_0's codes (+128 in u) made signed, |w| × (a with w's sign). */
static inline __m256i dp8(__m256i acc, __m256i u, __m256i a) {
	__m256i w = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)),
	                                               _mm256_set1_epi16(1)));
}

/* tile computes half h (rows 8h..8h+7) of group gp for vectors [0, nv). */
static inline __attribute__((always_inline)) void tile(uint32_t type, const uint8_t *gp, int h, int64_t nb,
                                                      const struct act32 *qx, float *out, int64_t rows, int valid,
                                                      int pf, const int nv) {
	__m256 acc[NV];
	for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(15);
	for (int64_t i = 0; i < nb; i++) {
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + pk32_scales(type, i) + 16 * h)));
		if (pf) prefetch(type, gp, i);
		__m256i s0[NV];
		for (int v = 0; v < nv; v++) s0[v] = _mm256_set1_epi32(type != 8 ? -nib_off(type) * qx[v * nb + i].s : 0);
		const uint8_t *c = gp + pk32_codes(type, i) + 32 * h;
		if (type != 8) {
			for (int k = 0; k < 4; k++) {
				__m256i raw = _mm256_loadu_si256((const __m256i *)(c + 64 * k));
				__m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
				if (type == 6) fifth256(c + 256, k, &lo, &hi);
				for (int v = 0; v < nv; v++) {
					const int8_t *q = qx[v * nb + i].q;
					s0[v] = dp(s0[v], lo, _mm256_set1_epi32(ld32(q + 4 * k)));
					s0[v] = dp(s0[v], hi, _mm256_set1_epi32(ld32(q + 16 + 4 * k)));
				}
			}
		} else {
			for (int k = 0; k < 8; k++) {
				__m256i u = _mm256_loadu_si256((const __m256i *)(c + 64 * k));
				for (int v = 0; v < nv; v++) s0[v] = dp8(s0[v], u, _mm256_set1_epi32(ld32(qx[v * nb + i].q + 4 * k)));
			}
		}
		for (int v = 0; v < nv; v++) {
			__m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(qx[v * nb + i].d));
			acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(_mm256_cvtepi32_ps(s0[v]), dd));
		}
	}
	for (int v = 0; v < nv; v++) {
		if (valid >= 8) {
			_mm256_storeu_ps(out + v * rows, acc[v]);
		} else {
			float t[8];
			_mm256_storeu_ps(t, acc[v]);
			for (int r = 0; r < valid; r++) out[v * rows + r] = t[r];
		}
	}
}

/* tile1 is this path's tile for one vector: G whole groups, both halves
 * of each in one pass over their chunks (tile's halves each read half of
 * every cache line, in two passes), sharing each activation broadcast. On
 * the development machine, forced onto this path, a Q4_0 decode step went
 * from 31-35 to 41-45 tokens/s, Q8_0 from about 20 to 22-23 (llama.cpp's
 * Haswell build there: 34-41 and 24-27). G = 2: sixteen registers hold no
 * more. The bits are tile's. */
static inline __attribute__((always_inline)) void tile1(uint32_t type, const uint8_t *g0, int64_t gstride, int64_t nb,
                                                       const struct act32 *qx, float *out, const int G) {
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256 acc[2][2];
	for (int g = 0; g < G; g++) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const int8_t *q = qx[i].q;
		const int64_t co = pk32_codes(type, i);
		__m256i s[2][2];
		for (int g = 0; g < G; g++) {
			prefetch(type, g0 + g * gstride, i);
			s[g][0] = s[g][1] = _mm256_set1_epi32(type != 8 ? -nib_off(type) * qx[i].s : 0);
		}
		if (type != 8) {
			for (int k = 0; k < 4; k++) {
				__m256i xl = _mm256_set1_epi32(ld32(q + 4 * k)), xh = _mm256_set1_epi32(ld32(q + 16 + 4 * k));
				for (int g = 0; g < G; g++)
					for (int h = 0; h < 2; h++) {
						const uint8_t *c = g0 + g * gstride + co + 32 * h;
						__m256i raw = _mm256_loadu_si256((const __m256i *)(c + 64 * k));
						__m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
						if (type == 6) fifth256(c + 256, k, &lo, &hi);
						s[g][h] = dp(s[g][h], lo, xl);
						s[g][h] = dp(s[g][h], hi, xh);
					}
			}
		} else {
			for (int k = 0; k < 8; k++) {
				__m256i x = _mm256_set1_epi32(ld32(q + 4 * k));
				for (int g = 0; g < G; g++)
					for (int h = 0; h < 2; h++)
						s[g][h] = dp8(s[g][h], _mm256_loadu_si256((const __m256i *)(g0 + g * gstride + co + 64 * k + 32 * h)), x);
			}
		}
		__m256 dx = _mm256_set1_ps(qx[i].d);
		for (int g = 0; g < G; g++)
			for (int h = 0; h < 2; h++) {
				__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g0 + g * gstride + pk32_scales(type, i) + 16 * h)));
				acc[g][h] = _mm256_add_ps(acc[g][h], _mm256_mul_ps(_mm256_cvtepi32_ps(s[g][h]), _mm256_mul_ps(dw, dx)));
			}
	}
	for (int g = 0; g < G; g++)
		for (int h = 0; h < 2; h++) _mm256_storeu_ps(out + 16 * g + 8 * h, acc[g][h]);
}

/* groups1 runs tile1 over groups [g, g1) of whole rows, two at a time,
 * and returns the first group it left (at most one). */
static inline __attribute__((always_inline)) int64_t groups1(uint32_t type, const uint8_t *wp, int64_t nb, int64_t g,
                                                            int64_t g1, const struct act32 *qx, float *out) {
	int64_t gs = pk32_group_bytes(type, nb);
	for (; g + 2 <= g1; g += 2) tile1(type, wp + g * gs, gs, nb, qx, out + g * PR, 2);
	return g;
}
#define HAVE_TILE1 1

static inline __attribute__((always_inline)) void packed_group(uint32_t type, const uint8_t *wp, int64_t rows, int64_t nb, int64_t g,
                         const struct act32 *qx, int64_t n, float *out) {
	const uint8_t *gp = wp + g * pk32_group_bytes(type, nb);
	for (int h = 0; h < 2; h++) {
		int64_t left = rows - g * PR - 8 * h;
		if (left <= 0) break;
		int valid = left >= 8 ? 8 : (int)left;
		float *o = out + g * PR + 8 * h;
		for (int64_t v0 = 0; v0 < n; v0 += NV) {
			const struct act32 *a = qx + v0 * nb;
			float *ov = o + v0 * rows;
#define T(NVC) tile(type, gp, h, nb, a, ov, rows, valid, v0 == 0 && h == 0, NVC)
			KVS_TILES(n - v0, T)
#undef T
		}
	}
}

#else

static inline __attribute__((always_inline)) void packed_group(uint32_t type, const uint8_t *wp, int64_t rows, int64_t nb, int64_t g,
                         const struct act32 *qx, int64_t n, float *out) {
	packed_ref(type, wp, rows, nb, g, qx, n, out);
}

#endif

static int matmul_packed(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                         const void *qx, int64_t n, float *out) {
	int64_t nb = cols / 32, g = row0 / PR;
	const uint8_t *w = wp;
	const struct act32 *a = qx;
#ifdef HAVE_TILE1
	if (n == 1) {
		/* whole groups: all but a last partial one */
		int64_t whole = (row1 == rows ? rows / PR : row1 / PR);
		switch (type) {
		case 2: g = groups1(2, w, nb, g, whole, a, out); break;
		case 6: g = groups1(6, w, nb, g, whole, a, out); break;
		default: g = groups1(8, w, nb, g, whole, a, out);
		}
	}
#endif
	for (; g * PR < row1; g++) {
		switch (type) {
		case 2: packed_group(2, w, rows, nb, g, a, n, out); break;
		case 6: packed_group(6, w, rows, nb, g, a, n, out); break;
		default: packed_group(8, w, rows, nb, g, a, n, out);
		}
	}
	return KVS_OK;
}

int KVS_FN(kvs_matmul_packed_k)(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0,
                                int64_t row1, const void *qx, int64_t n, float *out);

int KVS_FN(kvs_matmul_packed)(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                              const void *qx, int64_t n, float *out) {
	(void)packed_ref;
	if (type >= 12 && type <= 14) return KVS_FN(kvs_matmul_packed_k)(type, wp, rows, cols, row0, row1, qx, n, out);
	return matmul_packed(type, wp, rows, cols, row0, row1, qx, n, out);
}
