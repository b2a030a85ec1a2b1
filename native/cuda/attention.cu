/* attention.cu: paged attention over block tables, in the style of vLLM's
 * paged_attention v2 (and FlashInfer's split-KV decode): each row's
 * attended positions are cut into partitions of PART positions; thread
 * block (row, KV head, worker w) takes partitions w, w+WORKERS, ... of the
 * row, computing for the query heads sharing that KV head the scores of a
 * partition (each decoded key row serves all of them), its softmax
 * (max, exp, sum) and the weighted sum of its value rows, merged into a
 * running (max, sum, output) with the usual rescaling. A row of one
 * partition writes its output at once; longer rows leave one partial
 * result per worker in scratch, and the reduce kernel merges them in
 * worker order. The partitioning depends only on the row's own length
 * (never on the batch, nor on the block size), so results are
 * batch-invariant and block-size-invariant.
 *
 * Prefill (kvs_attention given at least TILE_MIN_ROWS rows) runs
 * attn_tile_kernel instead: the rows of a prompt chunk share each decoded K
 * and V row through shared memory, while every row's arithmetic stays the
 * decode kernel's, so a row gets the same bits whichever kernel runs.
 *
 * Int4 values are stored rotated (kv.cuh): both kernels weight the rotated
 * rows, and rotate_kernel then rotates each head's output back, once. */
#include <math.h>

#include "common.cuh"
#include "kv.cuh"

#define PART 256     /* positions a partition */
#define WORKERS 64   /* thread blocks a (row, KV head) at most */
#define ATT_THREADS 128
#define HCHUNK 8     /* query heads a thread keeps in registers at a time */
#define TILE_MIN_ROWS 16 /* rows from which kvs_attention runs the prefill kernel */

/* attended returns the first attended position and the count for a row
 * of n_pos positions. */
__device__ __forceinline__ void attended(int32_t n_pos, int32_t window, int *first, int *count) {
	int f = window > 0 && n_pos > window ? n_pos - window : 0;
	*first = f, *count = n_pos - f;
}

__global__ void attn_kernel(struct kvs_kv_plane K, struct kvs_kv_plane V, int32_t layer, int32_t heads, int32_t head0,
                            int32_t G, int32_t window, float scale, const float *__restrict__ q,
                            const int32_t *__restrict__ n_pos, const int32_t *__restrict__ tables,
                            const int64_t *__restrict__ table_off, const uint8_t *const *__restrict__ k_resid,
                            float *__restrict__ wmax, float *__restrict__ wsum, float *__restrict__ wacc,
                            float *__restrict__ out) {
	KVS_DYNAMIC_SHARED(float, sm);
	const int D = K.head_dim, B = K.block_size;
	const int64_t r = blockIdx.x;
	const int kvh = head0 / G + blockIdx.y, w = blockIdx.z, h0 = kvh * G;
	int first, count;
	attended(n_pos[r], window, &first, &count);
	const int nparts = (count + PART - 1) / PART;
	if (w >= nparts) return;
	float *qs = sm, *acc = qs + G * D, *sc = acc + G * D, *M = sc + G * PART, *S = M + G, *alpha = S + G,
	      *beta = alpha + G;
	const int tid = threadIdx.x, warp = tid / KVS_WARP, lane = tid % KVS_WARP, warps = blockDim.x / KVS_WARP;
	for (int e = tid; e < G * D; e += blockDim.x) {
		qs[e] = q[(r * heads + h0) * D + e];
		acc[e] = 0;
	}
	for (int g = tid; g < G; g += blockDim.x) M[g] = -INFINITY, S[g] = 0;
	const int32_t *table = tables + table_off[r];
	__syncthreads();
	for (int part = w; part < nparts; part += gridDim.z) {
		const int p0 = first + part * PART, np = min(PART, first + count - p0);
		/* scores: a warp a position */
		for (int i = warp; i < np; i += warps) {
			int t = p0 + i, blk = table[t / B];
			bool ok = blk >= 0 && blk < K.blocks;
			int64_t lb = (int64_t)layer * K.blocks + blk;
			const uint8_t *rz = K.key && ok ? k_resid[(table_off[r] + t / B) * K.groups + (t % B) / K.group] : NULL;
			for (int g0 = 0; g0 < G; g0 += HCHUNK) {
				float a[HCHUNK];
#pragma unroll
				for (int k = 0; k < HCHUNK; k++) a[k] = 0;
				if (ok)
					for (int d = lane; d < D; d += KVS_WARP) {
						float kv = key_value(K, lb, kvh, t % B, d, rz);
#pragma unroll
						for (int k = 0; k < HCHUNK; k++)
							if (g0 + k < G) a[k] += qs[(g0 + k) * D + d] * kv;
					}
				/* only the group's heads: g0 + k < G holds for the whole warp */
#pragma unroll
				for (int k = 0; k < HCHUNK && g0 + k < G; k++) {
					float s = warp_sum(a[k]);
					if (lane == 0) sc[(g0 + k) * PART + i] = ok ? s * scale : -INFINITY;
				}
			}
		}
		__syncthreads();
		/* softmax of the partition, merged into the running max and sum */
		for (int g = warp; g < G; g += warps) {
			float m = -INFINITY;
			for (int i = lane; i < np; i += KVS_WARP) m = fmaxf(m, sc[g * PART + i]);
			m = warp_max(m);
			float s = 0;
			for (int i = lane; i < np; i += KVS_WARP) {
				float p = m == -INFINITY ? 0.0f : expf(sc[g * PART + i] - m);
				sc[g * PART + i] = p;
				s += p;
			}
			s = warp_sum(s);
			if (lane == 0) {
				float nm = fmaxf(M[g], m);
				float al = M[g] == -INFINITY ? 0.0f : expf(M[g] - nm), be = m == -INFINITY ? 0.0f : expf(m - nm);
				S[g] = S[g] * al + s * be;
				M[g] = nm, alpha[g] = al, beta[g] = be;
			}
		}
		__syncthreads();
		/* values: a thread a dimension, positions in order */
		for (int d = tid; d < D; d += blockDim.x)
			for (int g0 = 0; g0 < G; g0 += HCHUNK) {
				float a[HCHUNK];
#pragma unroll
				for (int k = 0; k < HCHUNK; k++) a[k] = 0;
				for (int i = 0; i < np; i++) {
					int t = p0 + i, blk = table[t / B];
					if (blk < 0 || blk >= V.blocks) continue;
					float v = kv_value(V, (int64_t)layer * V.blocks + blk, kvh, t % B, d);
#pragma unroll
					for (int k = 0; k < HCHUNK; k++)
						if (g0 + k < G) a[k] += sc[(g0 + k) * PART + i] * v;
				}
#pragma unroll
				for (int k = 0; k < HCHUNK; k++)
					if (g0 + k < G) {
						int e = (g0 + k) * D + d;
						acc[e] = acc[e] * alpha[g0 + k] + a[k] * beta[g0 + k];
					}
			}
		__syncthreads();
	}
	for (int e = tid; e < G * D; e += blockDim.x) {
		int g = e / D, d = e % D;
		int64_t hq = r * heads + h0 + g;
		if (nparts == 1 || gridDim.z == 1) { /* one worker: the whole row */
			out[hq * D + d] = S[g] > 0 ? acc[e] / S[g] : 0.0f;
		} else {
			wacc[(hq * WORKERS + w) * D + d] = acc[e];
			if (d == 0) wmax[hq * WORKERS + w] = M[g], wsum[hq * WORKERS + w] = S[g];
		}
	}
}

/* attn_tile_kernel is the prefill path: thread block (tile of R rows, KV
 * head). Runs of consecutive rows with the same block table and first
 * position (a prompt chunk's rows, which differ only in their lengths) share
 * each decoded K and V row of a partition through shared memory, in tiles of
 * TILE_CH positions, instead of decoding it once per row. Every row's
 * arithmetic is the decode kernel's, operation for operation (scores as the
 * same lane sums and butterfly, the partition's softmax in the same order,
 * values summed position by position, partition p merged into worker slot
 * p % WORKERS exactly as worker p % WORKERS merges it), so a row gets the
 * same bits here as from attn_kernel: which kernel runs cannot show. */
#define TILE_CH 32
#define TILE_THREADS 256

__global__ void attn_tile_kernel(struct kvs_kv_plane K, struct kvs_kv_plane V, int32_t layer, int32_t heads, int32_t head0,
                                 int32_t G, int32_t window, float scale, const float *__restrict__ q,
                                 const int32_t *__restrict__ n_pos, const int32_t *__restrict__ tables,
                                 const int64_t *__restrict__ table_off, const uint8_t *const *__restrict__ k_resid,
                                 float *__restrict__ wmax, float *__restrict__ wsum, float *__restrict__ wacc,
                                 float *__restrict__ out, int64_t n, int R) {
	KVS_DYNAMIC_SHARED(float, sm);
	const int D = K.head_dim, B = K.block_size, RG = R * G;
	const int kvh = head0 / G + blockIdx.y, h0 = kvh * G;
	const int tid = threadIdx.x, warp = tid / KVS_WARP, lane = tid % KVS_WARP, warps = blockDim.x / KVS_WARP;
	float *qs = sm, *as = qs + RG * D, *sc = as + RG * D, *kt = sc + RG * PART, *pm = kt + TILE_CH * D, *ps = pm + RG;
	int *okf = (int *)(ps + RG), *cnt = okf + TILE_CH;
	const int64_t r0 = (int64_t)blockIdx.x * R, r1 = min(n, r0 + R);
	for (int64_t gs = r0; gs < r1;) {
		/* the run of rows sharing gs's table and first position */
		int f0, c0;
		attended(n_pos[gs], window, &f0, &c0);
		const int64_t off0 = table_off[gs];
		int64_t ge = gs + 1;
		int maxc = c0;
		while (ge < r1) {
			int f, c;
			attended(n_pos[ge], window, &f, &c);
			if (f != f0 || table_off[ge] != off0) break;
			maxc = max(maxc, c);
			ge++;
		}
		const int nr = (int)(ge - gs);
		const int32_t *table = tables + off0;
		for (int e = tid; e < nr * G * D; e += blockDim.x)
			qs[e] = q[((gs + e / (G * D)) * heads + h0) * D + e % (G * D)];
		for (int i = tid; i < nr; i += blockDim.x) {
			int f, c;
			attended(n_pos[gs + i], window, &f, &c);
			cnt[i] = c;
		}
		__syncthreads();
		const int np_max = (maxc + PART - 1) / PART;
		for (int p = 0; p < np_max; p++) {
			const int p0 = f0 + p * PART, npos = min(PART, f0 + maxc - p0);
			/* scores, a tile of positions at a time */
			for (int c = 0; c < npos; c += TILE_CH) {
				const int cn = min(TILE_CH, npos - c);
				for (int e = tid; e < cn * D; e += blockDim.x) {
					int i = e / D, d = e % D, t = p0 + c + i, blk = table[t / B];
					bool ok = blk >= 0 && blk < K.blocks;
					const uint8_t *rz = K.key && ok ? k_resid[(off0 + t / B) * K.groups + (t % B) / K.group] : NULL;
					kt[e] = ok ? key_value(K, (int64_t)layer * K.blocks + blk, kvh, t % B, d, rz) : 0.0f;
					if (d == 0) okf[i] = ok;
				}
				__syncthreads();
				for (int pr = warp; pr < nr * cn; pr += warps) {
					int row = pr / cn, i = pr % cn, ii = c + i;
					if (ii >= min(PART, cnt[row] - p * PART)) continue;
					for (int g0 = 0; g0 < G; g0 += HCHUNK) {
						float a[HCHUNK];
#pragma unroll
						for (int k = 0; k < HCHUNK; k++) a[k] = 0;
						if (okf[i])
							for (int d = lane; d < D; d += KVS_WARP) {
								float kv = kt[i * D + d];
#pragma unroll
								for (int k = 0; k < HCHUNK; k++)
									if (g0 + k < G) a[k] += qs[(row * G + g0 + k) * D + d] * kv;
							}
#pragma unroll
						for (int k = 0; k < HCHUNK && g0 + k < G; k++) {
							float s = warp_sum(a[k]);
							if (lane == 0) sc[(row * G + g0 + k) * PART + ii] = okf[i] ? s * scale : -INFINITY;
						}
					}
				}
				__syncthreads();
			}
			/* the partition's softmax, per (row, query head) */
			for (int pr = warp; pr < nr * G; pr += warps) {
				int row = pr / G, np = min(PART, cnt[row] - p * PART);
				if (np <= 0) continue;
				float *srow = sc + pr * PART;
				float m = -INFINITY;
				for (int i = lane; i < np; i += KVS_WARP) m = fmaxf(m, srow[i]);
				m = warp_max(m);
				float s = 0;
				for (int i = lane; i < np; i += KVS_WARP) {
					float pv = m == -INFINITY ? 0.0f : expf(srow[i] - m);
					srow[i] = pv;
					s += pv;
				}
				s = warp_sum(s);
				if (lane == 0) pm[pr] = m, ps[pr] = s;
			}
			for (int e = tid; e < nr * G * D; e += blockDim.x) as[e] = 0;
			__syncthreads();
			/* values, a tile of positions at a time, summed in order */
			for (int c = 0; c < npos; c += TILE_CH) {
				const int cn = min(TILE_CH, npos - c);
				for (int e = tid; e < cn * D; e += blockDim.x) {
					int i = e / D, d = e % D, t = p0 + c + i, blk = table[t / B];
					bool ok = blk >= 0 && blk < V.blocks;
					kt[e] = ok ? kv_value(V, (int64_t)layer * V.blocks + blk, kvh, t % B, d) : 0.0f;
					if (d == 0) okf[i] = ok;
				}
				__syncthreads();
				for (int e = tid; e < nr * G * D; e += blockDim.x) {
					int row = e / (G * D), pr = e / D, d = e % D, np = min(PART, cnt[row] - p * PART);
					float a = as[e];
					for (int i = 0; i < cn && c + i < np; i++) {
						if (!okf[i]) continue;
						a += sc[pr * PART + c + i] * kt[i * D + d];
					}
					as[e] = a;
				}
				__syncthreads();
			}
			/* merge into worker slot p % WORKERS, or write out a row of one
			 * partition: the decode kernel's operations */
			for (int e = tid; e < nr * G * D; e += blockDim.x) {
				int row = e / (G * D), pr = e / D, g = pr % G, d = e % D;
				int nparts = (cnt[row] + PART - 1) / PART;
				if (p >= nparts) continue;
				int64_t hq = (gs + row) * heads + h0 + g;
				float m = pm[pr], s = ps[pr];
				if (nparts == 1) {
					float nm = fmaxf(-INFINITY, m), al = 0.0f, be = m == -INFINITY ? 0.0f : expf(m - nm);
					float S = 0.0f * al + s * be, acc = 0.0f * al + as[e] * be;
					(void)nm;
					out[hq * D + d] = S > 0 ? acc / S : 0.0f;
				} else if (wacc) {
					int64_t slot = hq * WORKERS + p % WORKERS;
					float M0 = p < WORKERS ? -INFINITY : wmax[slot], A0 = p < WORKERS ? 0.0f : wacc[slot * D + d];
					float nm = fmaxf(M0, m);
					float al = M0 == -INFINITY ? 0.0f : expf(M0 - nm), be = m == -INFINITY ? 0.0f : expf(m - nm);
					wacc[slot * D + d] = A0 * al + as[e] * be;
				} else {
					out[hq * D + d] = 0.0f; /* no scratch for a row longer than a partition */
				}
			}
			__syncthreads();
			for (int pr = tid; pr < nr * G && wacc; pr += blockDim.x) {
				int row = pr / G, g = pr % G, nparts = (cnt[row] + PART - 1) / PART;
				if (p >= nparts || nparts == 1) continue;
				int64_t slot = ((gs + row) * heads + h0 + g) * WORKERS + p % WORKERS;
				float m = pm[pr], s = ps[pr];
				float M0 = p < WORKERS ? -INFINITY : wmax[slot], S0 = p < WORKERS ? 0.0f : wsum[slot];
				float nm = fmaxf(M0, m);
				float al = M0 == -INFINITY ? 0.0f : expf(M0 - nm), be = m == -INFINITY ? 0.0f : expf(m - nm);
				wsum[slot] = S0 * al + s * be;
				wmax[slot] = nm;
			}
			__syncthreads();
		}
		gs = ge;
	}
}

/* tile_smem is the prefill kernel's shared memory for tiles of R rows. */
static size_t tile_smem(int64_t R, int64_t G, int64_t D) {
	return (size_t)(2 * R * G * D + R * G * PART + TILE_CH * D + 2 * R * G + TILE_CH + R) * sizeof(float);
}

/* reduce_kernel merges the workers' partial results of rows longer than
 * one partition, in worker order. */
__global__ void reduce_kernel(int32_t heads, int32_t head0, int32_t D, int32_t window, const int32_t *__restrict__ n_pos,
                              const float *__restrict__ wmax, const float *__restrict__ wsum,
                              const float *__restrict__ wacc, float *__restrict__ out) {
	const int64_t r = blockIdx.x, hq = r * heads + head0 + blockIdx.y;
	int first, count;
	attended(n_pos[r], window, &first, &count);
	const int nparts = (count + PART - 1) / PART;
	if (nparts <= 1) return;
	const int nw = min(nparts, WORKERS);
	float m = -INFINITY;
	for (int w = 0; w < nw; w++) m = fmaxf(m, wmax[hq * WORKERS + w]);
	float den = 0;
	for (int w = 0; w < nw; w++)
		if (wsum[hq * WORKERS + w] > 0) den += wsum[hq * WORKERS + w] * expf(wmax[hq * WORKERS + w] - m);
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float o = 0;
		for (int w = 0; w < nw; w++)
			if (wsum[hq * WORKERS + w] > 0) o += wacc[(hq * WORKERS + w) * D + d] * expf(wmax[hq * WORKERS + w] - m);
		out[hq * D + d] = den > 0 ? o / den : 0.0f;
	}
}

/* rotate_kernel rotates the output of query head head0 + blockIdx.y of row
 * blockIdx.x back from int4 values' rotation (wht_rows, its own inverse):
 * attention over rotated rows is the rotated attention. */
__global__ void rotate_kernel(int32_t heads, int32_t head0, int32_t D, float *__restrict__ out) {
	int R = wht_size(D);
	wht_rows(out + ((int64_t)blockIdx.x * heads + head0 + blockIdx.y) * D, D, R, wht_scale(R));
}

/* smem_bytes is the attention kernel's shared memory for G heads of D. */
static size_t smem_bytes(int64_t G, int64_t D) { return (size_t)(2 * G * D + G * PART + 4 * G) * sizeof(float); }

/* kvs_max_smem returns the shared memory a block may opt in to. */
int kvs_max_smem(void) {
	static int v = -1;
	if (v < 0) {
		int dev = 0;
		cudaGetDevice(&dev);
		if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
			cudaGetLastError();
			v = 48 * 1024;
		}
	}
	return v;
}

KVS_EXPORT int64_t kvs_attention_scratch(int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t max_pos) {
	if (n < 0 || heads < 1 || kv_heads < 1 || heads % kv_heads || heads / kv_heads > KVS_MAX_GROUP || head_dim < 1 ||
	    head_dim > KVS_MAX_HEAD_DIM || max_pos < 1)
		return KVS_ERR_ARG;
	if (smem_bytes(heads / kv_heads, head_dim) > (size_t)kvs_max_smem()) return KVS_ERR_ARG;
	if (max_pos <= PART) return 0; /* every row is one partition: no partial results */
	return n * heads * WORKERS * (int64_t)(head_dim + 2) * (int64_t)sizeof(float);
}

KVS_EXPORT int kvs_attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                             int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q,
                             const int32_t *n_pos, const int32_t *tables, const int64_t *table_off,
                             const uint8_t *const *k_resid, float *scratch, float *out) {
	int rc = kvs_plane_check(k);
	if (rc == KVS_OK) rc = kvs_plane_check(v);
	if (rc != KVS_OK) return rc;
	if (v->key || (k->key && n > 0 && !k_resid)) return KVS_ERR_ARG;
	if (k->layers != v->layers || k->blocks != v->blocks || k->block_size != v->block_size ||
	    k->kv_heads != v->kv_heads || k->head_dim != v->head_dim || layer < 0 || layer >= k->layers || n < 0 ||
	    n > 0x7fffffff || heads < 1 || heads % k->kv_heads || window < 0)
		return KVS_ERR_ARG;
	int32_t G = heads / k->kv_heads;
	if (G > KVS_MAX_GROUP || head0 < 0 || head1 > heads || head0 > head1 || head0 % G || head1 % G) return KVS_ERR_ARG;
	if (n == 0 || head0 == head1) return KVS_OK;
	if (!q || !n_pos || !tables || !table_off || !out) return KVS_ERR_ARG;
	size_t smem = smem_bytes(G, k->head_dim);
	if (smem > (size_t)kvs_max_smem()) return KVS_ERR_ARG;
	if (smem > 48 * 1024) {
		cudaError_t err = cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (err != cudaSuccess) return kvs_record("attention shared memory", err);
	}
	/* Partial results of the workers (rows of one partition write out at
	 * once and never touch them): max, sum, then the outputs. */
	float *wmax = scratch, *wsum = scratch ? scratch + n * heads * WORKERS : NULL,
	      *wacc = scratch ? scratch + 2 * n * heads * WORKERS : NULL;
	dim3 grid((unsigned)n, (unsigned)((head1 - head0) / G), scratch ? WORKERS : 1);
	cudaStream_t st = kvs_stream();
	/* Many rows (a prompt chunk): the prefill kernel, in tiles of the most
	 * rows its shared memory holds; it gives every row the decode kernel's
	 * bits, so the choice cannot change a result. */
	int R = 0;
	if (n >= TILE_MIN_ROWS)
		for (int r = 16; r >= 2 && !R; r /= 2)
			if (tile_smem(r, G, k->head_dim) <= (size_t)kvs_max_smem()) R = r;
	if (R) {
		size_t ts = tile_smem(R, G, k->head_dim);
		if (ts > 48 * 1024) {
			cudaError_t err = cudaFuncSetAttribute(attn_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ts);
			if (err != cudaSuccess) return kvs_record("attention shared memory", err);
		}
		dim3 tg((unsigned)((n + R - 1) / R), (unsigned)((head1 - head0) / G));
		KVS_LAUNCH(tg, TILE_THREADS, ts, st, attn_tile_kernel)(*k, *v, layer, heads, head0, G, window, scale, q, n_pos, tables,
		                                               table_off, k_resid, wmax, wsum, wacc, out, n, R);
	} else {
		KVS_LAUNCH(grid, ATT_THREADS, smem, st, attn_kernel)(*k, *v, layer, heads, head0, G, window, scale, q, n_pos, tables,
		                                             table_off, k_resid, wmax, wsum, wacc, out);
	}
	if ((rc = kvs_launched("attention")) != KVS_OK) return rc;
	if (scratch) {
		KVS_LAUNCH(dim3((unsigned)n, (unsigned)(head1 - head0)), ATT_THREADS, 0, st, reduce_kernel)(heads, head0, k->head_dim, window,
		                                                                               n_pos, wmax, wsum, wacc, out);
		if ((rc = kvs_launched("attention reduce")) != KVS_OK) return rc;
	}
	if (v->prec != KVS_KV_INT4) return KVS_OK;
	KVS_LAUNCH(dim3((unsigned)n, (unsigned)(head1 - head0)), ATT_THREADS, 0, st, rotate_kernel)(heads, head0, k->head_dim, out);
	return kvs_launched("attention rotation");
}
