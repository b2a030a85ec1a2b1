/* attention.c: paged attention over K/V blocks in the store's own layout,
 * compiled once per path.
 *
 * Scores. A key row at f32/f16/bf16, q8_0, or in a key group still in its
 * f16 residual, is decoded and dotted with each query head in float (the
 * sixteen-lane order of simd.h's dot_any). With AVX-512, sixteen positions'
 * rows are decoded at a time and each head's sixteen dot products run side
 * by side, their lanes summed together in dot_any's order (tile_scores):
 * one chain of adds a dot product was the bound, and the tiles made a
 * TinyLlama step's attention at 2048 positions about a fifth faster.
 *
 * A quantized int8/int4 key group is scored with exact integer dot products
 * instead: per query head and key group the channel scales are folded into
 * the query, q'[d] = q[d]*s[d], which is rounded to 22-bit codes X[d] =
 * rint(q'[d]*KVS_QX/amax) = 128*Q[d] + Qc[d] (amax the largest |q'[d]|, step
 * qd = amax/KVS_QX); a token's score is then (((float)S*128 + (float)Sc) *
 * qd + cz) * scale, with S and Sc the sums of Q[d]*code[d] and
 * Qc[d]*code[d], cz = 0 for int8 and for int4 the float dot product of q
 * with the group's zero points. The
 * integer sums are exact in every lane order, so each path computes them its
 * own way (AVX-512 and AVX2 on sixteen or eight tokens at once, summed
 * across lanes by a fixed tree) with the scalar path's bits. fp8 groups
 * decode with their group's scales, decoded once.
 *
 * Values are decoded once a position (int8, int4 rows with SIMD, the scalar
 * code's operations), or read in place (f32, f16, bf16), and weighted in
 * position order as the header states (each weight exp(score - max) times
 * the head's 1/sum, rounded once a position, not once a pass). While a KV
 * head's keys are scored, its values are asked into L2; a layer with one
 * query head a KV head (keys without key groups) goes block by block
 * across its KV heads instead (attention, below). */
#include <stdlib.h>

#include "kv.h"
#include "simd.h"

/* KVS_QX is the largest |X[d]| of a query's 22-bit codes, 128*16383 + 127:
 * X>>7 lies in -16384..16383 and its low 7 bits in 0..127, so D <= 1024
 * products of either with a stored code (|code| <= 127: int8 codes clamp
 * to +-127, int4 codes are 0..15) sum within int32 (1024*16384*127 <
 * 2^31). */
#define KVS_QX 2097151
/* KVS_TILE tokens of a key group are widened and scored at a time. */
#define KVS_TILE 16

/* pf_line asks for the line at a into L1, or into L2 only (l2). */
static inline void pf_line(const void *a, int l2) {
	if (l2)
		__builtin_prefetch(a, 0, 2);
	else
		__builtin_prefetch(a);
}

/* prefetch_rows asks for the cache lines of KV head h's rows of positions
 * a..b-1 of plane p (block table tab), and of their value scales: blocks
 * lie anywhere, so the hardware does not see the next one coming. */
static inline void prefetch_rows(const struct kvs_kv_plane *p, int32_t layer, const int32_t *tab, int h, int a, int b, int l2) {
	int B = p->block_size;
	int64_t rb = p->prec == KVS_KV_F32 ? 4 * p->head_dim : p->prec <= KVS_KV_BF16 ? 2 * p->head_dim : p->row_bytes;
	for (int x = a; x < b;) {
		int j = x / B, t = x % B, e = (j + 1) * B < b ? (j + 1) * B : b;
		int64_t lb = (int64_t)layer * p->blocks + tab[j];
		const char *d = (const char *)p->data + (lb * p->data_per_block + (int64_t)(h * B + t) * (p->prec <= KVS_KV_BF16 ? p->head_dim : p->row_bytes)) *
		                                            (p->prec == KVS_KV_F32 ? 4 : p->prec <= KVS_KV_BF16 ? 2 : 1);
		for (int64_t o = 0; o < (e - x) * rb; o += 64) pf_line(d + o, l2);
		if (!p->key && p->prec > KVS_KV_BF16) {
			int es = p->prec == KVS_KV_Q8_0 ? 2 : 1;
			const char *sc = (const char *)p->scale + (lb * p->scales_per_block + (int64_t)t * p->groups) * es;
			for (int64_t o = 0; o < (int64_t)(e - x) * p->groups * es; o += 64) pf_line(sc + o, l2);
		} else if (p->key) {
			/* The key groups' channel scales (and int4's zero points). */
			int per = p->prec == KVS_KV_INT4 ? kvs_int4_key_bytes(p->head_dim) : 1 + (p->head_dim + 1) / 2;
			for (int g = t / p->group; g <= (e - 1 - j * B) / p->group; g++) {
				const char *sc = (const char *)p->scale + kvs_key_scale_index(p, lb, h, g);
				for (int o = 0; o < per; o += 64) pf_line(sc + o, l2);
				pf_line(sc + per - 1, l2);
			}
		}
		x = e;
	}
}

/* row_scores writes the scores of one decoded key row kr for the group's
 * query heads qg: sc[hh*m] = dot(kr, q_hh)*scale. */
static inline void row_scores(const float *kr, const float *qg, int group, int D, float scale, float *sc, int64_t m) {
	int hh = 0;
	for (; hh + 4 <= group; hh += 4) {
		const float *qs[4] = {qg + hh * D, qg + (hh + 1) * D, qg + (hh + 2) * D, qg + (hh + 3) * D};
		float d4[4];
		dot_any4(kr, 0, qs, D, d4);
		for (int v = 0; v < 4; v++) sc[(hh + v) * m] = d4[v] * scale;
	}
	for (; hh < group; hh++) sc[hh * m] = dot_any(kr, 0, qg + hh * D, D) * scale;
}

/* widen_codes writes n consecutive int8 or int4 key rows starting at src
 * (row_bytes apart) as int16 codes cb[t*Dp + d], zero past D. */
static void widen_codes(int prec, const uint8_t *src, int64_t row_bytes, int n, int D, int Dp, int16_t *cb) {
	for (int t = 0; t < n; t++) {
		const uint8_t *s = src + t * row_bytes;
		int16_t *o = cb + (int64_t)t * Dp;
		int d = 0;
		if (prec == KVS_KV_INT8) {
#if defined(__AVX512BW__)
			for (; d + 32 <= D; d += 32)
				_mm512_storeu_si512((void *)(o + d), _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(s + d))));
#elif defined(__AVX2__)
			for (; d + 16 <= D; d += 16)
				_mm256_storeu_si256((__m256i *)(o + d), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(s + d))));
#endif
			for (; d < D; d++) o[d] = (int8_t)s[d];
		} else {
#if defined(__AVX2__)
			for (; d + 32 <= D; d += 32) {
				__m128i b = _mm_loadu_si128((const __m128i *)(s + d / 2)), m15 = _mm_set1_epi8(15);
				__m128i lo = _mm_and_si128(b, m15), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m15);
				__m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
#if defined(__AVX512BW__)
				_mm512_storeu_si512((void *)(o + d), _mm512_cvtepu8_epi16(_mm256_set_m128i(c1, c0)));
#else
				_mm256_storeu_si256((__m256i *)(o + d), _mm256_cvtepu8_epi16(c0));
				_mm256_storeu_si256((__m256i *)(o + d + 16), _mm256_cvtepu8_epi16(c1));
#endif
			}
#endif
			for (; d < D; d++) o[d] = (s[d >> 1] >> ((d & 1) * 4)) & 15;
		}
		for (; d < Dp; d++) o[d] = 0;
	}
}

/* idot_rows computes out[t] = sum_d Q[d]*cb[t*Dp + d] for t < n <= KVS_TILE,
 * exactly (Dp a multiple of 32). */
#if defined(__AVX512BW__)
static inline __m512i madd_acc(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
	return _mm512_dpwssd_epi32(acc, a, b);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

static void idot_rows(const int16_t *Q, const int16_t *cb, int Dp, int n, int32_t *out) {
	__m512i a[16];
	for (int t = 0; t < 16; t++) a[t] = _mm512_setzero_si512();
	for (int c = 0; c < Dp; c += 32) {
		__m512i qv = _mm512_loadu_si512((const void *)(Q + c));
		for (int t = 0; t < n; t++) a[t] = madd_acc(a[t], qv, _mm512_loadu_si512((const void *)(cb + (int64_t)t * Dp + c)));
	}
	/* Sixteen vectors of sixteen lane sums into one vector of sixteen
	 * sums: halves, quarters, pairs, then neighbours. */
	__m512i r1[8], r2[4], r3[2];
	for (int i = 0; i < 8; i++)
		r1[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0x44),
		                         _mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0xEE));
	for (int i = 0; i < 4; i++)
		r2[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(r1[2 * i], r1[2 * i + 1], 0x88),
		                         _mm512_shuffle_i32x4(r1[2 * i], r1[2 * i + 1], 0xDD));
	for (int i = 0; i < 2; i++)
		r3[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(r2[2 * i], r2[2 * i + 1]), _mm512_unpackhi_epi64(r2[2 * i], r2[2 * i + 1]));
	__m512 x = _mm512_castsi512_ps(r3[0]), y = _mm512_castsi512_ps(r3[1]);
	__m512i r4 = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0))),
	                              _mm512_castps_si512(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1))));
	/* Lane 4k+i holds token 4i+k. */
	r4 = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r4);
	int32_t tmp[16];
	_mm512_storeu_si512((void *)tmp, r4);
	for (int t = 0; t < n; t++) out[t] = tmp[t];
}
#elif defined(__AVX2__)
/* idot_both is idot_rows for Q (into S) and Qc (into Sc) in one pass:
 * four rows at a time share each load of their codes, eight accumulators
 * in registers (a short tile's last rows repeat its first, unstored). */
static void idot_both(const int16_t *Q, const int16_t *Qc, const int16_t *cb, int Dp, int n, int32_t *S, int32_t *Sc) {
	for (int t0 = 0; t0 < n; t0 += 4) {
		const int16_t *r[4];
		for (int t = 0; t < 4; t++) r[t] = cb + (int64_t)(t0 + t < n ? t0 + t : t0) * Dp;
		__m256i a[4], b[4];
		for (int t = 0; t < 4; t++) a[t] = b[t] = _mm256_setzero_si256();
		for (int c = 0; c < Dp; c += 16) {
			__m256i qv = _mm256_loadu_si256((const __m256i *)(Q + c)), cv = _mm256_loadu_si256((const __m256i *)(Qc + c));
			for (int t = 0; t < 4; t++) {
				__m256i k = _mm256_loadu_si256((const __m256i *)(r[t] + c));
				a[t] = _mm256_add_epi32(a[t], _mm256_madd_epi16(qv, k));
				b[t] = _mm256_add_epi32(b[t], _mm256_madd_epi16(cv, k));
			}
		}
		/* Lane i of each half: row i's sum over that half's lanes. */
		__m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
		__m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(b[0], b[1]), _mm256_hadd_epi32(b[2], b[3]));
		int32_t ts[4], tc[4];
		_mm_storeu_si128((__m128i *)ts, _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)));
		_mm_storeu_si128((__m128i *)tc, _mm_add_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1)));
		for (int t = 0; t < 4 && t0 + t < n; t++) S[t0 + t] = ts[t], Sc[t0 + t] = tc[t];
	}
}
#else
static void idot_rows(const int16_t *Q, const int16_t *cb, int Dp, int n, int32_t *out) {
	for (int t = 0; t < n; t++) {
		int32_t s = 0;
		for (int d = 0; d < Dp; d++) s += (int32_t)Q[d] * cb[(int64_t)t * Dp + d];
		out[t] = s;
	}
}
#endif

#if !defined(__AVX2__) || defined(__AVX512BW__)
/* idot_both is idot_rows for Q (into S) and Qc (into Sc). */
static void idot_both(const int16_t *Q, const int16_t *Qc, const int16_t *cb, int Dp, int n, int32_t *S, int32_t *Sc) {
	idot_rows(Q, cb, Dp, n, S);
	idot_rows(Qc, cb, Dp, n, Sc);
}
#endif

#if defined(__AVX512F__)
/* qs_amax16 is the largest |q[d]*s[d]| for d < n (a multiple of 16), in
 * sixteen lanes: exact in any order (no lane is NaN). */
static inline float qs_amax16(const float *q, const float *s, int n) {
	__m512 a = _mm512_setzero_ps();
	for (int d = 0; d < n; d += 16) a = _mm512_max_ps(_mm512_abs_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(s + d))), a);
	return _mm512_reduce_max_ps(a);
}
#endif

/* quant_query rounds q'[d] = q[d]*s[d] to 22-bit codes X[d] =
 * rint(clamp(q'[d]*(KVS_QX/amax))) (amax the largest |q'[d]|, exact in any
 * order), split as X = 128*Q[d] + Qc[d] with Q in int16 (-16384..16383) and
 * Qc in 0..127 (zero past D); it returns the step amax/KVS_QX. Every path
 * does the same operations. */
static float quant_query(const float *q, const float *s, int D, int Dp, int16_t *Q, int16_t *Qc) {
	const float QM = (float)KVS_QX;
	float amax = 0;
	int d = 0;
#if defined(__AVX512F__)
	amax = qs_amax16(q, s, D / 16 * 16), d = D / 16 * 16;
#elif defined(__AVX2__)
	{
		__m256 a = _mm256_setzero_ps(), mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
		for (; d + 8 <= D; d += 8)
			a = _mm256_max_ps(_mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(s + d)), mask), a);
		float l[8];
		_mm256_storeu_ps(l, a);
		for (int i = 0; i < 8; i++) amax = l[i] > amax ? l[i] : amax;
	}
#endif
	for (; d < D; d++) {
		float a = fabsf(q[d] * s[d]);
		amax = a > amax ? a : amax;
	}
	float inv = amax > 0 ? QM / amax : 0;
	if (!(inv < INFINITY)) inv = 0; /* amax under about 6e-33: every code 0 */
	d = 0;
#if defined(__AVX512F__)
	{
		__m512 iv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-QM), hi = _mm512_set1_ps(QM);
		for (; d + 16 <= D; d += 16) {
			__m512 x = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(s + d)), iv);
			__m512i X = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(x, lo), hi));
			_mm256_storeu_si256((__m256i *)(Q + d), _mm512_cvtepi32_epi16(_mm512_srai_epi32(X, 7)));
			_mm256_storeu_si256((__m256i *)(Qc + d), _mm512_cvtepi32_epi16(_mm512_and_si512(X, _mm512_set1_epi32(127))));
		}
	}
#elif defined(__AVX2__)
	{
		/* Sixteen channels at a time; packs_epi32 interleaves 128-bit
		 * halves, which permute4x64 puts back in order. */
		__m256 iv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-QM), hi = _mm256_set1_ps(QM);
		__m256i m127 = _mm256_set1_epi32(127);
		for (; d + 16 <= D; d += 16) {
			__m256i X[2];
			for (int u = 0; u < 2; u++) {
				__m256 x = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(q + d + 8 * u), _mm256_loadu_ps(s + d + 8 * u)), iv);
				X[u] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(x, lo), hi));
			}
			__m256i qh = _mm256_packs_epi32(_mm256_srai_epi32(X[0], 7), _mm256_srai_epi32(X[1], 7));
			__m256i ql = _mm256_packs_epi32(_mm256_and_si256(X[0], m127), _mm256_and_si256(X[1], m127));
			_mm256_storeu_si256((__m256i *)(Q + d), _mm256_permute4x64_epi64(qh, 0xD8));
			_mm256_storeu_si256((__m256i *)(Qc + d), _mm256_permute4x64_epi64(ql, 0xD8));
		}
	}
#endif
	for (; d < D; d++) {
		/* max(x, -QM) then min(., QM), as the SIMD lanes: NaN becomes -QM. */
		float x = q[d] * s[d] * inv;
		x = x > -QM ? x : -QM;
		x = x < QM ? x : QM;
		int32_t X = (int32_t)rintf(x);
		Q[d] = (int16_t)((X - (X & 127)) / 128), Qc[d] = (int16_t)(X & 127);
	}
	for (; d < Dp; d++) Q[d] = Qc[d] = 0;
	return amax / QM;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* transpose_tile writes x[j] (j < nd, a multiple of 8) with lane t holding
 * dword j of the 16 rows at src (row_bytes apart): per eight dwords, two
 * 8x8 transposes side by side, rows t and t+8 in one register's halves. */
static void transpose_tile(const uint8_t *src, int64_t row_bytes, int nd, __m512i *x) {
	const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
	for (int c = 0; c < nd; c += 8) {
		__m512i z[8], t[8], u[8];
		for (int r = 0; r < 8; r++)
			z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(src + r * row_bytes + 4 * c))),
			                          _mm256_loadu_si256((const __m256i *)(src + (r + 8) * row_bytes + 4 * c)), 1);
		for (int r = 0; r < 8; r += 2) {
			t[r] = _mm512_unpacklo_epi32(z[r], z[r + 1]);
			t[r + 1] = _mm512_unpackhi_epi32(z[r], z[r + 1]);
		}
		for (int r = 0; r < 8; r += 4) {
			u[r] = _mm512_unpacklo_epi64(t[r], t[r + 2]);
			u[r + 1] = _mm512_unpackhi_epi64(t[r], t[r + 2]);
			u[r + 2] = _mm512_unpacklo_epi64(t[r + 1], t[r + 3]);
			u[r + 3] = _mm512_unpackhi_epi64(t[r + 1], t[r + 3]);
		}
		for (int j = 0; j < 4; j++) {
			x[c + j] = _mm512_permutex2var_epi64(u[j], lo, u[j + 4]);
			x[c + j + 4] = _mm512_permutex2var_epi64(u[j], hi, u[j + 4]);
		}
	}
}

/* The VNNI path (head dims a multiple of 32) sums no lanes across: a tile's
 * tn <= 16 key rows are gathered (a whole tile of rows a multiple of 32
 * bytes is loaded and transposed) four bytes a token into registers of
 * sixteen tokens (int8 codes plus 128, as unsigned bytes; int4 bytes split
 * into their even and odd channels' nibbles), and each head's Q, split as
 * 128*Qh + Ql (Qh in -128..127, Ql in 0..127), takes two vpdpbusd a
 * register, lane t summing token t. The sums wrap in uint32 (the int8 codes'
 * offset times sum(Q) may pass 2^31) to the exact int32 sum. */
static int expand_tile(int prec, const uint8_t *src, int64_t row_bytes, int tn, int D, __m512i *kt) {
	__mmask16 mk = tn >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << tn) - 1);
	__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)row_bytes));
	int nd = prec == KVS_KV_INT8 ? D / 4 : D / 8;
	__m512i tr[KVS_MAX_HEAD_DIM / 4];
	int whole = tn == 16 && nd % 8 == 0;
	if (whole) transpose_tile(src, row_bytes, nd, tr);
	for (int j = 0; j < nd; j++) {
		__m512i x = whole ? tr[j] : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk, idx, src + 4 * j, 1);
		if (prec == KVS_KV_INT8) {
			kt[j] = _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
		} else {
			kt[2 * j] = _mm512_and_si512(x, _mm512_set1_epi8(15));
			kt[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi32(x, 4), _mm512_set1_epi8(15));
		}
	}
	return D / 4;
}

/* prep_query is quant_query's codes split for the VNNI path, for D a
 * multiple of 32 (the same float operations): it writes the bytes Q>>7 and
 * Q&127 (qa, qb) and Qc (qc), in the order of expand_tile's registers (int4:
 * channels 0,2,4,6 then 1,3,5,7 of each eight), for int8 sums gets sum(Q)
 * and sum(Qc), and it returns the step. */
static float prep_query(int prec, const float *q, const float *s, int D, int8_t *qa, int8_t *qb, int8_t *qc, int32_t *sums) {
	const float QM = (float)KVS_QX;
	float amax = qs_amax16(q, s, D);
	float inv = amax > 0 ? QM / amax : 0;
	if (!(inv < INFINITY)) inv = 0;
	/* int4: channels 0,2,4,6 then 1,3,5,7 of each eight, as expand_tile. */
	const __m512i perm = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
	__m512 iv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-QM), hi = _mm512_set1_ps(QM);
	__m512i s1 = _mm512_setzero_si512(), s2 = _mm512_setzero_si512(), m127 = _mm512_set1_epi32(127);
	for (int d = 0; d < D; d += 16) {
		__m512 x = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(s + d)), iv);
		__m512i X = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(x, lo), hi));
		if (prec == KVS_KV_INT4) X = _mm512_permutexvar_epi32(perm, X);
		__m512i Q = _mm512_srai_epi32(X, 7), Qc = _mm512_and_si512(X, m127);
		if (prec == KVS_KV_INT8) s1 = _mm512_add_epi32(s1, Q), s2 = _mm512_add_epi32(s2, Qc);
		_mm_storeu_si128((__m128i *)(qa + d), _mm512_cvtepi32_epi8(_mm512_srai_epi32(Q, 7)));
		_mm_storeu_si128((__m128i *)(qb + d), _mm512_cvtepi32_epi8(_mm512_and_si512(Q, m127)));
		_mm_storeu_si128((__m128i *)(qc + d), _mm512_cvtepi32_epi8(Qc));
	}
	if (prec == KVS_KV_INT8) sums[0] = _mm512_reduce_add_epi32(s1), sums[1] = _mm512_reduce_add_epi32(s2);
	return amax / QM;
}

/* tile_isums sets S (sum code*Q) and Sc (sum code*Qc) for the sixteen
 * lanes from the nr registers kt, less the codes' offset times sum(Q) and
 * sum(Qc) (int8), wrapping to the exact int32 sums. */
static inline void tile_isums(const __m512i *kt, int nr, const int8_t *qa, const int8_t *qb, const int8_t *qc, int32_t off1,
                              int32_t off2, __m512i *S, __m512i *Sc) {
	__m512i aa = _mm512_setzero_si512(), ab = _mm512_setzero_si512(), ac = _mm512_setzero_si512();
	for (int j = 0; j < nr; j++) {
		int32_t a4, b4, c4;
		memcpy(&a4, qa + 4 * j, 4);
		memcpy(&b4, qb + 4 * j, 4);
		memcpy(&c4, qc + 4 * j, 4);
		aa = _mm512_dpbusd_epi32(aa, kt[j], _mm512_set1_epi32(a4));
		ab = _mm512_dpbusd_epi32(ab, kt[j], _mm512_set1_epi32(b4));
		ac = _mm512_dpbusd_epi32(ac, kt[j], _mm512_set1_epi32(c4));
	}
	*S = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(aa, 7), ab), _mm512_set1_epi32(off1));
	*Sc = _mm512_sub_epi32(ac, _mm512_set1_epi32(off2));
}
#endif

/* prefetch_ahead keeps KV head h's keys (into L1) and values (into L2)
 * asked for from pf up to three tiles past position p (of np), once fewer
 * than two tiles past p are; it returns the new pf. */
static inline int prefetch_ahead(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, const int32_t *tab,
                                 int h, int p, int np, int pf) {
	if (pf >= np || pf >= p + 2 * KVS_TILE) return pf;
	int e = p + 3 * KVS_TILE < np ? p + 3 * KVS_TILE : np;
	prefetch_rows(k, layer, tab, h, pf, e, 0);
	prefetch_rows(v, layer, tab, h, pf, e, 1);
	return e;
}

#if defined(__AVX512F__)
/* reduce16 returns, in lane t, register a[t]'s sixteen lanes summed as
 * dot_any sums them: lanes (l, l+8), then (l, l+4), (l, l+2) and (l, l+1),
 * sixteen registers at once (idot_rows's tree, in float: each add pairs the
 * same two values, so the bits are dot_any's). */
static inline __m512 reduce16(const __m512 *a) {
	__m512 r1[8], r2[4], r3[2];
	for (int i = 0; i < 8; i++)
		r1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
	for (int i = 0; i < 4; i++)
		r2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r1[2 * i], r1[2 * i + 1], 0x88),
		                      _mm512_shuffle_f32x4(r1[2 * i], r1[2 * i + 1], 0xDD));
	for (int i = 0; i < 2; i++) {
		__m512d x = _mm512_castps_pd(r2[2 * i]), y = _mm512_castps_pd(r2[2 * i + 1]);
		r3[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
	}
	__m512 r4 = _mm512_add_ps(_mm512_shuffle_ps(r3[0], r3[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(r3[0], r3[1], _MM_SHUFFLE(3, 1, 3, 1)));
	/* Lane 4k+i holds register 4i+k. */
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r4);
}

/* tile_scores writes sc[t] = dot_any(rows[t], q, D)*scale for t < n <= 16
 * (float rows, D a multiple of 16; rows[t] for t >= n must be readable, and
 * their sums are not stored): the sixteen rows' products side by side,
 * sixteen chains of adds instead of one, and their lanes summed together
 * (reduce16). Same bits as row_scores. */
static inline void tile_scores(const float *const *rows, int n, const float *q, int D, float scale, float *sc) {
	__m512 a[16];
	for (int t = 0; t < 16; t++) a[t] = _mm512_setzero_ps();
	for (int c = 0; c < D; c += 16) {
		__m512 qv = _mm512_loadu_ps(q + c);
		for (int t = 0; t < 16; t++) a[t] = _mm512_add_ps(a[t], _mm512_mul_ps(_mm512_loadu_ps(rows[t] + c), qv));
	}
	__m512 r = _mm512_mul_ps(reduce16(a), _mm512_set1_ps(scale));
	_mm512_mask_storeu_ps(sc, n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1), r);
}
#endif

/* group_scores scores tokens t0..t0+n-1 (slots of layer-block lb, one key
 * group gi of KV head g, quantized) for the group's query heads: sc[hh*m + i]
 * for token t0+i. */
static void group_scores(const struct kvs_kv_plane *k, int64_t lb, int g, int gi, int t0, int n, const float *qg, int group,
                         float scale, const float *fp8tab, float *sc, int64_t m) {
	int D = k->head_dim, B = k->block_size, Dp = (D + 31) & ~31;
	float s[KVS_MAX_HEAD_DIM], z[KVS_MAX_HEAD_DIM];
	kvs_key_group_scales(k, lb, g, gi, s, z);
	const uint8_t *src = (const uint8_t *)k->data + lb * k->data_per_block + (int64_t)(g * B + t0) * k->row_bytes;
	if (k->prec == KVS_KV_FP8) {
		float kr[KVS_MAX_HEAD_DIM];
		for (int i = 0; i < n; i++) {
			const uint8_t *r = src + (int64_t)i * k->row_bytes;
			for (int d = 0; d < D; d++) kr[d] = fp8tab[r[d]] * s[d];
			row_scores(kr, qg, group, D, scale, sc + i, m);
		}
		return;
	}
	int16_t cb[KVS_TILE * KVS_MAX_HEAD_DIM], Q[KVS_MAX_HEAD_DIM], Qc[KVS_MAX_HEAD_DIM];
	int32_t isum[KVS_TILE], isc[KVS_TILE];
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
	if (D % 32 == 0) {
		__m512i kt[KVS_MAX_HEAD_DIM / 4];
		int8_t qa[KVS_MAX_HEAD_DIM], qb[KVS_MAX_HEAD_DIM], qc[KVS_MAX_HEAD_DIM];
		/* int4: the query heads' dot products with the zero points, four
		 * at a time (dot_any4: dot_any's bits). */
		float czs[KVS_MAX_GROUP];
		int hz = 0;
		if (k->prec == KVS_KV_INT4) {
			for (; hz + 4 <= group; hz += 4) {
				const float *qs[4] = {qg + hz * D, qg + (hz + 1) * D, qg + (hz + 2) * D, qg + (hz + 3) * D};
				dot_any4(z, 0, qs, D, czs + hz);
			}
			for (; hz < group; hz++) czs[hz] = dot_any(z, 0, qg + (int64_t)hz * D, D);
		}
		for (int i0 = 0; i0 < n; i0 += KVS_TILE) {
			int tn = n - i0 < KVS_TILE ? n - i0 : KVS_TILE;
			int nr = expand_tile(k->prec, src + (int64_t)i0 * k->row_bytes, k->row_bytes, tn, D, kt);
			for (int hh = 0; hh < group; hh++) {
				const float *qh = qg + (int64_t)hh * D;
				int32_t sums[2] = {0, 0};
				float qd = prep_query(k->prec, qh, s, D, qa, qb, qc, sums);
				float cz = k->prec == KVS_KV_INT4 ? czs[hh] : 0.0f;
				/* int8: the codes' offset, 128*sum, in uint32. */
				int i8 = k->prec == KVS_KV_INT8;
				__m512i S, Sc;
				tile_isums(kt, nr, qa, qb, qc, i8 ? (int32_t)((uint32_t)sums[0] * 128u) : 0, i8 ? (int32_t)((uint32_t)sums[1] * 128u) : 0, &S, &Sc);
				__m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(S), _mm512_set1_ps(128.0f)), _mm512_cvtepi32_ps(Sc));
				f = _mm512_mul_ps(_mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(qd)), _mm512_set1_ps(cz)), _mm512_set1_ps(scale));
				_mm512_mask_storeu_ps(sc + hh * m + i0, tn >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << tn) - 1), f);
			}
		}
		return;
	}
#endif
	for (int i0 = 0; i0 < n; i0 += KVS_TILE) {
		int tn = n - i0 < KVS_TILE ? n - i0 : KVS_TILE;
		widen_codes(k->prec, src + (int64_t)i0 * k->row_bytes, k->row_bytes, tn, D, Dp, cb);
		for (int hh = 0; hh < group; hh++) {
			const float *qh = qg + (int64_t)hh * D;
			float qd = quant_query(qh, s, D, Dp, Q, Qc);
			float cz = k->prec == KVS_KV_INT4 ? dot_any(z, 0, qh, D) : 0.0f;
			idot_both(Q, Qc, cb, Dp, tn, isum, isc);
			float *o = sc + hh * m + i0;
			for (int i = 0; i < tn; i++) o[i] = (((float)isum[i] * 128.0f + (float)isc[i]) * qd + cz) * scale;
		}
	}
}

/* value_row returns head h, slot t of layer-block lb of value plane v as
 * floats: in place for f32, else decoded into buf (int8 rows with SIMD, the
 * same operations as kvs_decode_row; int4 rows still rotated,
 * kvs_int4_vrow, with dtab). */
static inline const float *value_row(const struct kvs_kv_plane *v, int64_t lb, int h, int t, const float *fp8tab, const float *dtab,
                                     float *buf) {
	int D = v->head_dim;
	if (v->prec == KVS_KV_F32) return (const float *)v->data + lb * v->data_per_block + (int64_t)(h * v->block_size + t) * D;
	if (v->prec == KVS_KV_INT4) {
		kvs_int4_vrow(v, lb, h, t, dtab, buf);
		return buf;
	}
#if defined(__AVX2__)
	if (v->prec == KVS_KV_INT8) {
		const uint8_t *src = (const uint8_t *)v->data + lb * v->data_per_block + (int64_t)(h * v->block_size + t) * v->row_bytes;
		const uint8_t *sc8 = (const uint8_t *)v->scale;
		int G = v->group;
		int64_t si = lb * v->scales_per_block + (int64_t)t * v->groups;
		for (int d0 = 0; d0 < D;) {
			int gg = (h * D + d0) / G, d1 = (gg + 1) * G - h * D;
			if (d1 > D) d1 = D;
			float s = kvs_s8(sc8[si + gg]);
			int d = d0;
#if defined(__AVX512F__)
			__m512 sv = _mm512_set1_ps(s);
			for (; d + 16 <= d1; d += 16)
				_mm512_storeu_ps(buf + d, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + d)))), sv));
#else
			__m256 sv = _mm256_set1_ps(s);
			for (; d + 8 <= d1; d += 8)
				_mm256_storeu_ps(buf + d, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + d)))), sv));
#endif
			for (; d < d1; d++) buf[d] = (float)(int8_t)src[d] * s;
			d0 = d1;
		}
		return buf;
	}
#endif
	kvs_decode_row(v, lb, h, t, NULL, fp8tab, buf);
	return buf;
}

#if defined(__AVX512F__)
/* vrow16 returns values 16c..16c+15 of a tile's row: f32 (kind 0), f16 or
 * bf16 bits (1, 2), or int8 or q8_0 (3) or int4 (4) codes of one value
 * group with scale rs[c] decoded as value_row does (int4 rows still
 * rotated). */
static inline __attribute__((always_inline)) __m512 vrow16(const int kind, const void *row, int c, const float *rs) {
	if (kind <= 2) return load16(row, kind, 16 * c);
	const uint8_t *b = (const uint8_t *)row;
	__m512 sv = _mm512_set1_ps(rs[c]);
	if (kind == 3) return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 16 * c)))), sv);
	return _mm512_mul_ps(sv, _mm512_permutexvar_ps(kvs_nibbles16(b + 8 * c), _mm512_loadu_ps(kvs_iq4)));
}

/* vsum_tile adds, for H query heads, out_h += w_h[i] * row_i for the
 * tile's n rows in order (each product rounded, then added), with the H*C
 * 16-lane sums (C = head_dim/16) in registers between out's load and store:
 * C, H and kind are constants at each call; rs are the rows' scales, 16
 * a row, one a 16 values (kinds 3, 4). */
static inline __attribute__((always_inline)) void vsum_tile(const int C, const int H, const int kind, const void *const *rows,
                                                            const float *rs, int n, const float *w, int64_t m,
                                                            float *out) {
	int D = 16 * C;
	/* Fixed sizes (H*C <= 16): C and H are not constant expressions, and a
	 * variable-length array would live in memory. */
	__m512 acc[16], pr[4];
	for (int h = 0; h < H; h++)
		for (int c = 0; c < C; c++) acc[h * C + c] = _mm512_loadu_ps(out + h * D + 16 * c);
	for (int i = 0; i < n; i++) {
		for (int h = 0; h < H; h++) pr[h] = _mm512_set1_ps(w[(int64_t)h * m + i]);
		for (int c = 0; c < C; c++) {
			__m512 vr = vrow16(kind, rows[i], c, rs + 16 * i);
			for (int h = 0; h < H; h++) acc[h * C + c] = _mm512_add_ps(acc[h * C + c], _mm512_mul_ps(pr[h], vr));
		}
	}
	for (int h = 0; h < H; h++)
		for (int c = 0; c < C; c++) _mm512_storeu_ps(out + h * D + 16 * c, acc[h * C + c]);
}

/* vsum_tile's instances, one function each: [head dim 64, 96, 128,
 * 256][H = 4, 2, 2, 1 heads a pass (16, 12, 16, 16 accumulators), or one
 * head][kind]. */
typedef void (*vsum_fn)(const void *const *, const float *, int, const float *, int64_t, float *);
#define KVS_VSUM_FN(name, C, H, kind)                                                                                      \
	static void name(const void *const *rows, const float *rs, int n, const float *w, int64_t m, float *out) {           \
		vsum_tile(C, H, kind, rows, rs, n, w, m, out);                                                                 \
	}
#define KVS_VSUM_KINDS(name, C, H)                                                                                         \
	KVS_VSUM_FN(name##_0, C, H, 0)                                                                                         \
	KVS_VSUM_FN(name##_1, C, H, 1)                                                                                         \
	KVS_VSUM_FN(name##_2, C, H, 2) KVS_VSUM_FN(name##_3, C, H, 3) KVS_VSUM_FN(name##_4, C, H, 4)
KVS_VSUM_KINDS(vsum64, 4, 4)
KVS_VSUM_KINDS(vsum64h, 4, 1)
KVS_VSUM_KINDS(vsum96, 6, 2)
KVS_VSUM_KINDS(vsum96h, 6, 1)
KVS_VSUM_KINDS(vsum128, 8, 2)
KVS_VSUM_KINDS(vsum128h, 8, 1)
KVS_VSUM_KINDS(vsum256, 16, 1)
#undef KVS_VSUM_KINDS
#undef KVS_VSUM_FN
#define KVS_VSUM_ROW(name) {name##_0, name##_1, name##_2, name##_3, name##_4}
static const vsum_fn vsum_fns[4][2][5] = {{KVS_VSUM_ROW(vsum64), KVS_VSUM_ROW(vsum64h)},
                                          {KVS_VSUM_ROW(vsum96), KVS_VSUM_ROW(vsum96h)},
                                          {KVS_VSUM_ROW(vsum128), KVS_VSUM_ROW(vsum128h)},
                                          {KVS_VSUM_ROW(vsum256), KVS_VSUM_ROW(vsum256)}};
#undef KVS_VSUM_ROW
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
/* vsum8_tile adds, for H (1 or 2) query heads, out_h[c0..c0+31] +=
 * (w_h[i]*inv_h) * row_i[c0..c0+31] for the tile's n rows in order (each
 * product rounded, then added: the scalar loop's bits), with the 4*H
 * eight-lane sums in registers between out's load and store; rows are f32
 * (kind 0), f16 bits (1) or bf16 bits (2), D values a head in out. */
static inline __attribute__((always_inline)) void vsum8_tile(const int kind, const int H, const void *const *rows, int c0,
                                                             int n, const float *w, int64_t m,
                                                             float *out, int D) {
	__m256 acc[2][4], pr[2];
	for (int h = 0; h < H; h++)
		for (int c = 0; c < 4; c++) acc[h][c] = _mm256_loadu_ps(out + h * D + c0 + 8 * c);
	for (int i = 0; i < n; i++) {
		for (int h = 0; h < H; h++) pr[h] = _mm256_set1_ps(w[(int64_t)h * m + i]);
		for (int c = 0; c < 4; c++) {
			__m256 vr = load8(rows[i], kind, c0 + 8 * c);
			for (int h = 0; h < H; h++) acc[h][c] = _mm256_add_ps(acc[h][c], _mm256_mul_ps(pr[h], vr));
		}
	}
	for (int h = 0; h < H; h++)
		for (int c = 0; c < 4; c++) _mm256_storeu_ps(out + h * D + c0 + 8 * c, acc[h][c]);
}

/* vsum8 runs vsum8_tile with kind and H as constants. */
static void vsum8(int kind, int H, const void *const *rows, int c0, int n, const float *w, int64_t m, float *out, int D) {
#define V(K, HH) vsum8_tile(K, HH, rows, c0, n, w, m, out, D)
	switch (kind * 2 + H - 1) {
	case 0: V(0, 1); break;
	case 1: V(0, 2); break;
	case 2: V(1, 1); break;
	case 3: V(1, 2); break;
	case 4: V(2, 1); break;
	default: V(2, 2);
	}
#undef V
}
#endif

/* arow is one row's call to attention: what the span functions share. */
struct arow {
	const struct kvs_kv_plane *k, *v;
	int32_t layer, group;
	int p0, np, m; /* positions p0..np-1, m = np - p0 */
	float scale;
	const int32_t *tab; /* the row's block table */
	const uint8_t *const *resid; /* the row's k_resid entries (keys with key groups) */
	const float *fp8tab, *dtab;
};

/* scores writes KV head g's query heads' (qg) scores of positions pa..pb-1
 * into sc[hh*m + p - p0]; with ahead, it keeps the keys (into L1) and
 * values (into L2) of the tiles ahead asked for (prefetch_ahead). */
static void scores(const struct arow *a, int g, const float *qg, int pa, int pb, int ahead, float *sc) {
	const struct kvs_kv_plane *k = a->k;
	int D = k->head_dim, B = k->block_size, group = a->group, m = a->m, p0 = a->p0;
	int32_t layer = a->layer;
	const int32_t *tab = a->tab;
	float kb[KVS_MAX_HEAD_DIM];
	int pf = ahead ? pa + 1 : pb; /* positions before pf are asked for */
#if defined(__AVX512F__)
	if (!k->key && D % 16 == 0 && D <= 256) {
		/* Sixteen positions at a time: their key rows decoded (or read
		 * in place) once, then each query head scores them side by
		 * side (tile_scores). */
		float kt[KVS_TILE * 256];
		const float *rows[KVS_TILE];
		for (int p = pa; p < pb; p += KVS_TILE) {
			int tn = pb - p < KVS_TILE ? pb - p : KVS_TILE;
			pf = prefetch_ahead(a->k, a->v, layer, tab, g, p, pb, pf);
			for (int i = 0, j = p / B, t = p % B; i < KVS_TILE; i++) {
				int64_t lb = (int64_t)layer * k->blocks + tab[j];
				if (i >= tn)
					rows[i] = rows[0];
				else if (k->prec == KVS_KV_F32)
					rows[i] = (const float *)k->data + lb * k->data_per_block + (int64_t)(g * B + t) * D;
				else if (k->prec <= KVS_KV_BF16) {
					/* f16, bf16: widened here, sixteen at a time. */
					const uint16_t *h = (const uint16_t *)k->data + lb * k->data_per_block + (int64_t)(g * B + t) * D;
					for (int d = 0; d < D; d += 16) _mm512_storeu_ps(kt + i * D + d, load16(h, k->prec == KVS_KV_F16 ? 1 : 2, d));
					rows[i] = kt + i * D;
				} else if (k->prec == KVS_KV_Q8_0 && k->group % 16 == 0) {
					/* q8_0: sixteen codes at a time times their group's
					 * scale, kvs_decode_row's products. */
					const int8_t *src = (const int8_t *)k->data + lb * k->data_per_block + (int64_t)(g * B + t) * k->row_bytes;
					const uint16_t *ks = (const uint16_t *)k->scale + lb * k->scales_per_block + (int64_t)t * k->groups;
					for (int d = 0; d < D; d += 16) {
						__m512 sv = _mm512_set1_ps(kvs_h2f(ks[(g * D + d) / k->group]));
						__m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + d))));
						_mm512_storeu_ps(kt + i * D + d, _mm512_mul_ps(q, sv));
					}
					rows[i] = kt + i * D;
				} else
					kvs_decode_row(k, lb, g, t, NULL, a->fp8tab, kt + i * D), rows[i] = kt + i * D;
				if (++t == B) t = 0, j++;
			}
			for (int hh = 0; hh < group; hh++) tile_scores(rows, tn, qg + (int64_t)hh * D, D, a->scale, sc + (int64_t)hh * m + p - p0);
		}
		return;
	}
#endif
	for (int p = pa; p < pb;) {
		int j = p / B, t = p % B;
		int64_t lb = (int64_t)layer * k->blocks + tab[j];
		pf = prefetch_ahead(a->k, a->v, layer, tab, g, p, pb, pf);
		if (k->key) {
			/* The rest of the key group (or of the span). */
			int G = k->group, gi = t / G, te = (gi + 1) * G < B ? (gi + 1) * G : B, nt = te - t;
			if (nt > pb - p) nt = pb - p;
			const uint8_t *res = a->resid[j * k->groups + gi];
			if (res) {
				for (int i = 0; i < nt; i++) {
					kvs_decode_row(k, lb, g, t + i, res, a->fp8tab, kb);
					row_scores(kb, qg, group, D, a->scale, sc + p - p0 + i, m);
				}
			} else {
				group_scores(k, lb, g, gi, t, nt, qg, group, a->scale, a->fp8tab, sc + p - p0, m);
			}
			p += nt;
			continue;
		}
		const float *kr = kb;
		if (k->prec == KVS_KV_F32)
			kr = (const float *)k->data + lb * k->data_per_block + (int64_t)(g * B + t) * D;
		else
			kvs_decode_row(k, lb, g, t, NULL, a->fp8tab, kb);
		row_scores(kr, qg, group, D, a->scale, sc + p - p0, m);
		p++;
	}
}

/* softmax turns each of the group's rows of scores sc (m each) into
 * weights: the max in sixteen lanes (the same value as in order), exp, the
 * heads' sums in double side by side, each in position order, and each
 * weight exp(score - max) * (1/sum), once a position (the same product the
 * weighted sums used to take a pass). */
static void softmax(int group, int m, float *sc) {
	double sum[KVS_MAX_GROUP];
	for (int hh = 0; hh < group; hh++) {
		float *s = sc + (int64_t)hh * m, lane[16];
		for (int l = 0; l < 16; l++) lane[l] = -INFINITY;
		int i = 0;
		for (; i + 16 <= m; i += 16)
			for (int l = 0; l < 16; l++) lane[l] = s[i + l] > lane[l] ? s[i + l] : lane[l];
		for (; i < m; i++) lane[0] = s[i] > lane[0] ? s[i] : lane[0];
		float mx = lane[0];
		for (int l = 1; l < 16; l++) mx = lane[l] > mx ? lane[l] : mx;
		i = 0;
#if defined(__AVX2__)
		for (__m256 mv = _mm256_set1_ps(mx); i + 8 <= m; i += 8)
			_mm256_storeu_ps(s + i, kvs_expf8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv)));
#endif
		for (; i < m; i++) s[i] = kvs_expf(s[i] - mx);
		sum[hh] = 0;
	}
	for (int i = 0; i < m; i++)
		for (int hh = 0; hh < group; hh++) sum[hh] += (double)sc[(int64_t)hh * m + i];
	for (int hh = 0; hh < group; hh++) {
		float inv = (float)(1 / sum[hh]), *s = sc + (int64_t)hh * m;
		for (int i = 0; i < m; i++) s[i] *= inv;
	}
}

/* tile_rows points rows[i] at KV head g's value rows of the tile at t0 (tn
 * positions of span pa..pb-1), having asked for them into L1 at the span's
 * start and for the next tile's: read in place (kind 1, 2: f16, bf16),
 * their codes with each 16 values' scale in rs (3, 4: int8 or q8_0, int4),
 * or decoded into vt (0, value_row). */
static inline __attribute__((always_inline)) void tile_rows(const struct arow *a, int g, int pa, int pb, int t0, int tn,
                                                            const int kind, const void **rows, float *rs, float *vt) {
	const struct kvs_kv_plane *v = a->v;
	int D = v->head_dim, B = v->block_size;
	if (t0 == pa) prefetch_rows(v, a->layer, a->tab, g, t0, t0 + tn, 0);
	if (t0 + tn < pb) prefetch_rows(v, a->layer, a->tab, g, t0 + tn, pb - t0 - tn < KVS_TILE ? pb : t0 + tn + KVS_TILE, 0);
	for (int i = 0; i < tn; i++) {
		int p = t0 + i, j = p / B, t = p % B;
		int64_t lb = (int64_t)a->layer * v->blocks + a->tab[j];
		if (kind == 1 || kind == 2) {
			rows[i] = (const uint16_t *)v->data + lb * v->data_per_block + (int64_t)(g * B + t) * D;
		} else if (kind) {
			int64_t si = lb * v->scales_per_block + (int64_t)t * v->groups;
			rows[i] = (const uint8_t *)v->data + lb * v->data_per_block + (int64_t)(g * B + t) * v->row_bytes;
			for (int c = 0; c < D / 16; c++) {
				int64_t x = si + (g * D + 16 * c) / v->group;
				rs[16 * i + c] = v->prec == KVS_KV_Q8_0 ? kvs_h2f(((const uint16_t *)v->scale)[x]) : a->dtab[((const uint8_t *)v->scale)[x]];
			}
		} else {
			rows[i] = value_row(v, lb, g, t, a->fp8tab, a->dtab, vt + i * D);
		}
	}
}

/* values adds to KV head g's query heads' outputs og the weighted value
 * rows of positions pa..pb-1 (weights sc[hh*m + p - p0]), in position
 * order. */
static void values(const struct arow *a, int g, float *og, int pa, int pb, const float *sc) {
	const struct kvs_kv_plane *v = a->v;
	int D = v->head_dim, B = v->block_size, group = a->group, m = a->m, p0 = a->p0;
	int32_t layer = a->layer;
	const int32_t *tab = a->tab;
#if defined(__AVX512F__)
	if (D == 64 || D == 96 || D == 128 || D == 256) {
		/* Tiles of positions: each row is read in place or decoded
		 * once, then H heads a pass take it from L1, H*D/16
		 * accumulators in registers. */
		const int H = D == 64 ? 4 : D <= 128 ? 2 : 1;
		/* int8, q8_0 and int4 rows whose value groups hold whole runs of
		 * 16 values are decoded in registers (kinds 3, 4); int4 rows that
		 * more than one pass would decode again are decoded once into vt
		 * instead (kind 0). */
		int one = v->group % 16 == 0;
		int kind = v->prec == KVS_KV_F16 ? 1 : v->prec == KVS_KV_BF16 ? 2 : (v->prec == KVS_KV_INT8 || v->prec == KVS_KV_Q8_0) && one ? 3 : v->prec == KVS_KV_INT4 && one && group <= H ? 4 : 0;
		float vt[KVS_TILE * 256], rs[KVS_TILE * 16];
		const void *rows[KVS_TILE];
		const vsum_fn(*fn)[5] = vsum_fns[D == 64 ? 0 : D == 96 ? 1 : D == 128 ? 2 : 3];
		for (int t0 = pa; t0 < pb; t0 += KVS_TILE) {
			int tn = pb - t0 < KVS_TILE ? pb - t0 : KVS_TILE;
			tile_rows(a, g, pa, pb, t0, tn, kind, rows, rs, vt);
			for (int h0 = 0; h0 < group;) {
				int hn = group - h0 < H ? 1 : H;
				fn[hn == H ? 0 : 1][kind](rows, rs, tn, sc + (int64_t)h0 * m + t0 - p0, m, og + (int64_t)h0 * D);
				h0 += hn;
			}
		}
		return;
	}
#elif defined(__AVX2__)
	if (D % 32 == 0 && D <= 256) {
		/* Tiles of positions: each row is read in place (f32, f16,
		 * bf16) or decoded once into vt, then two heads a pass take 32
		 * of its values at a time from L1, eight accumulators in
		 * registers. */
		const int kind = v->prec == KVS_KV_F16 ? 1 : v->prec == KVS_KV_BF16 ? 2 : 0;
		float vt[KVS_TILE * 256];
		const void *rows[KVS_TILE];
		for (int t0 = pa; t0 < pb; t0 += KVS_TILE) {
			int tn = pb - t0 < KVS_TILE ? pb - t0 : KVS_TILE;
			tile_rows(a, g, pa, pb, t0, tn, kind, rows, NULL, vt);
			for (int h0 = 0; h0 < group; h0 += 2) {
				int hn = group - h0 < 2 ? 1 : 2;
				for (int c0 = 0; c0 < D; c0 += 32)
					vsum8(kind, hn, rows, c0, tn, sc + (int64_t)h0 * m + t0 - p0, m, og + (int64_t)h0 * D, D);
			}
		}
		return;
	}
#endif
	float vb[KVS_MAX_HEAD_DIM];
	for (int p = pa; p < pb; p++) {
		int j = p / B, t = p % B;
		int64_t lb = (int64_t)layer * v->blocks + tab[j];
		const float *vr = value_row(v, lb, g, t, a->fp8tab, a->dtab, vb);
		for (int hh = 0; hh < group; hh++) {
			float pr = sc[(int64_t)hh * m + p - p0], *oh = og + hh * D;
			for (int d = 0; d < D; d++) oh[d] += pr * vr[d];
		}
	}
}

/* span_end is where the span of position pa ends: the next multiple of
 * span, or np. */
static inline int span_end(int pa, int span, int np) {
	int e = (pa / span + 1) * span;
	return e < np ? e : np;
}

/* KVS_SPAN_FLOATS bounds the scores attention keeps for several KV heads
 * at once (1 MiB). */
#define KVS_SPAN_FLOATS (256 * 1024)

/* attention runs KV heads head0/group..head1/group of each row. With two
 * or more query heads a KV head (group), one KV head at a time: its keys
 * scored with the tiles ahead asked for (its values into L2, for the
 * weighted sums that follow), its softmax, its values. With one query head
 * a KV head there is too little arithmetic a row to hide the misses
 * behind: a KV head's rows of one block are a few KB (16 positions of 128
 * f16 values: 4 KB), short runs far apart that the hardware prefetcher
 * does not follow, and such a layer read its f16 K/V at about a quarter of
 * a core's rate. So there the heads go block by block: every KV head's
 * keys of one block (a block holds its KV heads' rows one after another,
 * one run of memory), then of the next; each head's softmax; the values
 * likewise (dispatch.c gives each thread its heads in one range). Their
 * scores need more room than the caller's scratch (one KV head's): up to
 * KVS_SPAN_FLOATS of a buffer of the call's own, or one head at a time in
 * scratch where that cannot be had. Keys in key groups (int8, int4, fp8)
 * compute more a byte and keep the head-by-head order, which measured
 * faster for them. Either way each head's arithmetic is done in the same
 * order. */
static int attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                     int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                     const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	int D = k->head_dim, B = k->block_size, group = heads / k->kv_heads;
	float fp8tab[256], dtab[256];
	if (k->prec == KVS_KV_FP8 || v->prec == KVS_KV_FP8)
		for (int c = 0; c < 256; c++) fp8tab[c] = kvs_fp8((uint8_t)c);
	/* The scale bytes' values: E5M3 (int8 values), signed E5M2 (int4). */
	if (v->prec == KVS_KV_INT8 || v->prec == KVS_KV_INT4)
		for (int c = 0; c < 256; c++) dtab[c] = v->prec == KVS_KV_INT8 ? kvs_s8((uint8_t)c) : kvs_z8((uint8_t)c);
	int g0 = head0 / group, g1 = head1 / group;
	for (int64_t r = 0; r < n; r++) {
		int np = n_pos[r], p0 = window > 0 && np > window ? np - window : 0;
		struct arow a = {k, v, layer, group, p0, np, np - p0, scale, tables + table_off[r],
		                 k->key ? k_resid + table_off[r] * k->groups : NULL, fp8tab, dtab};
		int64_t per = (int64_t)group * a.m;
		int ng = group > 1 || k->key ? 1 : per * (g1 - g0) <= KVS_SPAN_FLOATS ? g1 - g0 : (int)(KVS_SPAN_FLOATS / per);
		float *buf = ng > 1 ? malloc((size_t)(ng * per) * sizeof(float)) : NULL;
		if (!buf) ng = 1;
		float *sc = buf ? buf : scratch;
		/* Spans: one block each (block by block), or the whole range. */
		int span = ng > 1 ? B : np;
		for (int ga = g0; ga < g1; ga += ng) {
			int gb = ga + ng < g1 ? ga + ng : g1;
			for (int pa = p0, pb; pa < np; pa = pb) {
				pb = span_end(pa, span, np);
				for (int g = ga; g < gb; g++)
					scores(&a, g, q + (r * heads + (int64_t)g * group) * D, pa, pb, ng == 1, sc + (g - ga) * per);
			}
			for (int g = ga; g < gb; g++) {
				float *og = out + (r * heads + (int64_t)g * group) * D;
				softmax(group, a.m, sc + (g - ga) * per);
				for (int d = 0; d < group * D; d++) og[d] = 0;
			}
			for (int pa = p0, pb; pa < np; pa = pb) {
				pb = span_end(pa, span, np);
				for (int g = ga; g < gb; g++) values(&a, g, out + (r * heads + (int64_t)g * group) * D, pa, pb, sc + (g - ga) * per);
			}
			/* int4 values were weighted rotated: rotate each head's sum
			 * back once. */
			if (v->prec == KVS_KV_INT4)
				for (int g = ga; g < gb; g++)
					for (int hh = 0; hh < group; hh++) kvs_wht(out + (r * heads + (int64_t)g * group + hh) * D, D);
		}
		free(buf);
	}
	return KVS_OK;
}

int KVS_FN(kvs_attention)(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                          int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                          const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	return attention(k, v, layer, n, heads, head0, head1, window, scale, q, n_pos, tables, table_off, k_resid, scratch, out);
}
