/* dequant.c: decoding weight rows to float (the embedding lookup), with the
 * bits engine/quant's Dequantize gives: same products, same rounding, no
 * fused multiply-adds (the library is built with -ffp-contract=off). */
#include "common.h"

static void scale_min(int j, const uint8_t *q, int *sc, int *m) {
	if (j < 4) {
		*sc = q[j] & 63, *m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
		*m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
	}
}

static void dequant_row(uint32_t type, const uint8_t *b, int64_t cols, float *y) {
	switch (type) {
	case 0: memcpy(y, b, (size_t)cols * 4); return;
	case 1:
		for (int64_t i = 0; i < cols; i++) y[i] = kvs_h2f(kvs_le16(b + 2 * i));
		return;
	case 30:
		for (int64_t i = 0; i < cols; i++) y[i] = kvs_bf2f(kvs_le16(b + 2 * i));
		return;
	}
	if (type >= 10 && type <= 14) {
		for (int64_t i = 0; i < cols / 256; i++, y += 256) {
			if (type == 10 || type == 11) {
				/* Q2_K: x = d*(sc&15)*q - dmin*(sc>>4); Q3_K: x = d*(scale-32)*q. */
				const uint8_t *blk = b + i * (type == 10 ? 84 : 110);
				const uint8_t *qs = blk + (type == 10 ? 16 : 32), *hm = blk;
				float d = kvs_h2f(kvs_le16(blk + (type == 10 ? 80 : 108)));
				float dmin = type == 10 ? kvs_h2f(kvs_le16(blk + 82)) : 0;
				for (int h = 0; h < 2; h++)
					for (int j = 0; j < 4; j++)
						for (int k = 0; k < 2; k++) {
							int s = 8 * h + 2 * j + k;
							float dl, ml = 0;
							if (type == 10) {
								dl = d * (float)(blk[s] & 15);
								ml = dmin * (float)(blk[s] >> 4);
							} else {
								const uint8_t *q = blk + 96;
								int lo = s < 8 ? q[s] & 15 : q[s - 8] >> 4, hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
								dl = d * (float)((lo | hi << 4) - 32);
							}
							float *o = y + 128 * h + 32 * j + 16 * k;
							for (int l = 0; l < 16; l++) {
								int L = 16 * k + l, q = (qs[32 * h + L] >> (2 * j)) & 3;
								if (type == 10) {
									o[l] = dl * (float)q - ml;
								} else {
									q += 4 * ((hm[L] >> (4 * h + j)) & 1) - 4;
									o[l] = dl * (float)q;
								}
							}
						}
				continue;
			}
			if (type == 14) {
				const uint8_t *blk = b + i * 210, *sc = blk + 192;
				float d = kvs_h2f(kvs_le16(blk + 208));
				for (int h = 0; h < 2; h++) {
					const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
					float *o = y + 128 * h;
					for (int l = 0; l < 32; l++) {
						int s = 8 * h + l / 16;
						int q1 = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32;
						int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
						int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
						int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
						o[l] = d * (float)(int8_t)sc[s] * (float)q1;
						o[l + 32] = d * (float)(int8_t)sc[s + 2] * (float)q2;
						o[l + 64] = d * (float)(int8_t)sc[s + 4] * (float)q3;
						o[l + 96] = d * (float)(int8_t)sc[s + 6] * (float)q4;
					}
				}
				continue;
			}
			int five = type == 13;
			const uint8_t *blk = b + i * (five ? 176 : 144), *qh = blk + 16, *qs = blk + (five ? 48 : 16);
			float d = kvs_h2f(kvs_le16(blk)), dmin = kvs_h2f(kvs_le16(blk + 2));
			for (int g = 0; g < 4; g++) {
				int s1, m1, s2, m2;
				scale_min(2 * g, blk + 4, &s1, &m1);
				scale_min(2 * g + 1, blk + 4, &s2, &m2);
				float d1 = d * (float)s1, mm1 = dmin * (float)m1, d2 = d * (float)s2, mm2 = dmin * (float)m2;
				for (int l = 0; l < 32; l++) {
					int q = qs[32 * g + l], lo = q & 15, hi = q >> 4;
					if (five) lo |= ((qh[l] >> (2 * g)) & 1) << 4, hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
					y[64 * g + l] = d1 * (float)lo - mm1;
					y[64 * g + l + 32] = d2 * (float)hi - mm2;
				}
			}
		}
		return;
	}
	static const int8_t iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
	int64_t tsz = type == 2 || type == 20 ? 18 : type == 3 ? 20 : type == 6 ? 22 : type == 7 ? 24 : 34;
	for (int64_t i = 0; i < cols / 32; i++, y += 32) {
		const uint8_t *blk = b + i * tsz;
		float d = kvs_h2f(kvs_le16(blk));
		switch (type) {
		case 8:
			for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)blk[2 + j] * d;
			break;
		case 20:
			for (int j = 0; j < 16; j++)
				y[j] = d * (float)iq4[blk[2 + j] & 15], y[j + 16] = d * (float)iq4[blk[2 + j] >> 4];
			break;
		case 2:
			for (int j = 0; j < 16; j++)
				y[j] = (float)((blk[2 + j] & 15) - 8) * d, y[j + 16] = (float)((blk[2 + j] >> 4) - 8) * d;
			break;
		case 3: {
			float m = kvs_h2f(kvs_le16(blk + 2));
			for (int j = 0; j < 16; j++)
				y[j] = (float)(blk[4 + j] & 15) * d + m, y[j + 16] = (float)(blk[4 + j] >> 4) * d + m;
			break;
		}
		default: {
			int one = type == 7;
			float m = one ? kvs_h2f(kvs_le16(blk + 2)) : 0;
			const uint8_t *qh4 = blk + (one ? 4 : 2), *qs = blk + (one ? 8 : 6);
			uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
			for (int j = 0; j < 16; j++) {
				int lo = (qs[j] & 15) | ((qh >> j) & 1) << 4, hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
				if (one) y[j] = (float)lo * d + m, y[j + 16] = (float)hi * d + m;
				else y[j] = (float)(lo - 16) * d, y[j + 16] = (float)(hi - 16) * d;
			}
		}
		}
	}
}

int kvs_dequant_rows(uint32_t type, const void *w, int64_t cols, int64_t row0, int64_t row1, float *out) {
	int64_t rb = kvs_row_bytes(type, cols);
	if (rb == 0) return kvs_row_bytes(type, 256) ? KVS_ERR_ARG : KVS_ERR_TYPE;
	if (!w || !out || row0 < 0 || row1 < row0) return KVS_ERR_ARG;
	for (int64_t r = row0; r < row1; r++) dequant_row(type, (const uint8_t *)w + r * rb, cols, out + (r - row0) * cols);
	return KVS_OK;
}
