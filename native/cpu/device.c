/* device.c: the device ABI (kvscope.h's "devices" sections) on host memory.
 * The CPU library is a device library of kind KVS_DEVICE_HOST: kvs_malloc is
 * aligned malloc, the copies are memcpy, every call completes before it
 * returns. It lets the Go device backend (engine/backend/native/device*.go)
 * run, and be tested, on machines without a GPU, on the same code path as
 * the CUDA library. Not a hot path: one build, no SIMD variants. */
#include <stdio.h>
#include <stdlib.h>

#include "kv.h"

int kvs_device_kind(void) { return KVS_DEVICE_HOST; }

/* last_error is the thread's last failure message. */
static _Thread_local char last_error[256];

static void set_error(const char *msg) { snprintf(last_error, sizeof last_error, "%s", msg); }

static int put_string(char *buf, int64_t len, const char *s) {
	if (!buf || len <= 0) return KVS_ERR_ARG;
	snprintf(buf, (size_t)len, "%s", s);
	return KVS_OK;
}

int kvs_device_name(char *buf, int64_t len) { return put_string(buf, len, "host memory (CPU library)"); }

int kvs_last_error(char *buf, int64_t len) { return put_string(buf, len, last_error); }

int kvs_malloc(int64_t bytes, void **ptr) {
	if (!ptr || bytes <= 0) return KVS_ERR_ARG;
	size_t n = ((size_t)bytes + 255) / 256 * 256;
	void *p = aligned_alloc(256, n);
	if (!p) {
		set_error("kvs_malloc: out of host memory");
		return KVS_ERR_DEVICE;
	}
	*ptr = p;
	return KVS_OK;
}

int kvs_free(void *ptr) {
	free(ptr);
	return KVS_OK;
}

static int copy(void *dst, const void *src, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && (!dst || !src))) return KVS_ERR_ARG;
	if (bytes > 0) memmove(dst, src, (size_t)bytes);
	return KVS_OK;
}

int kvs_memcpy_h2d(void *dst, const void *src, int64_t bytes) { return copy(dst, src, bytes); }
int kvs_memcpy_d2h(void *dst, const void *src, int64_t bytes) { return copy(dst, src, bytes); }
int kvs_memcpy_d2d(void *dst, const void *src, int64_t bytes) { return copy(dst, src, bytes); }

int kvs_memset(void *dst, int value, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && !dst)) return KVS_ERR_ARG;
	if (bytes > 0) memset(dst, value, (size_t)bytes);
	return KVS_OK;
}

int kvs_synchronize(void) { return KVS_OK; }

/* ------------------------------------------------------ element-wise ops */

int kvs_add_bias(float *x, const float *bias, int64_t n, int64_t rows) {
	if (n < 0 || rows < 0 || (n > 0 && rows > 0 && (!x || !bias))) return KVS_ERR_ARG;
	for (int64_t b = 0; b < n; b++)
		for (int64_t r = 0; r < rows; r++) x[b * rows + r] += bias[r];
	return KVS_OK;
}

int kvs_scale(float *x, int64_t len, float s) {
	if (len < 0 || (len > 0 && !x)) return KVS_ERR_ARG;
	for (int64_t i = 0; i < len; i++) x[i] *= s;
	return KVS_OK;
}

int kvs_geglu(float *out, const float *gate, const float *up, int64_t len) {
	if (len < 0 || (len > 0 && (!out || !gate || !up))) return KVS_ERR_ARG;
	const double c = 0.7978845608028654; /* sqrt(2/pi) */
	for (int64_t i = 0; i < len; i++) {
		double g = gate[i];
		out[i] = (float)(0.5 * g * (1 + tanh(c * (g + 0.044715 * g * g * g)))) * up[i];
	}
	return KVS_OK;
}

int kvs_gather(float *dst, const float *src, const int32_t *rows, int64_t n, int64_t width) {
	if (n < 0 || width < 0 || (n > 0 && (!dst || !src || !rows))) return KVS_ERR_ARG;
	for (int64_t j = 0; j < n; j++) {
		if (rows[j] < 0) return KVS_ERR_ARG;
		memmove(dst + j * width, src + (int64_t)rows[j] * width, (size_t)width * 4);
	}
	return KVS_OK;
}

int kvs_get_rows(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t n,
                 float *out) {
	if (n < 0 || rows < 0 || (n > 0 && (!ids || !out))) return KVS_ERR_ARG;
	for (int64_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= rows) {
			memset(out + i * cols, 0, (size_t)cols * 4);
			continue;
		}
		int rc = kvs_dequant_rows(type, w, cols, ids[i], (int64_t)ids[i] + 1, out + i * cols);
		if (rc != KVS_OK) return rc;
	}
	return KVS_OK;
}

/* -------------------------------------------------------------- paged K/V */

int kvs_kv_supported(int32_t prec, int32_t key) {
	(void)key;
	return prec < KVS_KV_F32 || prec > KVS_KV_FP8 ? KVS_ERR_TYPE : KVS_OK;
}

int kvs_kv_read(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, float *rows,
                const uint8_t *const *resid) {
	if (!kvs_plane_ok(p) || layer < 0 || layer >= p->layers || n < 0 || (n > 0 && (!slots || !rows)) ||
	    (p->key && n > 0 && !resid))
		return KVS_ERR_ARG;
	int64_t total = (int64_t)p->blocks * p->block_size, D = p->head_dim;
	for (int64_t i = 0; i < n; i++)
		if (slots[i] < 0 || slots[i] >= total) return KVS_ERR_ARG;
	float fp8[256];
	for (int c = 0; c < 256; c++) fp8[c] = kvs_fp8((uint8_t)c);
	for (int64_t i = 0; i < n; i++) {
		int64_t lb = (int64_t)layer * p->blocks + slots[i] / p->block_size;
		for (int h = 0; h < p->kv_heads; h++)
			kvs_decode_row(p, lb, h, slots[i] % p->block_size, p->key ? resid[i] : NULL, fp8, rows + (i * p->kv_heads + h) * D);
	}
	return KVS_OK;
}

/* elem_bytes returns the bytes of one element of p's data. */
static int64_t elem_bytes(const struct kvs_kv_plane *p) {
	switch (p->prec) {
	case KVS_KV_F32: return 4;
	case KVS_KV_F16:
	case KVS_KV_BF16: return 2;
	}
	return 1;
}

int kvs_kv_copy_block(const struct kvs_kv_plane *p, int32_t dst, int32_t src) {
	if (!kvs_plane_ok(p) || dst < 0 || dst >= p->blocks || src < 0 || src >= p->blocks) return KVS_ERR_ARG;
	if (dst == src) return KVS_OK;
	int64_t db = p->data_per_block * elem_bytes(p), sb = p->scales_per_block;
	for (int64_t l = 0; l < p->layers; l++) {
		int64_t d = l * p->blocks + dst, s = l * p->blocks + src;
		memcpy((uint8_t *)p->data + d * db, (const uint8_t *)p->data + s * db, (size_t)db);
		/* f16 scales for q8_0, 8-bit scales and zero points otherwise */
		int64_t se = p->prec == KVS_KV_Q8_0 ? 2 : 1;
		if (p->scale && sb > 0)
			memcpy((uint8_t *)p->scale + d * sb * se, (const uint8_t *)p->scale + s * sb * se, (size_t)(sb * se));
		if (p->zero && sb > 0)
			memcpy((uint8_t *)p->zero + d * sb, (const uint8_t *)p->zero + s * sb, (size_t)sb);
	}
	return KVS_OK;
}

int64_t kvs_attention_scratch(int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t max_pos) {
	if (n < 0 || heads < 1 || kv_heads < 1 || heads % kv_heads || heads / kv_heads > KVS_MAX_GROUP || head_dim < 1 ||
	    head_dim > KVS_MAX_HEAD_DIM || max_pos < 1)
		return KVS_ERR_ARG;
	return (int64_t)kvs_threads() * (heads / kv_heads) * max_pos * 4;
}
