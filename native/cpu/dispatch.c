/* dispatch.c: CPU feature detection, the path in force, and the public
 * entry points, which check their arguments and call that path's kernels. */
#include <stdatomic.h>

#include "common.h"
#include "packed_layout.h"
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

int kvs_abi_version(void) { return KVS_ABI_VERSION; }

uint32_t kvs_cpu_features(void) {
	uint32_t f = 0;
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
	int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
	if (!osxsave || !avx) return 0;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	int ymm = (lo & 6) == 6, zmm = (lo & 0xe6) == 0xe6;
	if (!ymm) return 0;
	if (fma) f |= KVS_CPU_FMA;
	if (f16c) f |= KVS_CPU_F16C;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		if ((b >> 5) & 1) f |= KVS_CPU_AVX2;
		if (zmm) {
			if ((b >> 16) & 1) f |= KVS_CPU_AVX512F;
			if ((b >> 30) & 1) f |= KVS_CPU_AVX512BW;
			if ((b >> 31) & 1) f |= KVS_CPU_AVX512VL;
			if ((c >> 11) & 1) f |= KVS_CPU_AVX512VNNI;
		}
	}
#elif defined(__aarch64__)
	f |= KVS_CPU_NEON;
#endif
	return f;
}

static const struct kvs_ops *table(int path) {
	switch (path) {
	case KVS_PATH_SCALAR: return &kvs_ops_scalar;
#if defined(__x86_64__)
	case KVS_PATH_AVX2: return &kvs_ops_avx2;
	case KVS_PATH_AVX512: return &kvs_ops_avx512;
	case KVS_PATH_AVX512VNNI: return &kvs_ops_avx512vnni;
#endif
#if defined(__aarch64__)
	case KVS_PATH_NEON: return &kvs_ops_neon;
#endif
	}
	return NULL;
}

int kvs_path_supported(int path) {
	uint32_t f = kvs_cpu_features();
	const uint32_t avx2 = KVS_CPU_AVX2 | KVS_CPU_FMA | KVS_CPU_F16C;
	const uint32_t avx512 = avx2 | KVS_CPU_AVX512F | KVS_CPU_AVX512BW | KVS_CPU_AVX512VL;
	if (!table(path)) return 0;
	switch (path) {
	case KVS_PATH_SCALAR: return 1;
	case KVS_PATH_AVX2: return (f & avx2) == avx2;
	case KVS_PATH_AVX512: return (f & avx512) == avx512;
	case KVS_PATH_AVX512VNNI: return (f & (avx512 | KVS_CPU_AVX512VNNI)) == (avx512 | KVS_CPU_AVX512VNNI);
	case KVS_PATH_NEON: return (f & KVS_CPU_NEON) != 0;
	}
	return 0;
}

static int best_path(void) {
	static const int order[] = {KVS_PATH_AVX512VNNI, KVS_PATH_AVX512, KVS_PATH_AVX2, KVS_PATH_NEON};
	for (int i = 0; i < 4; i++)
		if (kvs_path_supported(order[i])) return order[i];
	return KVS_PATH_SCALAR;
}

/* current is the path in force, -2 until first use. */
static _Atomic int current = -2;

int kvs_path(void) {
	int p = atomic_load(&current);
	if (p < 0) {
		p = best_path();
		atomic_store(&current, p);
	}
	return p;
}

int kvs_set_path(int path) {
	if (path == KVS_PATH_BEST) path = best_path();
	if (!kvs_path_supported(path)) return KVS_ERR_PATH;
	atomic_store(&current, path);
	return KVS_OK;
}

const char *kvs_path_name(int path) {
	static const char *names[] = {"scalar", "avx2", "avx512", "avx512vnni", "neon"};
	return path >= 0 && path < KVS_NUM_PATHS ? names[path] : "unknown";
}

static const struct kvs_ops *ops(void) { return table(kvs_path()); }

int64_t kvs_row_bytes(uint32_t type, int64_t cols) {
	int64_t bs, ts;
	switch (type) {
	case 0: bs = 1, ts = 4; break;
	case 1: case 30: bs = 1, ts = 2; break;
	case 2: bs = 32, ts = 18; break;
	case 3: bs = 32, ts = 20; break;
	case 6: bs = 32, ts = 22; break;
	case 7: bs = 32, ts = 24; break;
	case 8: bs = 32, ts = 34; break;
	case 20: bs = 32, ts = 18; break;
	case 10: bs = 256, ts = 84; break;
	case 11: bs = 256, ts = 110; break;
	case 12: bs = 256, ts = 144; break;
	case 13: bs = 256, ts = 176; break;
	case 14: bs = 256, ts = 210; break;
	default: return 0;
	}
	if (cols <= 0 || cols % bs != 0 || cols > ((int64_t)1 << 40)) return 0;
	return cols / bs * ts;
}

int64_t kvs_act_bytes(uint32_t type, int64_t cols, int64_t n) {
	if (kvs_row_bytes(type, 256) == 0) return KVS_ERR_TYPE;
	if (kvs_row_bytes(type, cols) == 0) return KVS_ERR_ARG;
	if (n < 0 || n > ((int64_t)1 << 24)) return KVS_ERR_ARG;
	switch (type) {
	case 0: case 1: case 30: return 0;
	case 10: case 11: case 12: case 13: case 14: return n * (cols / 256) * (int64_t)sizeof(struct act256);
	}
	return n * (cols / 32) * (int64_t)sizeof(struct act32);
}

/* SERIAL_WORK is the multiply-adds (rows*cols*n) below which a matrix
 * product runs on its caller alone, and QUANT_SPLIT the activations
 * (n*cols) from which their rounding is split: below them, waking the
 * threads costs more than it saves. SWIGLU_SPLIT likewise, in values (a
 * decode step's 5,632 take about 5 µs a core) and ADD_SPLIT (a decode
 * step's 2,048 additions are far below it; a prefill's are not). */
enum { SERIAL_WORK = 1 << 17, QUANT_SPLIT = 1 << 16, SWIGLU_SPLIT = 4096, ADD_SPLIT = 1 << 16 };

struct quant_job {
	const struct kvs_ops *o;
	uint32_t type;
	const float *x;
	int64_t cols;
	uint8_t *qx;
	int64_t per; /* bytes of one vector's blocks */
};

static int quant_part(void *c, int w, int64_t a, int64_t b) {
	struct quant_job *j = c;
	(void)w;
	return j->o->quantize_acts(j->type, j->x + a * j->cols, j->cols, b - a, j->qx + a * j->per);
}

int kvs_quantize_acts(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx) {
	int64_t nb = kvs_act_bytes(type, cols, n);
	if (nb < 0) return (int)nb;
	if (nb > 0 && (!x || !qx)) return KVS_ERR_ARG;
	struct quant_job j = {ops(), type, x, cols, qx, n > 0 ? nb / n : 0};
	return kvs_par(n, 1, n * cols >= QUANT_SPLIT, quant_part, &j);
}

/* mm_job is a matrix product split by output rows (rows relative to
 * row0; 16 at a time, so that no two threads write one cache line of out). */
struct mm_job {
	const struct kvs_ops *o;
	uint32_t type;
	const void *w;
	int64_t rows, cols, row0;
	const float *x;
	const void *qx;
	int64_t n;
	float *out;
	int packed;
};

void kvs_pack_group(uint32_t type, int64_t rows, int64_t cols, int64_t g, const uint8_t *w, uint8_t *packed);

/* repacked reports whether kvs_matmul computes type on its packed form (so
 * that both give the same bits): types whose only kernels are packed. */
static int repacked(uint32_t type) { return type == 6 || (type >= 12 && type <= 14); }

/* mm_repacked computes rows [r0, r1) of kvs_matmul for a repacked type:
 * each 16-row group that holds some of them is packed into scratch and
 * multiplied as a matrix of its own rows, and the named outputs copied out
 * (so a range need not start or end on a group). */
static int mm_repacked(const struct mm_job *j, int64_t r0, int64_t r1) {
	enum { PR = KVS_PACK_ROWS };
	int64_t gb = kvs_packed_bytes(j->type, PR, j->cols), rb = kvs_row_bytes(j->type, j->cols);
	uint8_t *buf = aligned_alloc(64, (size_t)(gb + 63) / 64 * 64);
	float *tmp = malloc((size_t)j->n * PR * sizeof(float));
	int rc = buf && tmp ? KVS_OK : KVS_ERR_ARG;
	for (int64_t g = r0 / PR; g * PR < r1 && rc == KVS_OK; g++) {
		int64_t base = g * PR, nr = j->rows - base < PR ? j->rows - base : PR;
		kvs_pack_group(j->type, nr, j->cols, 0, (const uint8_t *)j->w + base * rb, buf);
		rc = j->o->matmul_packed(j->type, buf, nr, j->cols, 0, nr, j->qx, j->n, tmp);
		int64_t a = base > r0 ? base : r0, b = base + nr < r1 ? base + nr : r1;
		for (int64_t v = 0; v < j->n; v++)
			for (int64_t r = a; r < b; r++) j->out[v * j->rows + r] = tmp[v * nr + r - base];
	}
	free(buf);
	free(tmp);
	return rc;
}

static int mm_part(void *c, int w, int64_t a, int64_t b) {
	struct mm_job *j = c;
	(void)w;
	if (j->packed)
		return j->o->matmul_packed(j->type, j->w, j->rows, j->cols, j->row0 + a, j->row0 + b, j->qx, j->n, j->out);
	if (repacked(j->type)) return mm_repacked(j, j->row0 + a, j->row0 + b);
	return j->o->matmul(j->type, j->w, j->rows, j->cols, j->row0 + a, j->row0 + b, j->x, j->qx, j->n, j->out);
}

int kvs_matmul(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1, const float *x,
               const void *qx, int64_t n, float *out) {
	int64_t nb = kvs_act_bytes(type, cols, n);
	if (nb < 0) return (int)nb;
	if (rows < 0 || row0 < 0 || row1 < row0 || row1 > rows || !w || !out || (nb == 0 ? !x : !qx))
		return KVS_ERR_ARG;
	if (row0 == row1 || n == 0) return KVS_OK;
	struct mm_job j = {ops(), type, w, rows, cols, row0, x, qx, n, out, 0};
	return kvs_par(row1 - row0, KVS_PACK_ROWS, (row1 - row0) * cols * n >= SERIAL_WORK, mm_part, &j);
}

/* punit is the rows a thread's range of a packed matrix holds a multiple
 * of: whole super-groups (packed_layout.h), so that each range is one run
 * of memory. */
static int64_t punit(uint32_t type, int64_t cols) {
	return KVS_PACK_ROWS * pk_super(type, pk_row_blocks(type, cols));
}

int kvs_matmul_packed(uint32_t type, const void *wp, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                      const void *qx, int64_t n, float *out) {
	int64_t size = kvs_packed_bytes(type, rows, cols);
	if (size < 0) return (int)size;
	if (row0 < 0 || row1 < row0 || row1 > rows || row0 % KVS_PACK_ROWS || (row1 % KVS_PACK_ROWS && row1 != rows) ||
	    n < 0 || n > ((int64_t)1 << 24) || !wp || !qx || !out)
		return KVS_ERR_ARG;
	if (row0 == row1 || n == 0) return KVS_OK;
	struct mm_job j = {ops(), type, wp, rows, cols, row0, NULL, qx, n, out, 1};
	return kvs_par(row1 - row0, punit(type, cols), (row1 - row0) * cols * n >= SERIAL_WORK, mm_part, &j);
}

/* mmn_job is kvs_matmul_packed_n's: the matrices' groups as one run of
 * rows, matrix i's from row 16*g0[i], split among the threads. */
struct mmn_job {
	const struct kvs_ops *o;
	int32_t count;
	const uint32_t *types;
	const void *const *packed;
	const int64_t *rows;
	int64_t cols;
	const void *qx;
	int64_t n;
	float *const *outs;
	int64_t g0[KVS_MULTI_MAX + 1];
};

static int mmn_part(void *c, int w, int64_t a, int64_t b) {
	struct mmn_job *j = c;
	(void)w;
	for (int i = 0; i < j->count; i++) {
		int64_t lo = KVS_PACK_ROWS * j->g0[i], r0 = (a > lo ? a : lo) - lo, r1 = b - lo;
		if (r1 > j->rows[i]) r1 = j->rows[i];
		if (r0 >= r1) continue;
		int rc = j->o->matmul_packed(j->types[i], j->packed[i], j->rows[i], j->cols, r0, r1, j->qx, j->n, j->outs[i]);
		if (rc) return rc;
	}
	return KVS_OK;
}

int kvs_matmul_packed_n(int32_t count, const uint32_t *types, const void *const *packed, const int64_t *rows,
                        int64_t cols, const void *qx, int64_t n, float *const *outs) {
	if (count < 1 || count > KVS_MULTI_MAX || !types || !packed || !rows || !outs || !qx || n < 0 ||
	    n > ((int64_t)1 << 24))
		return KVS_ERR_ARG;
	struct mmn_job j = {ops(), count, types, packed, rows, cols, qx, n, outs, {0}};
	for (int i = 0; i < count; i++) {
		int64_t size = kvs_packed_bytes(types[i], rows[i], cols);
		if (size < 0) return (int)size;
		if ((types[i] >= 12) != (types[0] >= 12) || !packed[i] || !outs[i]) return KVS_ERR_ARG;
		j.g0[i + 1] = j.g0[i] + (rows[i] + KVS_PACK_ROWS - 1) / KVS_PACK_ROWS;
	}
	int64_t total = KVS_PACK_ROWS * j.g0[count], unit = KVS_PACK_ROWS;
	for (int i = 0; i < count; i++) {
		int64_t u = punit(types[i], cols);
		if (u > unit) unit = u;
	}
	if (n == 0) return KVS_OK;
	return kvs_par(total, unit, total * cols * n >= SERIAL_WORK, mmn_part, &j);
}

int kvs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps) {
	if (n < 0 || dim <= 0 || !out || !x || !weight) return KVS_ERR_ARG;
	return ops()->rmsnorm(out, x, weight, n, dim, eps);
}

int kvs_rope(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos, float base,
             float scale, const float *freq_factors, int neox) {
	if (n < 0 || heads <= 0 || head_dim <= 0 || rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 || !x || !pos ||
	    !(base > 0) || !(scale > 0))
		return KVS_ERR_ARG;
	return ops()->rope(x, n, heads, head_dim, rope_dim, pos, base, scale, freq_factors, neox);
}

struct swiglu_job {
	const struct kvs_ops *o;
	float *out;
	const float *gate, *up;
};

static int swiglu_part(void *c, int w, int64_t a, int64_t b) {
	struct swiglu_job *j = c;
	(void)w;
	return j->o->swiglu(j->out + a, j->gate + a, j->up + a, b - a);
}

int kvs_swiglu(float *out, const float *gate, const float *up, int64_t len) {
	if (len < 0 || !out || !gate || !up) return KVS_ERR_ARG;
	struct swiglu_job j = {ops(), out, gate, up};
	return kvs_par(len, 1024, len >= SWIGLU_SPLIT, swiglu_part, &j);
}

struct add_job {
	const struct kvs_ops *o;
	float *x;
	const float *y;
};

static int add_part(void *c, int w, int64_t a, int64_t b) {
	struct add_job *j = c;
	(void)w;
	return j->o->add(j->x + a, j->y + a, b - a);
}

int kvs_add(float *x, const float *y, int64_t len) {
	if (len < 0 || !x || !y) return KVS_ERR_ARG;
	struct add_job j = {ops(), x, y};
	return kvs_par(len, 1024, len >= ADD_SPLIT, add_part, &j);
}

struct sum_job {
	const struct kvs_ops *o;
	const uint64_t *p;
	_Atomic uint64_t sum;
};

static int sum_part(void *c, int w, int64_t a, int64_t b) {
	struct sum_job *j = c;
	(void)w;
	atomic_fetch_add(&j->sum, j->o->sum64(j->p + a, b - a));
	return KVS_OK;
}

int kvs_sum64(const void *p, int64_t words, uint64_t *sum) {
	if (words < 0 || !sum || (words > 0 && !p)) return KVS_ERR_ARG;
	struct sum_job j = {ops(), p, 0};
	int rc = kvs_par(words, 4096, words >= (1 << 16), sum_part, &j);
	*sum = atomic_load(&j.sum);
	return rc;
}

/* plane_ok checks a plane's description (not its memory, which the caller
 * vouches for). */
int kvs_plane_ok(const struct kvs_kv_plane *p) {
	if (!p || p->prec < KVS_KV_F32 || p->prec > KVS_KV_FP8 || p->layers < 1 || p->blocks < 1 || p->block_size < 1 ||
	    p->block_size > 256 || p->kv_heads < 1 || p->head_dim < 1 || p->head_dim > KVS_MAX_HEAD_DIM || !p->data)
		return 0;
	if (p->prec <= KVS_KV_BF16) return p->data_per_block == (int64_t)p->kv_heads * p->block_size * p->head_dim;
	if (p->key && p->prec != KVS_KV_INT8 && p->prec != KVS_KV_INT4 && p->prec != KVS_KV_FP8) return 0;
	return p->group >= 1 && p->groups >= 1 && p->row_bytes >= 1 && p->scale &&
	       p->data_per_block == (int64_t)p->kv_heads * p->block_size * p->row_bytes;
}

/* attn_job is an attention call split by (row, KV head) pairs: a decode
 * step's one row has its KV heads' query groups computed by different
 * threads, and a prefill's rows spread the same way. Each thread scores
 * into its own part of scratch. */
struct attn_job {
	const struct kvs_ops *o;
	const struct kvs_kv_plane *k, *v;
	int32_t layer, heads, group, g0, ng, window;
	float scale;
	const float *q;
	const int32_t *n_pos, *tables;
	const int64_t *table_off;
	const uint8_t *const *k_resid;
	float *scratch;
	int64_t per; /* scratch floats a thread */
	float *out;
};

static int attn_part(void *c, int w, int64_t a, int64_t b) {
	struct attn_job *j = c;
	int bad = 0;
	int64_t qd = (int64_t)j->heads * j->k->head_dim;
	for (int64_t u = a; u < b;) {
		int64_t r = u / j->ng, h0 = u % j->ng, h1 = h0 + (b - u);
		if (h1 > j->ng) h1 = j->ng;
		int rc = j->o->attention(j->k, j->v, j->layer, 1, j->heads, (int32_t)(j->g0 + h0) * j->group,
		                         (int32_t)(j->g0 + h1) * j->group, j->window, j->scale, j->q + r * qd, j->n_pos + r,
		                         j->tables, j->table_off + r, j->k_resid, j->scratch + w * j->per, j->out + r * qd);
		if (rc) bad = rc;
		u += h1 - h0;
	}
	return bad;
}

int kvs_attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                  int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                  const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out) {
	if (!kvs_plane_ok(k) || !kvs_plane_ok(v) || k->layers != v->layers || k->blocks != v->blocks ||
	    k->block_size != v->block_size || k->kv_heads != v->kv_heads || k->head_dim != v->head_dim || v->key)
		return KVS_ERR_ARG;
	if (layer < 0 || layer >= k->layers || n < 0 || heads < 1 || heads % k->kv_heads ||
	    heads / k->kv_heads > KVS_MAX_GROUP || head0 < 0 || head1 > heads || head0 > head1 ||
	    head0 % (heads / k->kv_heads) || head1 % (heads / k->kv_heads) || window < 0 || !q || !n_pos || !tables ||
	    !table_off || !scratch || !out || (k->key && !k_resid))
		return KVS_ERR_ARG;
	for (int64_t r = 0; r < n; r++) {
		if (n_pos[r] < 1 || table_off[r] < 0) return KVS_ERR_ARG;
		int64_t p0 = window > 0 && n_pos[r] > window ? n_pos[r] - window : 0;
		for (int64_t j = p0 / k->block_size; j * k->block_size < n_pos[r]; j++)
			if (tables[table_off[r] + j] < 0 || tables[table_off[r] + j] >= k->blocks) return KVS_ERR_ARG;
	}
	int64_t maxp = 1;
	for (int64_t r = 0; r < n; r++) maxp = n_pos[r] > maxp ? n_pos[r] : maxp;
	if (window > 0 && maxp > window) maxp = window;
	int32_t group = heads / k->kv_heads, g0 = head0 / group, g1 = head1 / group;
	struct attn_job j = {ops(), k, v, layer, heads, group, g0, g1 - g0, window, scale, q, n_pos, tables, table_off,
	                     k_resid, scratch, group * maxp, out};
	int64_t units = n * (g1 - g0);
	/* One query head a KV head (keys without key groups): attention.c
	 * runs a thread's KV heads block by block, so each thread takes its
	 * share of a row's heads in one range (the longest runs of each
	 * block). */
	int64_t unit = group == 1 && !k->key ? (g1 - g0 + kvs_threads() - 1) / kvs_threads() : 1;
	return kvs_par(units, unit, units > 1, attn_part, &j);
}
