/* packed_pack.c: kvs_pack, the file's blocks rewritten in the packed layout
 * (kvscope.h, packed_layout.h), compiled once: plain byte moves, the same
 * on every path. */
#include "common.h"
#include "packed_layout.h"

enum { PR = KVS_PACK_ROWS };

/* kscale_min decodes Q4_K/Q5_K sub-block j's 6-bit scale and min from the
 * block's 12 packed bytes q (engine/quant's scaleMinK4). */
static void kscale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* kcodes decodes a K-quant block's 256 unsigned codes (engine/quant's
 * dequantQ4_K, dequantQ5_K, dequantQ6_K orders). */
static void kcodes(uint32_t t, const uint8_t *b, uint8_t *q) {
	if (t == 14) {
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
			uint8_t *o = q + 128 * h;
			for (int l = 0; l < 32; l++) {
				o[l] = (uint8_t)((ql[l] & 15) | (qh[l] & 3) << 4);
				o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4);
				o[l + 64] = (uint8_t)((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4);
				o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4);
			}
		}
		return;
	}
	const uint8_t *qs = b + (t == 13 ? 48 : 16), *qh = b + 16;
	for (int g = 0; g < 4; g++)
		for (int l = 0; l < 32; l++) {
			uint8_t lo = qs[32 * g + l] & 15, hi = qs[32 * g + l] >> 4;
			if (t == 13) {
				lo |= (uint8_t)((qh[l] >> (2 * g) & 1) << 4);
				hi |= (uint8_t)((qh[l] >> (2 * g + 1) & 1) << 4);
			}
			q[64 * g + l] = lo;
			q[64 * g + 32 + l] = hi;
		}
}

/* pack_k writes row r of a group's block pb from file block b: the codes
 * decoded once, then each chunk's four bytes and each high-bit line's four
 * built whole (loops the compiler vectorizes). */
static void pack_k(uint32_t t, const uint8_t *b, int r, uint8_t *pb) {
	uint8_t q[256], lo[128], hb[64];
	kcodes(t, b, q);
	for (int i = 0; i < 128; i++) lo[i] = (uint8_t)((q[i] & 15) | (q[128 + i] & 15) << 4);
	for (int k = 0; k < 32; k++) memcpy(pb + pkk_code(t, k) + 4 * r, lo + 4 * k, 4);
	if (t == 13) {
		/* line L, byte j: bit c from chunk 4L+c's low code, bit 4+c its high one */
		for (int L = 0; L < 8; L++)
			for (int j = 0; j < 4; j++) {
				uint8_t v = 0;
				for (int c = 0; c < 4; c++) {
					int e = 4 * (4 * L + c) + j;
					v |= (uint8_t)(((q[e] >> 4) & 1) << c | ((q[128 + e] >> 4) & 1) << (4 + c));
				}
				hb[4 * L + j] = v;
			}
		for (int L = 0; L < 8; L++) memcpy(pb + pkk_high(t, L) + 4 * r, hb + 4 * L, 4);
	}
	if (t == 14) {
		/* line L, byte j: bits 2(2c+n) from chunk 2L+c's nibble n */
		for (int L = 0; L < 16; L++)
			for (int j = 0; j < 4; j++) {
				uint8_t v = 0;
				for (int c = 0; c < 2; c++) {
					int e = 4 * (2 * L + c) + j;
					v |= (uint8_t)(((q[e] >> 4) & 3) << (4 * c) | ((q[128 + e] >> 4) & 3) << (4 * c + 2));
				}
				hb[4 * L + j] = v;
			}
		for (int L = 0; L < 16; L++) memcpy(pb + pkk_high(t, L) + 4 * r, hb + 4 * L, 4);
	}
	if (t == 14) {
		for (int s = 0; s < 16; s++) pb[pkk_scales(t) + 16 * s + r] = b[192 + s];
		memcpy(pb + pkk_d(t) + 2 * r, b + 208, 2);
		return;
	}
	for (int s = 0; s < 8; s++) {
		uint8_t sc, m;
		kscale_min(s, b + 4, &sc, &m);
		pb[pkk_scales(t) + 16 * s + r] = sc;
		pb[pkk_mins(t) + 32 * (s / 2) + 2 * r + s % 2] = m;
	}
	memcpy(pb + pkk_d(t) + 2 * r, b, 2);
	memcpy(pb + pkk_dmin(t) + 2 * r, b + 2, 2);
}

/* pack32 writes row r of a group's block (codes c, scales ds) from file
 * block b of Q4_0, Q5_0 or Q8_0. */
static void pack32(uint32_t t, const uint8_t *b, int r, uint8_t *c, uint8_t *ds) {
	memcpy(ds + 2 * r, b, 2);
	if (t == 8) {
		for (int k = 0; k < 8; k++)
			for (int j = 0; j < 4; j++) c[64 * k + 4 * r + j] = b[2 + 4 * k + j] ^ 0x80;
		return;
	}
	const uint8_t *qs = b + (t == 6 ? 6 : 2);
	for (int k = 0; k < 4; k++) memcpy(c + 64 * k + 4 * r, qs + 4 * k, 4);
	if (t == 6) {
		uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
		for (int k = 0; k < 4; k++)
			for (int j = 0; j < 4; j++)
				c[256 + 4 * r + j] |= (uint8_t)(((qh >> (4 * k + j)) & 1) << k | ((qh >> (16 + 4 * k + j)) & 1) << (4 + k));
	}
}

int64_t kvs_packed_bytes(uint32_t type, int64_t rows, int64_t cols) {
	switch (type) {
	case 2: case 6: case 8: case 12: case 13: case 14: break;
	default: return KVS_ERR_TYPE;
	}
	if (rows <= 0 || rows > ((int64_t)1 << 32) || kvs_row_bytes(type, cols) == 0) return KVS_ERR_ARG;
	return (rows + PR - 1) / PR * pk_blocks_bytes(type, pk_row_blocks(type, cols));
}

/* kvs_pack_group packs group g (rows 16g.. of w, which starts at row 16g)
 * of a rows×cols matrix into its place in packed, the whole packed matrix
 * (a matrix of 16 rows or fewer is one group). */
void kvs_pack_group(uint32_t type, int64_t rows, int64_t cols, int64_t g, const uint8_t *w, uint8_t *packed);
void kvs_pack_group(uint32_t type, int64_t rows, int64_t cols, int64_t g, const uint8_t *w, uint8_t *packed) {
	int64_t rb = kvs_row_bytes(type, cols);
	int k = type >= 12;
	int64_t nb = pk_row_blocks(type, cols), fb = rb / nb, groups = (rows + PR - 1) / PR;
	int64_t pb = pk_panel_blocks(type, nb);
	/* every byte a row owns is written below but Q5_0's fifth bits (or-ed
	 * in); Q6_K's padding, an odd last pair's unused scales and a partial
	 * group's missing rows stay zero */
	int zero = type == 6 || type == 14 || rows - g * PR < PR || (!k && nb % 2);
	for (int64_t i0 = 0; i0 < nb; i0 += pb) {
		int64_t w0 = nb - i0 < pb ? nb - i0 : pb;
		uint8_t *sp = packed + pk_segment(type, groups, nb, g, i0);
		if (zero) memset(sp, 0, (size_t)pk_blocks_bytes(type, w0));
		for (int r = 0; r < PR && g * PR + r < rows; r++) {
			const uint8_t *row = w + r * rb + i0 * fb;
			for (int64_t i = 0; i < w0; i++) {
				if (k)
					pack_k(type, row + i * fb, r, sp + i * pkk_block_bytes(type));
				else
					pack32(type, row + i * fb, r, sp + pk32_codes(type, i), sp + pk32_scales(type, i));
			}
		}
	}
}

int kvs_pack(uint32_t type, int64_t rows, int64_t cols, int64_t g0, int64_t g1, const void *w, void *packed) {
	int64_t size = kvs_packed_bytes(type, rows, cols);
	if (size < 0) return (int)size;
	if (g0 < 0 || g1 < g0 || g1 > (rows + PR - 1) / PR || !w || !packed) return KVS_ERR_ARG;
	int64_t rb = kvs_row_bytes(type, cols);
	for (int64_t g = g0; g < g1; g++)
		kvs_pack_group(type, rows, cols, g, (const uint8_t *)w + (g - g0) * PR * rb, packed);
	return KVS_OK;
}
