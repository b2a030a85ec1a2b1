/* kvwrite.c: storing a token's K or V row in a block slot, with the bytes
 * engine/kvstore's Write produces (not a hot loop: one path). */
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

/* scale_near and zero_near return the E5M3 and E5M2 codes nearest x (of
 * its f16, the dropped bits rounded half up), saturating; int4 takes them
 * and clamps its codes (engine/kvstore's scaleNear, zeroNear). */
static uint8_t scale_near(float x) {
	if (!(x > 0)) return 0;
	uint32_t c = ((uint32_t)f16_finite(x) + 0x40) >> 7;
	return (uint8_t)(c > 0xf7 ? 0xf7 : c);
}

static uint8_t zero_near(float x) {
	if (x != x) return 0;
	uint16_t f = f16_finite(x);
	uint32_t m = ((uint32_t)(f & 0x7fff) + 0x80) >> 8;
	return (uint8_t)((f >> 8 & 0x80) | (m > 0x7b ? 0x7b : m));
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

/* write_row stores one row x at (layer, block, slot). */
static void write_row(const struct kvs_kv_plane *p, int32_t layer, int32_t block, int32_t slot, const float *x) {
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
	for (int g = 0; g < p->groups; g++) {
		int lo = g * G, hi = lo + G < row ? lo + G : row;
		const float *xs = x + lo;
		int n = hi - lo, d = lo % D;
		int64_t off = base + (lo / D) * stride;
		float amax = 0, mn = xs[0], mx = xs[0];
		for (int i = 0; i < n; i++) {
			float a = xs[i] < 0 ? -xs[i] : xs[i];
			if (a > amax) amax = a;
			if (xs[i] < mn) mn = xs[i];
			if (xs[i] > mx) mx = xs[i];
		}
		float id = 0, m = 0;
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
		uint8_t sc;
		if (p->prec == KVS_KV_INT4) {
			uint8_t zp = zero_near(mn);
			((uint8_t *)p->zero)[si + g] = zp;
			m = kvs_z8(zp);
			sc = scale_near((mx - m) / 15);
		} else {
			sc = scale_up(amax / qmax8(p->prec));
			/* int8: the code below when it codes the group with a smaller
			 * squared error (engine/kvstore's int8Scale) */
			if (p->prec == KVS_KV_INT8 && sc > 0 && sse8(xs, n, (uint8_t)(sc - 1)) < sse8(xs, n, sc)) sc--;
		}
		((uint8_t *)p->scale)[si + g] = sc;
		if (kvs_s8(sc) != 0) id = 1 / kvs_s8(sc);
		for (int i = 0; i < n; i++) {
			put_code(p->prec, data + off, d, code8(p->prec, xs[i], id, m));
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
	for (int64_t i = 0; i < n; i++) {
		int32_t b = slots[i] / p->block_size, t = slots[i] % p->block_size;
		if (p->key) write_key(p, (int64_t)layer * p->blocks + b, t, rows + i * row, resid[i]);
		else write_row(p, layer, b, t, rows + i * row);
	}
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

int kvs_key_quantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	int rc = key_groups(p, n, groups, resid);
	if (rc != KVS_OK) return rc;
	int D = p->head_dim, G = p->group;
	float qm = qmax8(p->prec), amax[KVS_MAX_HEAD_DIM];
	uint8_t *scale = (uint8_t *)p->scale, *zero = (uint8_t *)p->zero;
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
					float mn = get_resid(p, r, row0, h, 0, d), mx = mn;
					for (int tg = 1; tg < gn; tg++) {
						float v = get_resid(p, r, row0 + tg * rs, h, tg, d);
						mn = go_min(mn, v), mx = go_max(mx, v);
					}
					uint8_t zp = zero_near(mn);
					zero[si + d] = zp;
					m = kvs_z8(zp);
					scale[si + d] = scale_near((mx - m) / 15);
					s = kvs_s8(scale[si + d]);
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
