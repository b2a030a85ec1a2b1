/* attention.c: paged attention over K/V blocks in the store's own layout,
 * compiled once per path. */
#include "kv.h"
#include "simd.h"

static int attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                     int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                     const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	int D = k->head_dim, B = k->block_size, group = heads / k->kv_heads;
	float fp8tab[256], kb[KVS_MAX_HEAD_DIM], vb[KVS_MAX_HEAD_DIM];
	if (k->prec == KVS_KV_FP8 || v->prec == KVS_KV_FP8)
		for (int c = 0; c < 256; c++) fp8tab[c] = kvs_fp8((uint8_t)c);
	for (int64_t r = 0; r < n; r++) {
		int np = n_pos[r], p0 = window > 0 && np > window ? np - window : 0, m = np - p0;
		const int32_t *tab = tables + table_off[r];
		/* The query heads of one KV head share each decoded K and V row. */
		for (int g = head0 / group; g < head1 / group; g++) {
			const float *qg = q + (r * heads + (int64_t)g * group) * D;
			float *og = out + (r * heads + (int64_t)g * group) * D;
			for (int p = p0; p < np; p++) {
				int j = p / B, t = p % B;
				int64_t lb = (int64_t)layer * k->blocks + tab[j];
				const float *kr = kb;
				if (k->prec == KVS_KV_F32)
					kr = (const float *)k->data + lb * k->data_per_block + (int64_t)(g * B + t) * D;
				else
					kvs_decode_row(k, lb, g, t, k->key ? k_resid[(table_off[r] + j) * k->groups + t / k->group] : NULL,
					               fp8tab, kb);
				for (int hh = 0; hh < group; hh++)
					scratch[(int64_t)hh * m + p - p0] = dot_any(kr, 0, qg + hh * D, D) * scale;
			}
			float inv[KVS_MAX_GROUP];
			for (int hh = 0; hh < group; hh++) {
				float *sc = scratch + (int64_t)hh * m, mx = -INFINITY;
				for (int i = 0; i < m; i++) mx = fmaxf(mx, sc[i]);
				for (int i = 0; i < m; i++) sc[i] = kvs_expf(sc[i] - mx);
				double sum = 0;
				for (int i = 0; i < m; i++) sum += (double)sc[i];
				inv[hh] = (float)(1 / sum);
				for (int d = 0; d < D; d++) og[hh * D + d] = 0;
			}
			for (int p = p0; p < np; p++) {
				int j = p / B, t = p % B;
				int64_t lb = (int64_t)layer * v->blocks + tab[j];
				const float *vr = vb;
				if (v->prec == KVS_KV_F32)
					vr = (const float *)v->data + lb * v->data_per_block + (int64_t)(g * B + t) * D;
				else
					kvs_decode_row(v, lb, g, t, NULL, fp8tab, vb);
				for (int hh = 0; hh < group; hh++) {
					float pr = scratch[(int64_t)hh * m + p - p0] * inv[hh], *oh = og + hh * D;
					for (int d = 0; d < D; d++) oh[d] += pr * vr[d];
				}
			}
		}
	}
	return KVS_OK;
}

int KVS_FN(kvs_attention)(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                          int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                          const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	return attention(k, v, layer, n, heads, head0, head1, window, scale, q, n_pos, tables, table_off, k_resid, scratch, out);
}
