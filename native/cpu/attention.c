/* attention.c: paged attention over K/V blocks in the store's own layout,
 * compiled once per path. */
#include "kv.h"
#include "simd.h"

#if defined(__AVX512F__)
/* vsum_regs adds up, for hn <= H query heads of KV head g, out_h = sum over
 * positions p0..np-1, in order, of (w_h[p-p0]*inv_h) * v_p, each product
 * rounded and then added (the generic loop's operations), with the H*C
 * 16-lane sums (C = head_dim/16) in registers: C and H are constants at
 * each call, so the arrays below are registers. */
static inline __attribute__((always_inline)) void vsum_regs(const int C, const int H, const struct kvs_kv_plane *v,
                                                            int32_t layer, int g, const int32_t *tab, int p0, int np,
                                                            const float *w, int m, const float *inv, int hn,
                                                            const float *fp8tab, float *vb, float *out) {
	int D = 16 * C, B = v->block_size;
	__m512 acc[H][C];
	for (int h = 0; h < H; h++)
		for (int c = 0; c < C; c++) acc[h][c] = _mm512_setzero_ps();
	for (int p = p0; p < np; p++) {
		int j = p / B, t = p % B;
		int64_t lb = (int64_t)layer * v->blocks + tab[j];
		const float *vr = vb;
		if (v->prec == KVS_KV_F32)
			vr = (const float *)v->data + lb * v->data_per_block + (int64_t)(g * B + t) * D;
		else
			kvs_decode_row(v, lb, g, t, NULL, fp8tab, vb);
		for (int h = 0; h < H; h++) {
			if (h >= hn) break;
			__m512 pr = _mm512_set1_ps(w[(int64_t)h * m + p - p0] * inv[h]);
			for (int c = 0; c < C; c++) acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(pr, _mm512_loadu_ps(vr + 16 * c)));
		}
	}
	for (int h = 0; h < H && h < hn; h++)
		for (int c = 0; c < C; c++) _mm512_storeu_ps(out + h * D + 16 * c, acc[h][c]);
}
#endif

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
				int hh = 0;
				for (; hh + 4 <= group; hh += 4) {
					const float *qs[4] = {qg + hh * D, qg + (hh + 1) * D, qg + (hh + 2) * D, qg + (hh + 3) * D};
					float d4[4];
					dot_any4(kr, 0, qs, D, d4);
					for (int v = 0; v < 4; v++) scratch[(int64_t)(hh + v) * m + p - p0] = d4[v] * scale;
				}
				for (; hh < group; hh++) scratch[(int64_t)hh * m + p - p0] = dot_any(kr, 0, qg + hh * D, D) * scale;
			}
			/* Softmax per query head: the max in sixteen lanes (the
			 * same value as in order), exp, then the heads' sums in
			 * double side by side, each in position order. */
			float inv[KVS_MAX_GROUP];
			double sum[KVS_MAX_GROUP];
			for (int hh = 0; hh < group; hh++) {
				float *sc = scratch + (int64_t)hh * m, lane[16];
				for (int l = 0; l < 16; l++) lane[l] = -INFINITY;
				int i = 0;
				for (; i + 16 <= m; i += 16)
					for (int l = 0; l < 16; l++) lane[l] = sc[i + l] > lane[l] ? sc[i + l] : lane[l];
				for (; i < m; i++) lane[0] = sc[i] > lane[0] ? sc[i] : lane[0];
				float mx = lane[0];
				for (int l = 1; l < 16; l++) mx = lane[l] > mx ? lane[l] : mx;
				for (i = 0; i < m; i++) sc[i] = kvs_expf(sc[i] - mx);
				sum[hh] = 0;
			}
			for (int i = 0; i < m; i++)
				for (int hh = 0; hh < group; hh++) sum[hh] += (double)scratch[(int64_t)hh * m + i];
			for (int hh = 0; hh < group; hh++) {
				inv[hh] = (float)(1 / sum[hh]);
				for (int d = 0; d < D; d++) og[hh * D + d] = 0;
			}
#if defined(__AVX512F__)
			if (D == 64 || D == 128 || D == 256) {
				/* H heads a pass: H*D/16 accumulators, 16 registers. */
				const int H = D == 64 ? 4 : D == 128 ? 2 : 1;
				for (int h0 = 0; h0 < group; h0 += H) {
					int hn = group - h0 < H ? group - h0 : H;
					const float *pw = scratch + (int64_t)h0 * m;
					float *oh = og + (int64_t)h0 * D;
					switch (D) {
					case 64: vsum_regs(4, 4, v, layer, g, tab, p0, np, pw, m, inv + h0, hn, fp8tab, vb, oh); break;
					case 128: vsum_regs(8, 2, v, layer, g, tab, p0, np, pw, m, inv + h0, hn, fp8tab, vb, oh); break;
					default: vsum_regs(16, 1, v, layer, g, tab, p0, np, pw, m, inv + h0, hn, fp8tab, vb, oh); break;
					}
				}
				continue;
			}
#endif
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
