/* packed_k.c: products of Q4_K, Q5_K and Q6_K weights in the packed layout
 * (kvscope.h, packed_layout.h), compiled once per path.
 *
 * As in packed.c, a group of 16 rows is one register of int32 lanes, lane r
 * for row r, and each 64-byte chunk of codes gives four codes of each row
 * in its low nibbles and four in its high ones (chunk k: elements 4k..4k+3
 * and 128+4k..128+4k+3 of the block). A run of chunks covers one sub-block
 * in its low nibbles and another in its high ones; each run's exact integer
 * sums are multiplied by the rows' sub-block scales (AVX-512: one vpmulld a
 * run; AVX2: vpmaddwd of int16 sums, below) and added into the block's
 * integer sum, and Q4_K/Q5_K's mins times the
 * activations' sums of each sub-block (vpmaddwd) make a second one. Per
 * (row, vector) the arithmetic is kvscope.h's, in integers but for two
 * float steps a block, so every path gives the scalar path's bits.
 *
 * With VNNI a Q4_K chunk costs five instructions a vector: one load, two
 * masks (the high nibble left in place, X16), two vpdpbusd that broadcast
 * their own activations (dp512b, simd.h). Against a load folded into both masks, a
 * shift, and separate broadcasts, a 256×2048 product from L2 on one core
 * ran 21% faster with one vector, 10% with two and 7% with eight (Q6_K,
 * with its offsets read from the activations: 10%, 19%, 23%). From memory
 * the two were level: that rate is the memory's (docs/backends.md). */
#include "packed_layout.h"
#include "simd.h"

enum { PR = KVS_PACK_ROWS };

/* PFK is how far ahead (bytes) the kernels prefetch weights into L2, as
 * packed.c's PF. The AVX-512 tiles of one or two vectors ask for nothing:
 * a block is read front to back (packed_layout.h), and the hardware
 * prefetcher alone streamed a 5632×2048 product from memory faster
 * (Q4_K at 87% of kvs_sum64's rate on one core and 90% on two, where
 * asking for each block 48 KB ahead gave 75% and 82%; Q6_K 85% and 91%
 * against 60% and 81%). From three vectors on, the tiles compute long
 * enough that the hardware prefetcher falls behind, and asking ahead gains
 * 25-40%. */
#define PFK 49152

static inline int32_t ld32k(const void *p) {
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* kcode returns row r's code of element e (unsigned: Q4_K 0..15, Q5_K
 * 0..31, Q6_K 0..63) from packed block b. */
static inline int32_t kcode(uint32_t t, const uint8_t *b, int r, int e) {
	int n = e / 128, k = (e % 128) / 4, j = e % 4;
	int32_t q = (b[pkk_code(t, k) + 4 * r + j] >> (4 * n)) & 15;
	if (t == 13) q |= ((b[pkk_high(t, k / 4) + 4 * r + j] >> (k % 4 + 4 * n)) & 1) << 4;
	if (t == 14) q |= ((b[pkk_high(t, k / 2) + 4 * r + j] >> (2 * (2 * (k % 2) + n))) & 3) << 4;
	return q;
}

/* kref is the scalar definition (the scalar and NEON paths run it): the
 * segment at sp of group g, blocks [i0, i0 + cnt) of nb a row, its sums
 * carried on from out where i0 > 0 (packed_layout.h's panels). */
static void kref(uint32_t t, const uint8_t *sp, int64_t rows, int64_t nb, int64_t g, int64_t i0, int64_t cnt,
                 const struct act256 *qx, int64_t n, float *out) {
	const int ns = (int)pkk_sub_blocks(t), ss = 256 / ns;
	const int64_t bb = pkk_block_bytes(t);
	for (int64_t v = 0; v < n; v++)
		for (int r = 0; r < PR && g * PR + r < rows; r++) {
			float acc = i0 ? out[v * rows + g * PR + r] : 0;
			for (int64_t i = 0; i < cnt; i++) {
				const uint8_t *b = sp + i * bb;
				const struct act256 *a = qx + v * nb + i0 + i;
				int32_t isum = 0, msum = 0;
				for (int s = 0; s < ns; s++) {
					int32_t sum = 0;
					for (int e = s * ss; e < (s + 1) * ss; e++) sum += kcode(t, b, r, e) * a->q[e];
					if (t == 14) {
						sum -= 32 * a->bsums[s];
						isum += sum * (int8_t)b[pkk_scales(t) + 16 * s + r];
					} else {
						isum += sum * b[pkk_scales(t) + 16 * s + r];
						msum += b[pkk_mins(t) + 32 * (s / 2) + 2 * r + s % 2] * (a->bsums[2 * s] + a->bsums[2 * s + 1]);
					}
				}
				acc = acc + (float)isum * (kvs_h2f(kvs_le16(b + pkk_d(t) + 2 * r)) * a->d);
				if (t != 14) acc = acc - (float)msum * (kvs_h2f(kvs_le16(b + pkk_dmin(t) + 2 * r)) * a->d);
			}
			out[v * rows + g * PR + r] = acc;
		}
}

#if defined(__AVX2__) || defined(__AVX512F__)
/* kprefetch asks for a block's lines PFK bytes ahead. */
static inline __attribute__((always_inline)) void kprefetch(uint32_t t, const uint8_t *b) {
	for (int64_t l = 0; l < pkk_block_bytes(t); l += 64) _mm_prefetch((const char *)b + PFK + l, _MM_HINT_T1);
}

#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)

/* kblock adds block b's products with vectors a[0], a[nb], ... (nv of them)
 * to acc. A run's sums go into ch chains a vector and nibble, chunk c into
 * chain c % ch, added at the run's end: runs of eight chunks (Q4_K, Q5_K)
 * for one or two vectors take two, so that no chain is more than four
 * vpdpbusd long (in cache, a Q4_K product waited on those chains). */
static inline __attribute__((always_inline)) void kblock(uint32_t t, const uint8_t *b, const struct act256 *a,
                                                        int64_t nb, __m512 *acc, const int nv) {
	const __m512i m4 = _mm512_set1_epi8(15);
	const int runs = t == 14 ? 8 : 4, len = 32 / runs, ch = len >= 8 && nv <= 2 ? 2 : 1;
	__m512i isum[4];
	for (int v = 0; v < nv; v++) isum[v] = _mm512_setzero_si512();
	for (int u = 0; u < runs; u++) {
		__m512i tl[2][4], th[2][4];
		for (int v = 0; v < nv; v++) {
			if (t == 14) {
				tl[0][v] = _mm512_set1_epi32(a[v * nb].off6[u]);
				th[0][v] = _mm512_set1_epi32(a[v * nb].off6[u + 8]);
			} else {
				tl[0][v] = th[0][v] = _mm512_setzero_si512();
			}
			tl[1][v] = th[1][v] = _mm512_setzero_si512();
		}
		for (int c = 0; c < len; c++) {
			const int k = u * len + c;
			__m512i raw = _mm512_loadu_si512(b + pkk_code(t, k));
			/* One load a chunk: left to itself, GCC folds the load into
			 * each instruction that reads raw, and the load ports
			 * became the bound (Q4_K's one-vector tile 18% slower from
			 * L2, Q6_K's 14%). */
			__asm__("" : "+v"(raw));
			/* Q4_K's high nibbles stay in place, as 16 times the code: the
			 * run's sum is shifted back once (it is a multiple of 16). */
			__m512i lo = _mm512_and_si512(raw, m4),
			        hi = t == 12 && X16 ? _mm512_andnot_si512(m4, raw) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
			if (t == 13) {
				__m512i hb = _mm512_loadu_si512(b + pkk_high(t, k / 4)), m = _mm512_set1_epi8(16);
				const int s = k % 4;
				lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(hb, 4 - s), m));
				hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(hb, s), m));
			} else if (t == 14) {
				__m512i hb = _mm512_loadu_si512(b + pkk_high(t, k / 2)), m = _mm512_set1_epi8(0x30);
				if (k % 2 == 0) {
					lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(hb, 4), m));
					hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(hb, 2), m));
				} else {
					lo = _mm512_or_si512(lo, _mm512_and_si512(hb, m));
					hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(hb, 2), m));
				}
			}
			for (int v = 0; v < nv; v++) {
				const int8_t *q = a[v * nb].q;
				tl[c % ch][v] = dp512b(tl[c % ch][v], lo, q + 4 * k);
				th[c % ch][v] = dp512b(th[c % ch][v], hi, q + 128 + 4 * k);
			}
		}
		if (ch == 2)
			for (int v = 0; v < nv; v++)
				tl[0][v] = _mm512_add_epi32(tl[0][v], tl[1][v]), th[0][v] = _mm512_add_epi32(th[0][v], th[1][v]);
		if (t == 12 && X16)
			for (int v = 0; v < nv; v++) th[0][v] = _mm512_srai_epi32(th[0][v], 4);
		const uint8_t *sc = b + pkk_scales(t);
		__m128i sl = _mm_loadu_si128((const __m128i *)(sc + 16 * u)),
		        sh = _mm_loadu_si128((const __m128i *)(sc + 16 * (u + runs)));
		__m512i scl = t == 14 ? _mm512_cvtepi8_epi32(sl) : _mm512_cvtepu8_epi32(sl);
		__m512i sch = t == 14 ? _mm512_cvtepi8_epi32(sh) : _mm512_cvtepu8_epi32(sh);
		for (int v = 0; v < nv; v++)
			isum[v] = _mm512_add_epi32(isum[v], _mm512_add_epi32(_mm512_mullo_epi32(tl[0][v], scl), _mm512_mullo_epi32(th[0][v], sch)));
	}
	__m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + pkk_d(t))));
	if (t == 14) {
		for (int v = 0; v < nv; v++)
			acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[v]), _mm512_mul_ps(d, _mm512_set1_ps(a[v * nb].d))));
		return;
	}
	__m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + pkk_dmin(t))));
	__m512i mn[4];
	for (int p = 0; p < 4; p++) mn[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(b + pkk_mins(t) + 32 * p)));
	for (int v = 0; v < nv; v++) {
		__m512i ms = _mm512_setzero_si512();
		for (int p = 0; p < 4; p++) ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mn[p], _mm512_set1_epi32(a[v * nb].pairs[p])));
		__m512 dx = _mm512_set1_ps(a[v * nb].d);
		acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[v]), _mm512_mul_ps(d, dx)));
		acc[v] = _mm512_sub_ps(acc[v], _mm512_mul_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm, dx)));
	}
}

/* ktile computes cnt blocks of one group (from gp; activations from qx, nb
 * blocks a vector) for vectors [0, nv) (nv <= 8), four at a time within
 * each block, so that each block's codes are read from memory once; the
 * sums start from out unless first. */
static inline __attribute__((always_inline)) void ktile(uint32_t t, const uint8_t *gp, int64_t nb, int64_t cnt,
                                                       const struct act256 *qx, float *out, int64_t rows,
                                                       __mmask16 valid, int pf, int first, const int nv) {
	__m512 acc[8];
	for (int v = 0; v < nv; v++) acc[v] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(valid, out + v * rows);
	const int64_t bb = pkk_block_bytes(t);
	for (int64_t i = 0; i < cnt; i++) {
		const uint8_t *b = gp + i * bb;
		if (pf && nv > 2) kprefetch(t, b);
		if (nv <= 4) {
			kblock(t, b, qx + i, nb, acc, nv);
		} else {
			kblock(t, b, qx + i, nb, acc, 4);
			kblock(t, b, qx + 4 * nb + i, nb, acc + 4, nv - 4);
		}
	}
	for (int v = 0; v < nv; v++) _mm512_mask_storeu_ps(out + v * rows, valid, acc[v]);
}

/* kseg computes the segment at sp of group g (blocks [i0, i0 + cnt)) for
 * all n vectors. */
static inline __attribute__((always_inline)) void kseg(uint32_t t, const uint8_t *sp, int64_t rows, int64_t nb,
                                                      int64_t g, int64_t i0, int64_t cnt, const struct act256 *qx,
                                                      int64_t n, float *out) {
	int64_t left = rows - g * PR;
	__mmask16 valid = left >= PR ? 0xffff : (__mmask16)((1u << left) - 1);
	for (int64_t v0 = 0; v0 < n; v0 += 8) {
		const struct act256 *a = qx + v0 * nb + i0;
		float *o = out + g * PR + v0 * rows;
#define T(NVC) ktile(t, sp, nb, cnt, a, o, rows, valid, v0 == 0, i0 == 0, NVC)
		KVS_TILES(n - v0, T)
#undef T
	}
}

#elif defined(__AVX2__)

/* The AVX2 path: each group as two halves of eight rows (the first and
 * last 32 bytes of every 64-byte chunk and high-bit line, bytes 0-7 and 8-15
 * of each scale line). vpmaddubsw's int16 pairs are summed in int16 over a
 * part of a run (vpaddw) and widened once a part: a pair is at most
 * 2 · 127 · (15, 31, 63) for Q4_K, Q5_K, Q6_K codes, so parts of 8, 4 and
 * 2 chunks stay under 2^15 (30480, 31496, 32004) and the sums are exact. */
static inline int kpart(uint32_t t) { return t == 12 ? 8 : t == 13 ? 4 : 2; }

/* kcodes returns half h of chunk k's low- and high-nibble codes. */
static inline __attribute__((always_inline)) void kcodes(uint32_t t, const uint8_t *b, int k, int h, __m256i *lo,
                                                        __m256i *hi) {
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i raw = _mm256_loadu_si256((const __m256i *)(b + pkk_code(t, k) + 32 * h));
	*lo = _mm256_and_si256(raw, m4), *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
	if (t == 13) {
		__m256i hb = _mm256_loadu_si256((const __m256i *)(b + pkk_high(t, k / 4) + 32 * h)), m = _mm256_set1_epi8(16);
		const int s = k % 4;
		*lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4 - s), m));
		*hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(hb, s), m));
	} else if (t == 14) {
		__m256i hb = _mm256_loadu_si256((const __m256i *)(b + pkk_high(t, k / 2) + 32 * h)), m = _mm256_set1_epi8(0x30);
		if (k % 2 == 0) {
			*lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m));
			*hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_slli_epi16(hb, 2), m));
		} else {
			*lo = _mm256_or_si256(*lo, _mm256_and_si256(hb, m));
			*hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(hb, 2), m));
		}
	}
}

/* kpair returns a scale line's 8 bytes (rows of one half) as int16
 * pairs (s_r, s_r) in lane r, for vpmaddwd (Q6_K's are signed). */
static inline __m256i kpair(uint32_t t, __m128i s) {
	__m128i ss = _mm_unpacklo_epi8(s, s);
	return t == 14 ? _mm256_cvtepi8_epi16(ss) : _mm256_cvtepu8_epi16(ss);
}

/* kblock adds block b's products with vectors a[0], a[nb], ... (nv of
 * them) to acc[h][v] for the nh halves from h0: each chunk's codes are
 * decoded once for all of them and each activation broadcast once for
 * both halves. Where pf is set, chunk k prefetches lines 2k and 2k+1 of
 * the block PFK bytes ahead: spread so, Q6_K's 53 lines a block streamed
 * 15-35% faster from memory than asked for all at once (matrices of
 * 32768×2048, alternating builds; Q4_K's 37 were level within the noise). A part's int16 sums are widened by vpmaddwd with the rows'
 * sub-block scales, so a block's integer sum needs no multiply; Q6_K's
 * offset of 32 is taken off once a run, as 32 · (the rows' scales of the
 * run's two sub-blocks · the activations' sums of them). */
static inline __attribute__((always_inline)) void kblock(uint32_t t, const uint8_t *b, const struct act256 *a,
                                                        int64_t nb, __m256 acc[2][4], int h0, const int nh,
                                                        const int nv, int pf) {
	const int runs = t == 14 ? 8 : 4, len = 32 / runs, part = kpart(t);
	__m256i isum[2][4];
	for (int h = 0; h < nh; h++)
		for (int v = 0; v < nv; v++) isum[h][v] = _mm256_setzero_si256();
	for (int u = 0; u < runs; u++) {
		__m256i scl[2], sch[2];
		for (int h = 0; h < nh; h++) {
			const uint8_t *sc = b + pkk_scales(t) + 8 * (h0 + h);
			__m128i sl = _mm_loadl_epi64((const __m128i *)(sc + 16 * u)), sh = _mm_loadl_epi64((const __m128i *)(sc + 16 * (u + runs)));
			scl[h] = kpair(t, sl), sch[h] = kpair(t, sh);
			if (t == 14) {
				__m256i both = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sl, sh));
				for (int v = 0; v < nv; v++) {
					uint32_t bs = (uint16_t)a[v * nb].bsums[u] | (uint32_t)(uint16_t)a[v * nb].bsums[u + 8] << 16;
					isum[h][v] = _mm256_sub_epi32(isum[h][v], _mm256_slli_epi32(_mm256_madd_epi16(both, _mm256_set1_epi32((int32_t)bs)), 5));
				}
			}
		}
		for (int c0 = 0; c0 < len; c0 += part) {
			__m256i pl[2][4], ph[2][4];
			for (int h = 0; h < nh; h++)
				for (int v = 0; v < nv; v++) pl[h][v] = ph[h][v] = _mm256_setzero_si256();
			for (int c = c0; c < c0 + part; c++) {
				const int k = u * len + c;
				if (pf)
					for (int l = 2 * k; l < 2 * k + 2 && 64 * l < pkk_block_bytes(t); l++)
						_mm_prefetch((const char *)b + PFK + 64 * l, _MM_HINT_T1);
				__m256i lo[2], hi[2];
				for (int h = 0; h < nh; h++) kcodes(t, b, k, h0 + h, &lo[h], &hi[h]);
				for (int v = 0; v < nv; v++) {
					const int8_t *q = a[v * nb].q;
					__m256i xl = _mm256_set1_epi32(ld32k(q + 4 * k)), xh = _mm256_set1_epi32(ld32k(q + 128 + 4 * k));
					for (int h = 0; h < nh; h++) {
						pl[h][v] = _mm256_add_epi16(pl[h][v], _mm256_maddubs_epi16(lo[h], xl));
						ph[h][v] = _mm256_add_epi16(ph[h][v], _mm256_maddubs_epi16(hi[h], xh));
					}
				}
			}
			for (int h = 0; h < nh; h++)
				for (int v = 0; v < nv; v++)
					isum[h][v] = _mm256_add_epi32(isum[h][v], _mm256_add_epi32(_mm256_madd_epi16(pl[h][v], scl[h]),
					                                                           _mm256_madd_epi16(ph[h][v], sch[h])));
		}
	}
	for (int h = 0; h < nh; h++) {
		const int hh = h0 + h;
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + pkk_d(t) + 16 * hh)));
		if (t == 14) {
			for (int v = 0; v < nv; v++)
				acc[h][v] = _mm256_add_ps(acc[h][v], _mm256_mul_ps(_mm256_cvtepi32_ps(isum[h][v]), _mm256_mul_ps(d, _mm256_set1_ps(a[v * nb].d))));
			continue;
		}
		__m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + pkk_dmin(t) + 16 * hh)));
		__m256i mn[4];
		for (int p = 0; p < 4; p++) mn[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + pkk_mins(t) + 32 * p + 16 * hh)));
		for (int v = 0; v < nv; v++) {
			__m256i ms = _mm256_setzero_si256();
			for (int p = 0; p < 4; p++) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[p], _mm256_set1_epi32(a[v * nb].pairs[p])));
			__m256 dx = _mm256_set1_ps(a[v * nb].d);
			acc[h][v] = _mm256_add_ps(acc[h][v], _mm256_mul_ps(_mm256_cvtepi32_ps(isum[h][v]), _mm256_mul_ps(d, dx)));
			acc[h][v] = _mm256_sub_ps(acc[h][v], _mm256_mul_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, dx)));
		}
	}
}

/* kload reads half h of a group's outputs for nv vectors (valid rows):
 * the sums of the panels before. */
static inline void kload(__m256 *acc, const float *out, int64_t rows, int valid, int nv) {
	for (int v = 0; v < nv; v++) {
		if (valid >= 8) {
			acc[v] = _mm256_loadu_ps(out + v * rows);
		} else {
			float tmp[8] = {0};
			for (int r = 0; r < valid; r++) tmp[r] = out[v * rows + r];
			acc[v] = _mm256_loadu_ps(tmp);
		}
	}
}

/* kstore writes half h of a group's outputs for nv vectors (valid rows). */
static inline void kstore(const __m256 *acc, float *out, int64_t rows, int valid, int nv) {
	for (int v = 0; v < nv; v++) {
		if (valid >= 8) {
			_mm256_storeu_ps(out + v * rows, acc[v]);
		} else {
			float tmp[8];
			_mm256_storeu_ps(tmp, acc[v]);
			for (int r = 0; r < valid; r++) out[v * rows + r] = tmp[r];
		}
	}
}

/* ktile computes cnt blocks of one group (from gp; activations from qx, nb
 * blocks a vector) for vectors [0, nv) (nv <= 8), the sums starting from
 * out unless first: up to two vectors with both halves in one pass over
 * each block (so that every line is read once, and the activations
 * broadcast once for both), more four at a time, a half at a time (so that
 * each half's codes are decoded once for four vectors). */
static inline __attribute__((always_inline)) void ktile(uint32_t t, const uint8_t *gp, int64_t nb, int64_t cnt,
                                                       const struct act256 *qx, float *out, int64_t rows,
                                                       int left, int pf, int first, const int nv) {
	const int64_t bb = pkk_block_bytes(t);
	const int nh = left > 8 ? 2 : 1;
	if (nv <= 2) {
		__m256 acc[2][4];
		for (int h = 0; h < 2; h++)
			for (int v = 0; v < nv; v++) acc[h][v] = _mm256_setzero_ps();
		if (!first)
			for (int h = 0; h < nh; h++) kload(acc[h], out + 8 * h, rows, left - 8 * h, nv);
		for (int64_t i = 0; i < cnt; i++) {
			const uint8_t *b = gp + i * bb;
			if (nh == 2)
				kblock(t, b, qx + i, nb, acc, 0, 2, nv, pf);
			else
				kblock(t, b, qx + i, nb, acc, 0, 1, nv, pf);
		}
		for (int h = 0; h < nh; h++) kstore(acc[h], out + 8 * h, rows, left - 8 * h, nv);
		return;
	}
	for (int h = 0; h < nh; h++)
		for (int v0 = 0; v0 < nv; v0 += 4) {
			__m256 acc[2][4];
			for (int v = 0; v < 4; v++) acc[0][v] = _mm256_setzero_ps();
			if (!first) kload(acc[0], out + 8 * h + v0 * rows, rows, left - 8 * h, nv - v0 < 4 ? nv - v0 : 4);
			for (int64_t i = 0; i < cnt; i++) {
				const uint8_t *b = gp + i * bb;
				const int p = pf && h == 0 && v0 == 0;
				if (nv - v0 >= 4)
					kblock(t, b, qx + v0 * nb + i, nb, acc, h, 1, 4, p);
				else if (nv - v0 == 3)
					kblock(t, b, qx + v0 * nb + i, nb, acc, h, 1, 3, p);
				else if (nv - v0 == 2)
					kblock(t, b, qx + v0 * nb + i, nb, acc, h, 1, 2, p);
				else
					kblock(t, b, qx + v0 * nb + i, nb, acc, h, 1, 1, p);
			}
			kstore(acc[0], out + 8 * h + v0 * rows, rows, left - 8 * h, nv - v0 < 4 ? nv - v0 : 4);
		}
}

static inline __attribute__((always_inline)) void kseg(uint32_t t, const uint8_t *sp, int64_t rows, int64_t nb,
                                                      int64_t g, int64_t i0, int64_t cnt, const struct act256 *qx,
                                                      int64_t n, float *out) {
	int left = rows - g * PR >= PR ? PR : (int)(rows - g * PR);
	for (int64_t v0 = 0; v0 < n; v0 += 8) {
		const struct act256 *a = qx + v0 * nb + i0;
		float *o = out + g * PR + v0 * rows;
#define T(NVC) ktile(t, sp, nb, cnt, a, o, rows, left, v0 == 0, i0 == 0, NVC)
		KVS_TILES(n - v0, T)
#undef T
	}
}

#else

static inline __attribute__((always_inline)) void kseg(uint32_t t, const uint8_t *sp, int64_t rows, int64_t nb,
                                                      int64_t g, int64_t i0, int64_t cnt, const struct act256 *qx,
                                                      int64_t n, float *out) {
	kref(t, sp, rows, nb, g, i0, cnt, qx, n, out);
}

#endif

/* kmatmul computes rows [row0, row1) segment by segment, in memory order. */
static inline __attribute__((always_inline)) void kmatmul(uint32_t t, const void *wp, int64_t rows, int64_t cols,
                                                         int64_t row0, int64_t row1, const void *qx, int64_t n,
                                                         float *out) {
	const int64_t nb = cols / 256, groups = (rows + PR - 1) / PR;
	const uint8_t *w = wp;
#define S(g, i0, cnt, off) kseg(t, w + (off), rows, nb, g, i0, cnt, qx, n, out)
	PK_SEGMENTS(t, groups, nb, row0 / PR, (row1 + PR - 1) / PR, S);
#undef S
}

/* kvs_matmul_packed_k is kvs_matmul_packed for the K-quants (packed.c
 * hands them over). */
int KVS_FN(kvs_matmul_packed_k)(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0,
                                int64_t row1, const void *qx, int64_t n, float *out);
int KVS_FN(kvs_matmul_packed_k)(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0,
                                int64_t row1, const void *qx, int64_t n, float *out) {
	(void)kref;
	switch (type) {
	case 12: kmatmul(12, wp, rows, cols, row0, row1, qx, n, out); break;
	case 13: kmatmul(13, wp, rows, cols, row0, row1, qx, n, out); break;
	default: kmatmul(14, wp, rows, cols, row0, row1, qx, n, out); break;
	}
	return KVS_OK;
}
