/* norm_rope.c: RMSNorm, RoPE, SwiGLU and add, compiled once per path. The
 * loops keep one fixed order per output, so the compiler's vector code gives
 * the scalar bits. */
#include "common.h"

static int rmsnorm(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps) {
	for (int64_t r = 0; r < n; r++) {
		const float *row = x + r * dim;
		double acc[8] = {0};
		int64_t i = 0;
		for (; i + 8 <= dim; i += 8)
			for (int l = 0; l < 8; l++) acc[l] += (double)(row[i + l] * row[i + l]);
		for (int l = 0; i + l < dim; l++) acc[l] += (double)(row[i + l] * row[i + l]);
		for (int s = 4; s >= 1; s >>= 1)
			for (int l = 0; l < s; l++) acc[l] += acc[l + s];
		float mean = (float)(acc[0] / (double)dim);
		float sc = 1 / (float)sqrt((double)(mean + eps));
		float *o = out + r * dim;
		for (int64_t j = 0; j < dim; j++) o[j] = row[j] * sc * weight[j];
	}
	return KVS_OK;
}

/* rope is kept out of the vectorizers: GCC 12 turns its rotation into
 * fused vfmaddsub instructions even under -ffp-contract=off, which would
 * change bits from path to path (the Makefile's fused-instruction check
 * catches such code). */
__attribute__((optimize("no-tree-vectorize"))) static int rope(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
                float base, float scale, const float *ff, int neox) {
	float theta_scale = (float)pow((double)base, -2.0 / (double)rope_dim);
	int64_t half = rope_dim / 2;
	float cs[2 * 512];
	for (int64_t r = 0; r < n; r++) {
		/* cos and sin per pair, for this row's position, in chunks. */
		float theta = (float)pos[r];
		for (int64_t i0 = 0; i0 < half; i0 += 512) {
			int64_t i1 = i0 + 512 < half ? i0 + 512 : half;
			for (int64_t i = i0; i < i1; i++) {
				float t = theta / scale;
				if (ff) t /= ff[i];
				cs[2 * (i - i0)] = (float)cos((double)t);
				cs[2 * (i - i0) + 1] = (float)sin((double)t);
				theta *= theta_scale;
			}
			for (int64_t h = 0; h < heads; h++) {
				float *hd = x + (r * heads + h) * head_dim;
				for (int64_t i = i0; i < i1; i++) {
					int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
					float c = cs[2 * (i - i0)], s = cs[2 * (i - i0) + 1], x0 = hd[a], x1 = hd[b];
					hd[a] = x0 * c - x1 * s;
					hd[b] = x0 * s + x1 * c;
				}
			}
		}
	}
	return KVS_OK;
}

static int swiglu(float *out, const float *gate, const float *up, int64_t len) {
	for (int64_t i = 0; i < len; i++) {
		float g = gate[i];
		out[i] = g / (1 + kvs_expf(-g)) * up[i];
	}
	return KVS_OK;
}

static int add(float *x, const float *y, int64_t len) {
	for (int64_t i = 0; i < len; i++) x[i] += y[i];
	return KVS_OK;
}

int KVS_FN(kvs_rmsnorm)(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps) {
	return rmsnorm(out, x, weight, n, dim, eps);
}
int KVS_FN(kvs_rope)(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
                     float base, float scale, const float *ff, int neox) {
	return rope(x, n, heads, head_dim, rope_dim, pos, base, scale, ff, neox);
}
int KVS_FN(kvs_swiglu)(float *out, const float *gate, const float *up, int64_t len) {
	return swiglu(out, gate, up, len);
}
int KVS_FN(kvs_add)(float *x, const float *y, int64_t len) { return add(x, y, len); }
