/* attention.c: paged attention over K/V blocks in the store's own layout,
 * compiled once per path. */
#include "kv.h"
#include "simd.h"

static int attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                     int32_t heads, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                     const int64_t *table_off, const uint8_t *const *k_resid, float *scores, float *out) {
	int D = k->head_dim, B = k->block_size, group = heads / k->kv_heads;
	float fp8tab[256], kb[KVS_MAX_HEAD_DIM], vb[KVS_MAX_HEAD_DIM];
	if (k->prec == KVS_KV_FP8 || v->prec == KVS_KV_FP8)
		for (int c = 0; c < 256; c++) fp8tab[c] = kvs_fp8((uint8_t)c);
	for (int64_t r = 0; r < n; r++) {
		int np = n_pos[r];
		const int32_t *tab = tables + table_off[r];
		for (int h = 0; h < heads; h++) {
			int g = h / group;
			const float *qh = q + (r * heads + h) * D;
			for (int p = 0; p < np; p++) {
				int j = p / B, t = p % B;
				int64_t lb = (int64_t)layer * k->blocks + tab[j];
				float dot;
				if (k->prec <= KVS_KV_BF16) {
					int64_t di = lb * k->data_per_block + (int64_t)(g * B + t) * D;
					int es = k->prec == KVS_KV_F32 ? 4 : 2;
					dot = dot_any((const uint8_t *)k->data + di * es, k->prec, qh, D);
				} else {
					const uint8_t *res = k->key ? k_resid[(table_off[r] + j) * k->groups + t / k->group] : NULL;
					kvs_decode_row(k, lb, g, t, res, fp8tab, kb);
					dot = dot_any(kb, 0, qh, D);
				}
				scores[p] = dot * scale;
			}
			float mx = -INFINITY;
			for (int p = 0; p < np; p++) mx = fmaxf(mx, scores[p]);
			double sum = 0;
			for (int p = 0; p < np; p++) {
				float e = (float)exp((double)(scores[p] - mx));
				scores[p] = e;
				sum += (double)e;
			}
			float inv = (float)(1 / sum);
			float *oh = out + (r * heads + h) * D;
			for (int d = 0; d < D; d++) oh[d] = 0;
			for (int p = 0; p < np; p++) {
				int j = p / B, t = p % B;
				int64_t lb = (int64_t)layer * v->blocks + tab[j];
				float pr = scores[p] * inv;
				const float *vr = vb;
				if (v->prec == KVS_KV_F32)
					vr = (const float *)v->data + lb * v->data_per_block + (int64_t)(g * B + t) * D;
				else
					kvs_decode_row(v, lb, g, t, NULL, fp8tab, vb);
				for (int d = 0; d < D; d++) oh[d] += pr * vr[d];
			}
		}
	}
	return KVS_OK;
}

int KVS_FN(kvs_attention)(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                          int32_t heads, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                          const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	return attention(k, v, layer, n, heads, scale, q, n_pos, tables, table_off, k_resid, scratch, out);
}
