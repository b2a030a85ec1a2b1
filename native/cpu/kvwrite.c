/* kvwrite.c: storing a token's K or V row in a block slot, with the bytes
 * engine/kvstore's Write produces (not a hot loop: one path). */
#include <stdlib.h>

#include "kv.h"

/* f16_finite rounds x to a finite half (saturating at ±65504, NaN as 0). */
static uint16_t f16_finite(float x) {
	if (x != x) return 0;
	if (x > 65504) x = 65504;
	else if (x < -65504) x = -65504;
	return kvs_f2h(x);
}

/* round_sym rounds halves away from zero, clamped to ±lim. */
static int8_t round_sym(float v, float lim) {
	if (v >= lim) return (int8_t)lim;
	if (v <= -lim) return (int8_t)-lim;
	if (v >= 0) return (int8_t)(v + 0.5f);
	if (v < 0) return (int8_t)(v - 0.5f);
	return 0;
}

/* round_unsigned rounds to [0, lim], halves up. */
static uint8_t round_unsigned(float v, float lim) {
	if (v >= lim) return (uint8_t)lim;
	if (v > 0) return (uint8_t)(v + 0.5f);
	return 0;
}

/* fp8_encode rounds x to E4M3FN (ties to even), saturating at ±448, NaN as 0. */
static uint8_t fp8_encode(float x) {
	uint32_t b;
	memcpy(&b, &x, 4);
	uint8_t sign = (uint8_t)(b >> 24) & 0x80;
	uint32_t ab = b & 0x7fffffffu;
	float a;
	memcpy(&a, &ab, 4);
	if (!(a < 448)) return a != a ? 0 : sign | 0x7e;
	if (a < 1.0f / 64) {
		float v = a * 512;
		uint8_t q = (uint8_t)v;
		float r = v - (float)q;
		if (r > 0.5f || (r == 0.5f && (q & 1))) q++;
		return sign | q;
	}
	int e = (int)(ab >> 23) - 127;
	uint32_t mant = ab & 0x7fffff, code = (uint32_t)(e + 7) << 3 | mant >> 20, rem = mant & 0xfffff;
	if (rem > 0x80000 || (rem == 0x80000 && (code & 1))) code++;
	if (code > 0x7e) code = 0x7e;
	return sign | (uint8_t)code;
}

/* scale_up returns the smallest E5M3 code (an f16's bits 14..7) whose value
 * is at least x, saturating at 0xf7 (61440); 0 for x zero, negative or NaN. */
static uint8_t scale_up(float x) {
	if (!(x > 0)) return 0;
	uint16_t f = f16_finite(x);
	if (kvs_h2f(f) < x) f++;
	uint32_t c = ((uint32_t)f + 0x7f) >> 7;
	return (uint8_t)(c > 0xf7 ? 0xf7 : c);
}

/* ue5m4 is x's unsigned E5M4 code (an f16's bits 14..6, the dropped bits
 * rounded half up), saturating at 495; 0 for x zero, negative or NaN. */
static int ue5m4(float x) {
	if (!(x > 0)) return 0;
	int c = ((int)f16_finite(x) + 32) >> 6;
	return c > 495 ? 495 : c;
}

/* se5m4 is x's signed E5M4 code as a signed integer (-0 is 0), and
 * e5m4_value the value of such an integer c (|c| <= 495). */
static int se5m4(float x) {
	uint16_t f = f16_finite(x);
	int m = ((f & 0x7fff) + 32) >> 6;
	if (m > 495) m = 495;
	return f & 0x8000 ? -m : m;
}

static float e5m4_value(int c) { return c < 0 ? -kvs_h2f((uint16_t)(-c << 6)) : kvs_h2f((uint16_t)(c << 6)); }

/* set_bit sets or clears bit d of the bit plane at b. */
static void set_bit(uint8_t *b, int d, int v) { b[d >> 3] = (uint8_t)((b[d >> 3] & ~(1 << (d & 7))) | (v & 1) << (d & 7)); }

/* iq4_code is the index of u's nearest kvs_iq4 level (a tie to the lower,
 * NaN to 0): how many of the fifteen midpoints u is above, found in four
 * comparisons (the midpoints ascend). */
static uint8_t iq4_code(float u) {
	static const float mid[15] = {-115.5f, -93.5f, -74, -57, -42, -28.5f, -16, -4.5f, 7, 19, 31.5f, 45.5f, 61, 79, 101};
	int q = 0;
	for (int step = 8; step >= 1; step >>= 1) q += u > mid[q + step - 1] ? step : 0;
	return (uint8_t)q;
}

/* int4_values codes one group xs[0..n) of rotated int4 values (amax their
 * largest magnitude): the signed 8-bit scale (an f16's top byte) among the
 * seven codes around amax/127, either sign, with the least squared error
 * summed in order (the first on a tie). It returns the scale byte and
 * writes the codes to q. */
static uint8_t int4_values(const float *xs, int n, float amax, uint8_t *q) {
	if (amax == 0) {
		for (int i = 0; i < n; i++) q[i] = 8;
		return 0;
	}
	int c0 = ((int)f16_finite(amax / 127) + 0x80) >> 8;
	if (c0 > 0x7b) c0 = 0x7b;
	int lo = c0 - 3 > 1 ? c0 - 3 : 1, hi = c0 + 3 < 0x7b ? c0 + 3 : 0x7b, best = -1;
	float be = 0;
	for (int c = lo; c <= hi; c++)
		for (int neg = 0; neg < 2; neg++) {
			uint8_t b = (uint8_t)(neg << 7 | c);
			float d = kvs_z8(b), id = 1 / d, e = 0;
			for (int i = 0; i < n; i++) {
				float t = d * kvs_iq4[iq4_code(xs[i] * id)];
				t = t - xs[i];
				e += t * t;
			}
			if (best < 0 || e < be) best = b, be = e;
		}
	float d = kvs_z8((uint8_t)best), id = 1 / d;
	for (int i = 0; i < n; i++) q[i] = iq4_code(xs[i] * id);
	return (uint8_t)best;
}

/* qmax8 is engine/kvstore's qmax: int8 127, int4 15, fp8 448. */
static float qmax8(int prec) { return prec == KVS_KV_INT4 ? 15 : prec == KVS_KV_FP8 ? 448 : 127; }

/* code8 returns value v's code at inverse scale id and zero point m. */
static uint8_t code8(int prec, float v, float id, float m) {
	switch (prec) {
	case KVS_KV_INT8: return (uint8_t)round_sym(v * id, 127);
	case KVS_KV_INT4: return round_unsigned((v - m) * id, 15);
	default: return fp8_encode(v * id);
	}
}

/* sse8 returns the squared error of xs[0..n) coded as int8 at scale code
 * c, summed in order (engine/kvstore's sse8). */
static float sse8(const float *xs, int n, uint8_t c) {
	float s = kvs_s8(c), id = s != 0 ? 1 / s : 0, e = 0;
	for (int i = 0; i < n; i++) {
		float d = (float)round_sym(xs[i] * id, 127) * s - xs[i];
		e += d * d;
	}
	return e;
}

/* put_code stores code q as dim d of data row drow (int4: a nibble). */
static void put_code(int prec, uint8_t *drow, int d, uint8_t q) {
	if (prec == KVS_KV_INT4) {
		uint8_t sh = (uint8_t)((d & 1) * 4);
		drow[d >> 1] = (uint8_t)((drow[d >> 1] & ~(0xf << sh)) | q << sh);
	} else {
		drow[d] = q;
	}
}

/* write_row stores one row x at (layer, block, slot); xr and q are room
 * for a row of floats and of codes (int4). */
static void write_row(const struct kvs_kv_plane *p, int32_t layer, int32_t block, int32_t slot, const float *x, float *xr,
                      uint8_t *q) {
	int D = p->head_dim, B = p->block_size, H = p->kv_heads, row = H * D;
	int64_t lb = (int64_t)layer * p->blocks + block;
	if (p->prec <= KVS_KV_BF16) {
		int64_t base = lb * p->data_per_block + (int64_t)slot * D;
		for (int h = 0; h < H; h++)
			for (int d = 0; d < D; d++) {
				int64_t i = base + (int64_t)h * B * D + d;
				float v = x[h * D + d];
				if (p->prec == KVS_KV_F32) ((float *)p->data)[i] = v;
				else ((uint16_t *)p->data)[i] = p->prec == KVS_KV_F16 ? kvs_f2h(v) : kvs_f2bf(v);
			}
		return;
	}
	uint8_t *data = (uint8_t *)p->data;
	int G = p->group;
	int64_t si = lb * p->scales_per_block + (int64_t)slot * p->groups;
	int64_t base = lb * p->data_per_block + (int64_t)slot * p->row_bytes, stride = (int64_t)B * p->row_bytes;
	if (p->prec == KVS_KV_INT4) {
		/* int4 values are coded rotated, head by head. */
		memcpy(xr, x, (size_t)row * sizeof *xr);
		for (int h = 0; h < H; h++) kvs_wht(xr + h * D, D);
		x = xr;
	}
	for (int g = 0; g < p->groups; g++) {
		int lo = g * G, hi = lo + G < row ? lo + G : row;
		const float *xs = x + lo;
		int n = hi - lo, d = lo % D;
		int64_t off = base + (lo / D) * stride;
		float amax = 0;
		for (int i = 0; i < n; i++) {
			float a = xs[i] < 0 ? -xs[i] : xs[i];
			if (a > amax) amax = a;
		}
		float id = 0;
		if (p->prec == KVS_KV_Q8_0) {
			float dq = amax / 127;
			((uint16_t *)p->scale)[si + g] = f16_finite(dq);
			if (dq != 0) id = 1 / dq;
			for (int i = 0; i < n; i++) {
				data[off + d] = (uint8_t)round_sym(xs[i] * id, 127);
				if (++d == D) d = 0, off += stride;
			}
			continue;
		}
		if (p->prec == KVS_KV_INT4) {
			((uint8_t *)p->scale)[si + g] = int4_values(xs, n, amax, q);
			for (int i = 0; i < n; i++) {
				put_code(p->prec, data + off, d, q[i]);
				if (++d == D) d = 0, off += stride;
			}
			continue;
		}
		uint8_t sc = scale_up(amax / qmax8(p->prec));
		/* int8: the code below when it codes the group with a smaller
		 * squared error (engine/kvstore's int8Scale) */
		if (p->prec == KVS_KV_INT8 && sc > 0 && sse8(xs, n, (uint8_t)(sc - 1)) < sse8(xs, n, sc)) sc--;
		((uint8_t *)p->scale)[si + g] = sc;
		if (kvs_s8(sc) != 0) id = 1 / kvs_s8(sc);
		for (int i = 0; i < n; i++) {
			put_code(p->prec, data + off, d, code8(p->prec, xs[i], id, 0));
			if (++d == D) d = 0, off += stride;
		}
	}
}

/* key_index returns the index in data of head h, slot t's row of
 * layer-block lb of a key plane. */
static int64_t key_index(const struct kvs_kv_plane *p, int64_t lb, int h, int t) {
	return lb * p->data_per_block + (int64_t)(h * p->block_size + t) * p->row_bytes;
}

/* put_resid stores f16 bits f of head h, token tg of its group, dim d in
 * residual slot r (int8, fp8: the high byte there, the low byte in the
 * token's data row drow). */
static void put_resid(const struct kvs_kv_plane *p, uint8_t *r, uint8_t *drow, int h, int tg, int d, uint16_t f) {
	int64_t ri = (int64_t)(h * p->group + tg) * p->head_dim + d;
	if (kvs_byte_resid(p)) {
		r[ri] = (uint8_t)(f >> 8);
		drow[d] = (uint8_t)f;
	} else {
		r[2 * ri] = (uint8_t)f;
		r[2 * ri + 1] = (uint8_t)(f >> 8);
	}
}

/* get_resid is put_resid's inverse: the f16 value as a float. */
static float get_resid(const struct kvs_kv_plane *p, const uint8_t *r, const uint8_t *drow, int h, int tg, int d) {
	int64_t ri = (int64_t)(h * p->group + tg) * p->head_dim + d;
	if (kvs_byte_resid(p)) return kvs_h2f((uint16_t)(r[ri] << 8 | drow[d]));
	return kvs_h2f((uint16_t)(r[2 * ri] | r[2 * ri + 1] << 8));
}

/* write_key stores row x of slot t of layer-block lb in its key group's
 * residual slot r. */
static void write_key(const struct kvs_kv_plane *p, int64_t lb, int t, const float *x, uint8_t *r) {
	int D = p->head_dim, tg = t % p->group;
	for (int h = 0; h < p->kv_heads; h++) {
		uint8_t *drow = (uint8_t *)p->data + key_index(p, lb, h, t);
		for (int d = 0; d < D; d++) put_resid(p, r, drow, h, tg, d, kvs_f2h(x[h * D + d]));
	}
}

int kvs_kv_write(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, const float *rows,
                 uint8_t *const *resid) {
	if (!kvs_plane_ok(p) || layer < 0 || layer >= p->layers || n < 0 || (n > 0 && (!slots || !rows)) ||
	    (p->key && n > 0 && !resid))
		return KVS_ERR_ARG;
	int64_t total = (int64_t)p->blocks * p->block_size, row = (int64_t)p->kv_heads * p->head_dim;
	for (int64_t i = 0; i < n; i++)
		if (slots[i] < 0 || slots[i] >= total || (p->key && !resid[i])) return KVS_ERR_ARG;
	/* Room for one rotated int4 value row and its codes. */
	float stack[2048], *xr = stack;
	uint8_t qs[2048], *q = qs;
	if (!p->key && p->prec == KVS_KV_INT4 && row > 2048) {
		xr = malloc((size_t)row * sizeof *xr), q = malloc((size_t)row);
		if (!xr || !q) {
			free(xr), free(q);
			return KVS_ERR_ARG;
		}
	}
	for (int64_t i = 0; i < n; i++) {
		int32_t b = slots[i] / p->block_size, t = slots[i] % p->block_size;
		if (p->key) write_key(p, (int64_t)layer * p->blocks + b, t, rows + i * row, resid[i]);
		else write_row(p, layer, b, t, rows + i * row, xr, q);
	}
	if (xr != stack) free(xr), free(q);
	return KVS_OK;
}

/* go_min and go_max are Go's min and max of two floats: NaN wins, and -0
 * is below +0 (engine/kvstore takes a group's range with them). */
static float go_min(float a, float b) {
	if (a != a || b != b) return a != a ? a : b;
	if (a == b) return signbit(a) ? a : b;
	return a < b ? a : b;
}

static float go_max(float a, float b) {
	if (a != a || b != b) return a != a ? a : b;
	if (a == b) return signbit(a) ? b : a;
	return a > b ? a : b;
}

/* key_groups checks a kvs_key_quantize or kvs_key_dequantize call. */
static int key_groups(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	if (!kvs_plane_ok(p) || n < 0 || (n > 0 && (!groups || !resid))) return KVS_ERR_ARG;
	if (!p->key) return KVS_ERR_TYPE;
	for (int64_t i = 0; i < n; i++)
		if (groups[i] < 0 || groups[i] >= (int64_t)p->layers * p->blocks * p->groups || !resid[i]) return KVS_ERR_ARG;
	return KVS_OK;
}

/* int4_key_codes picks the zero code zc (signed) and scale code sc of one
 * int4 key channel's values xs[0..n) (token order): among the zeros
 * z0-1..z0+1 around the minimum's code and, for each, the scales
 * s0-1..s0+1 around (max-z)/15's, the pair whose codes give the least
 * squared error summed in token order (the first on a tie). */
static void int4_key_codes(const float *xs, int n, int *zc, int *sc) {
	if (n < 1) return; /* a key group holds a token at least */
	float mn = xs[0], mx = xs[0];
	for (int i = 1; i < n; i++) mn = go_min(mn, xs[i]), mx = go_max(mx, xs[i]);
	int z0 = se5m4(mn), first = 1;
	float be = 0;
	for (int zi = z0 - 1; zi <= z0 + 1; zi++) {
		if (zi < -495 || zi > 495) continue;
		float z = e5m4_value(zi);
		int s0 = ue5m4((mx - z) / 15);
		for (int si = s0 - 1 > 0 ? s0 - 1 : 0; si <= (s0 + 1 < 495 ? s0 + 1 : 495); si++) {
			float s = e5m4_value(si), id = s != 0 ? 1 / s : 0, e = 0;
			for (int i = 0; i < n; i++) {
				float t = (float)round_unsigned((xs[i] - z) * id, 15) * s;
				t = t + z;
				t = t - xs[i];
				e += t * t;
			}
			if (first || e < be) *zc = zi, *sc = si, be = e, first = 0;
		}
	}
}

int kvs_key_quantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	int rc = key_groups(p, n, groups, resid);
	if (rc != KVS_OK) return rc;
	int D = p->head_dim, G = p->group;
	float qm = qmax8(p->prec), amax[KVS_MAX_HEAD_DIM];
	uint8_t *scale = (uint8_t *)p->scale;
	for (int64_t i = 0; i < n; i++) {
		int64_t lb = groups[i] / p->groups;
		int g = (int)(groups[i] % p->groups), lo = g * G, gn = p->block_size - lo < G ? p->block_size - lo : G;
		const uint8_t *r = resid[i];
		for (int h = 0; h < p->kv_heads; h++) {
			int64_t si = kvs_key_scale_index(p, lb, h, g);
			uint8_t *row0 = (uint8_t *)p->data + key_index(p, lb, h, lo);
			int64_t rs = p->row_bytes; /* from one token's data row to the next */
			if (p->prec != KVS_KV_INT4) {
				/* One E5M3 base for the head's group, then per channel the
				 * smallest multiplier r with base*(r+1)/16 >= amax/qmax. */
				float top = 0;
				for (int d = 0; d < D; d++) {
					float a = 0;
					for (int tg = 0; tg < gn; tg++) {
						float v = get_resid(p, r, row0 + tg * rs, h, tg, d);
						if (v < 0) v = -v;
						if (v > a) a = v;
					}
					amax[d] = a;
					if (a > top) top = a;
				}
				uint8_t *sc = scale + si;
				sc[0] = scale_up(top / qm);
				float base = kvs_s8(sc[0]);
				for (int d = 0; d < D; d++) {
					float want = amax[d] / qm;
					int m = 0;
					while (m < 15 && base * (float)(m + 1) * (1.0f / 16) < want) m++;
					uint8_t sh = (uint8_t)((d & 1) * 4);
					sc[1 + (d >> 1)] = (uint8_t)((sc[1 + (d >> 1)] & ~(0xf << sh)) | m << sh);
				}
			}
			for (int d = 0; d < D; d++) {
				float id = 0, m = 0, s;
				if (p->prec == KVS_KV_INT4) {
					float xs[256]; /* the channel's values, decoded once (block_size <= 256) */
					for (int tg = 0; tg < gn; tg++) xs[tg] = get_resid(p, r, row0 + tg * rs, h, tg, d);
					int zc = 0, sc = 0;
					int4_key_codes(xs, gn, &zc, &sc);
					uint8_t *mt = scale + si;
					int P = (D + 7) / 8, uz = zc < 0 ? -zc | 512 : zc;
					mt[d] = (uint8_t)sc, mt[D + d] = (uint8_t)uz;
					set_bit(mt + 2 * D, d, sc >> 8), set_bit(mt + 2 * D + P, d, uz >> 8), set_bit(mt + 2 * D + 2 * P, d, uz >> 9);
					m = e5m4_value(zc), s = e5m4_value(sc);
				} else {
					s = kvs_key_scale(scale + si, d);
				}
				if (s != 0) id = 1 / s;
				/* Each token's value is read before its byte is overwritten. */
				for (int tg = 0; tg < gn; tg++) {
					uint8_t *drow = row0 + tg * rs;
					put_code(p->prec, drow, d, code8(p->prec, get_resid(p, r, drow, h, tg, d), id, m));
				}
			}
		}
	}
	return KVS_OK;
}

int kvs_key_dequantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	int rc = key_groups(p, n, groups, resid);
	if (rc != KVS_OK) return rc;
	int D = p->head_dim, G = p->group;
	float row[KVS_MAX_HEAD_DIM];
	for (int64_t i = 0; i < n; i++) {
		int64_t lb = groups[i] / p->groups;
		int g = (int)(groups[i] % p->groups), lo = g * G, gn = p->block_size - lo < G ? p->block_size - lo : G;
		for (int h = 0; h < p->kv_heads; h++)
			for (int tg = 0; tg < gn; tg++) {
				kvs_decode_row(p, lb, h, lo + tg, NULL, NULL, row);
				uint8_t *drow = (uint8_t *)p->data + key_index(p, lb, h, lo + tg);
				for (int d = 0; d < D; d++) put_resid(p, resid[i], drow, h, tg, d, kvs_f2h(row[d]));
			}
	}
	return KVS_OK;
}
