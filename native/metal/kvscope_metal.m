/* kvscope_metal.m: the kvscope ABI (../include/kvscope.h) on an Apple GPU,
 * mirroring native/cuda in small. Memory is MTLBuffers in shared storage
 * (unified memory): kvs_malloc returns the buffer's contents pointer, and
 * every pointer a compute call gets is looked up in the table of
 * allocations to find its buffer and offset. Compute calls encode into one
 * open command buffer, in order (a serial compute encoder); copies, memset
 * and kvs_synchronize commit it and wait, then touch the memory directly.
 * Weight types without a kernel here (all but F32, F16, Q4_0, Q8_0) make
 * kvs_row_bytes return 0, and the Go side uploads them as F16. K/V: f16
 * and q8_0. Attention: one pass with an online softmax, no context split
 * (kvs_attention_scratch is 0).
 *
 * Built on macOS only (make metal); it has not been compiled or run: the
 * development machine is Linux. */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../include/kvscope.h"
#include "shared.h"
#include "metal_source.h" /* kvs_metal_source: shared.h + kernels.metal (the Makefile makes it) */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static id<MTLDevice> dev;
static id<MTLCommandQueue> queue;
static id<MTLCommandBuffer> cmd;          /* the open command buffer, or nil */
static id<MTLComputeCommandEncoder> enc;  /* its encoder */
static NSMutableDictionary<NSString *, id<MTLComputePipelineState>> *pipes;
static NSMutableArray<id<MTLBuffer>> *bufs; /* every live allocation */
static char init_error[256], last_error[512];
static int pending = KVS_OK;

static int fail(const char *msg) {
	if (pending == KVS_OK) {
		pending = KVS_ERR_DEVICE;
		snprintf(last_error, sizeof last_error, "%s", msg);
	}
	return KVS_ERR_DEVICE;
}

/* setup creates the device, queue and pipelines once; 0 when usable. */
static int setup(void) {
	static int done = 0, ok = 0;
	if (done) return ok ? 0 : -1;
	done = 1;
	@autoreleasepool {
		dev = MTLCreateSystemDefaultDevice();
		if (!dev) {
			snprintf(init_error, sizeof init_error, "no Metal device");
			return -1;
		}
		queue = [dev newCommandQueue];
		NSError *err = nil;
		NSString *src = [[NSString alloc] initWithBytes:kvs_metal_source length:sizeof kvs_metal_source - 1
		                                       encoding:NSUTF8StringEncoding];
		id<MTLLibrary> lib = [dev newLibraryWithSource:src options:nil error:&err];
		if (!lib) {
			snprintf(init_error, sizeof init_error, "the Metal kernels do not compile: %s",
			         err ? err.localizedDescription.UTF8String : "?");
			return -1;
		}
		pipes = [NSMutableDictionary dictionary];
		for (NSString *name in @[ @"quantize_acts", @"matvec", @"get_rows", @"rmsnorm", @"rope", @"elementwise",
		                          @"gather", @"kv_write", @"kv_read", @"attention" ]) {
			id<MTLFunction> f = [lib newFunctionWithName:name];
			id<MTLComputePipelineState> p = f ? [dev newComputePipelineStateWithFunction:f error:&err] : nil;
			if (!p) {
				snprintf(init_error, sizeof init_error, "no Metal pipeline for %s", name.UTF8String);
				return -1;
			}
			pipes[name] = p;
		}
		bufs = [NSMutableArray array];
	}
	ok = 1;
	return 0;
}

/* lookup finds the buffer holding p and p's offset in it. */
static id<MTLBuffer> lookup(const void *p, NSUInteger *off) {
	if (!p) return nil;
	for (id<MTLBuffer> b in bufs) {
		const uint8_t *base = (const uint8_t *)b.contents;
		if ((const uint8_t *)p >= base && (const uint8_t *)p < base + b.length) {
			*off = (NSUInteger)((const uint8_t *)p - base);
			return b;
		}
	}
	return nil;
}

/* encoder returns the open encoder set to pipeline name. */
static id<MTLComputeCommandEncoder> encoder(NSString *name) {
	if (!cmd) {
		cmd = [queue commandBuffer];
		enc = [cmd computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
	}
	[enc setComputePipelineState:pipes[name]];
	return enc;
}

/* bind sets argument i to the buffer holding p; false when p is not device
 * memory (a NULL p binds a placeholder). */
static bool bind(id<MTLComputeCommandEncoder> e, const void *p, int i) {
	NSUInteger off = 0;
	id<MTLBuffer> b = p ? lookup(p, &off) : bufs.firstObject;
	if (!b) return false;
	[e setBuffer:b offset:off atIndex:(NSUInteger)i];
	return true;
}

/* flush commits the open command buffer and waits for it. */
static int flush(void) {
	if (!cmd) return KVS_OK;
	[enc endEncoding];
	[cmd commit];
	[cmd waitUntilCompleted];
	if (cmd.error) fail(cmd.error.localizedDescription.UTF8String);
	cmd = nil, enc = nil;
	return KVS_OK;
}

/* LOCKED(^{ ... return rc; }) runs the block under the library's lock,
 * after setup, and returns its status. */
#define LOCKED(...)                                                                                                   \
	do {                                                                                                              \
		if (setup() != 0) return KVS_ERR_DEVICE;                                                                      \
		pthread_mutex_lock(&mu);                                                                                      \
		int rc_;                                                                                                      \
		@autoreleasepool {                                                                                            \
			rc_ = (^int(void)__VA_ARGS__)();                                                                          \
		}                                                                                                             \
		pthread_mutex_unlock(&mu);                                                                                    \
		return rc_;                                                                                                   \
	} while (0)

static void grid1(id<MTLComputeCommandEncoder> e, int64_t n, NSUInteger tg) {
	[e dispatchThreads:MTLSizeMake((NSUInteger)n, 1, 1) threadsPerThreadgroup:MTLSizeMake(tg, 1, 1)];
}

/* --------------------------------------------------------------- device */

KVS_API int kvs_abi_version(void) { return KVS_ABI_VERSION; }
/* The read probe is the host library's; a device's bandwidth is measured
 * by native/cuda/check.sh's copies instead. */
KVS_API int kvs_sum64(const void *p, int64_t words, uint64_t *sum) {
	(void)p, (void)words, (void)sum;
	return KVS_ERR_TYPE;
}
/* The device computes; the host threads have nothing to split. */
KVS_API int kvs_set_threads(int32_t n) { return n >= 1 && n <= KVS_MAX_THREADS ? KVS_OK : KVS_ERR_ARG; }
KVS_API int kvs_device_kind(void) { return KVS_DEVICE_METAL; }

KVS_API int kvs_device_name(char *buf, int64_t len) {
	if (!buf || len <= 0) return KVS_ERR_ARG;
	if (setup() != 0) {
		snprintf(buf, (size_t)len, "%s", init_error);
		return KVS_ERR_DEVICE;
	}
	snprintf(buf, (size_t)len, "%s, %.0f GiB working set", dev.name.UTF8String,
	         (double)dev.recommendedMaxWorkingSetSize / (1 << 30));
	return KVS_OK;
}

KVS_API int kvs_last_error(char *buf, int64_t len) {
	if (!buf || len <= 0) return KVS_ERR_ARG;
	pthread_mutex_lock(&mu);
	snprintf(buf, (size_t)len, "%s", pending != KVS_OK || last_error[0] ? last_error : init_error);
	pthread_mutex_unlock(&mu);
	return KVS_OK;
}

KVS_API int kvs_malloc(int64_t bytes, void **ptr) {
	if (!ptr || bytes <= 0) return KVS_ERR_ARG;
	LOCKED({
		id<MTLBuffer> b = [dev newBufferWithLength:(NSUInteger)bytes options:MTLResourceStorageModeShared];
		int rc = KVS_ERR_DEVICE;
		if (b) {
			[bufs addObject:b];
			*ptr = b.contents;
			rc = KVS_OK;
		} else {
			snprintf(last_error, sizeof last_error, "cannot allocate %lld bytes of Metal memory", (long long)bytes);
		}
		return rc;
	});
}

KVS_API int kvs_free(void *ptr) {
	if (!ptr) return KVS_OK;
	LOCKED({
		flush();
		NSUInteger off = 0;
		id<MTLBuffer> b = lookup(ptr, &off);
		if (b && off == 0) [bufs removeObject:b];
		return KVS_OK;
	});
}

/* Unified memory: once the GPU's work is done, copies are memcpy. */
static int host_copy(void *dst, const void *src, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && (!dst || !src))) return KVS_ERR_ARG;
	LOCKED({
		flush();
		if (bytes > 0) memmove(dst, src, (size_t)bytes);
		return KVS_OK;
	});
}

KVS_API int kvs_memcpy_h2d(void *dst, const void *src, int64_t bytes) { return host_copy(dst, src, bytes); }
KVS_API int kvs_memcpy_d2d(void *dst, const void *src, int64_t bytes) { return host_copy(dst, src, bytes); }

KVS_API int kvs_memcpy_d2h(void *dst, const void *src, int64_t bytes) {
	int rc = host_copy(dst, src, bytes);
	if (rc != KVS_OK) return rc;
	return kvs_synchronize();
}

KVS_API int kvs_memset(void *dst, int value, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && !dst)) return KVS_ERR_ARG;
	LOCKED({
		flush();
		if (bytes > 0) memset(dst, value, (size_t)bytes);
		return KVS_OK;
	});
}

KVS_API int kvs_synchronize(void) {
	LOCKED({
		flush();
		int rc = pending;
		pending = KVS_OK;
		return rc;
	});
}

/* The CPU-path functions every library exports: one path, "metal". */
KVS_API uint32_t kvs_cpu_features(void) { return 0; }
KVS_API int kvs_path_supported(int path) { return path == 0; }
KVS_API int kvs_set_path(int path) { return path == 0 || path == KVS_PATH_BEST ? KVS_OK : KVS_ERR_PATH; }
KVS_API int kvs_path(void) { return 0; }
KVS_API const char *kvs_path_name(int path) { return path == 0 ? "metal" : "unknown"; }
KVS_API int64_t kvs_packed_bytes(uint32_t type, int64_t rows, int64_t cols) {
	(void)type, (void)rows, (void)cols;
	return KVS_ERR_TYPE;
}
KVS_API int kvs_pack(uint32_t type, int64_t rows, int64_t cols, int64_t g0, int64_t g1, const void *w, void *packed) {
	(void)type, (void)rows, (void)cols, (void)g0, (void)g1, (void)w, (void)packed;
	return KVS_ERR_TYPE;
}
KVS_API int kvs_matmul_packed(uint32_t type, const void *packed, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                              const void *qx, int64_t n, float *out) {
	(void)type, (void)packed, (void)rows, (void)cols, (void)row0, (void)row1, (void)qx, (void)n, (void)out;
	return KVS_ERR_TYPE;
}
KVS_API int kvs_matmul_packed_n(int32_t count, const uint32_t *types, const void *const *packed, const int64_t *rows,
                                int64_t cols, const void *qx, int64_t n, float *const *outs) {
	(void)count, (void)types, (void)packed, (void)rows, (void)cols, (void)qx, (void)n, (void)outs;
	return KVS_ERR_TYPE;
}

/* --------------------------------------------------------------- matmul */

static int64_t block_elems(uint32_t t) { return t == MT_Q4_0 || t == MT_Q8_0 ? 32 : 1; }
static int64_t block_bytes(uint32_t t) { return t == MT_F32 ? 4 : t == MT_F16 ? 2 : t == MT_Q4_0 ? 18 : t == MT_Q8_0 ? 34 : 0; }
static bool quantized(uint32_t t) { return t == MT_Q4_0 || t == MT_Q8_0; }

KVS_API int64_t kvs_row_bytes(uint32_t type, int64_t cols) {
	int64_t bb = block_bytes(type), be = block_elems(type);
	if (bb == 0 || cols <= 0 || cols % be) return 0;
	return cols / be * bb;
}

KVS_API int64_t kvs_act_bytes(uint32_t type, int64_t cols, int64_t n) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	if (n < 0 || kvs_row_bytes(type, cols) == 0) return KVS_ERR_ARG;
	return quantized(type) ? n * (cols / 32) * 40 : 0;
}

KVS_API int kvs_quantize_acts(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx) {
	int64_t ab = kvs_act_bytes(type, cols, n);
	if (ab <= 0 || n == 0) return ab < 0 ? (int)ab : KVS_OK;
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"quantize_acts");
		int rc = KVS_ERR_ARG;
		if (bind(e, x, 0) && bind(e, qx, 1)) {
			[e dispatchThreadgroups:MTLSizeMake((NSUInteger)(n * (cols / 32)), 1, 1)
			    threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

KVS_API int kvs_matmul(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
                       const float *x, const void *qx, int64_t n, float *out) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	if (kvs_row_bytes(type, cols) == 0 || row0 < 0 || row1 < row0 || row1 > rows || n < 0) return KVS_ERR_ARG;
	if (row0 == row1 || n == 0) return KVS_OK;
	struct mat_args a = {type, 0, rows, row0, row1, cols, kvs_row_bytes(type, cols), n};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"matvec");
		int rc = KVS_ERR_ARG;
		if (bind(e, w, 0) && bind(e, x, 1) && bind(e, qx, 2) && bind(e, out, 3)) {
			[e setBytes:&a length:sizeof a atIndex:4];
			[e dispatchThreadgroups:MTLSizeMake((NSUInteger)((row1 - row0 + 3) / 4), (NSUInteger)((n + 7) / 8), 1)
			    threadsPerThreadgroup:MTLSizeMake(128, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

static int rows_of(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t row0, int64_t n,
                   float *out) {
	if (block_bytes(type) == 0) return KVS_ERR_TYPE;
	int64_t rb = kvs_row_bytes(type, cols);
	if (rb == 0 || n < 0) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	struct rows_args a = {type, ids != NULL, rows, cols, rb, row0, 0};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"get_rows");
		int rc = KVS_ERR_ARG;
		if (bind(e, w, 0) && bind(e, ids, 1) && bind(e, out, 2)) {
			[e setBytes:&a length:sizeof a atIndex:3];
			[e dispatchThreads:MTLSizeMake((NSUInteger)cols, (NSUInteger)n, 1) threadsPerThreadgroup:MTLSizeMake(64, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

KVS_API int kvs_get_rows(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t n,
                         float *out) {
	if (n > 0 && !ids) return KVS_ERR_ARG;
	return rows_of(type, w, rows, cols, ids, 0, n, out);
}

KVS_API int kvs_dequant_rows(uint32_t type, const void *w, int64_t cols, int64_t row0, int64_t row1, float *out) {
	if (row0 < 0 || row1 < row0) return KVS_ERR_ARG;
	return rows_of(type, w, row1, cols, NULL, row0, row1 - row0, out);
}

/* ---------------------------------------------------------- element-wise */

KVS_API int kvs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps) {
	if (n < 0 || dim <= 0) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	struct norm_args a = {dim, eps, 0};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"rmsnorm");
		int rc = KVS_ERR_ARG;
		if (bind(e, out, 0) && bind(e, x, 1) && bind(e, weight, 2)) {
			[e setBytes:&a length:sizeof a atIndex:3];
			[e dispatchThreadgroups:MTLSizeMake((NSUInteger)n, 1, 1) threadsPerThreadgroup:MTLSizeMake(256, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

KVS_API int kvs_rope(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
                     float base, float scale, const float *freq_factors, int neox) {
	if (n < 0 || heads <= 0 || head_dim <= 0 || rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 || !(base > 0) ||
	    !(scale > 0))
		return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	struct rope_args a = {n, heads, head_dim, rope_dim, (float)pow(base, -2.0 / (double)rope_dim), scale, neox != 0,
	                      freq_factors != NULL};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"rope");
		int rc = KVS_ERR_ARG;
		if (bind(e, x, 0) && bind(e, pos, 1) && bind(e, freq_factors, 2)) {
			[e setBytes:&a length:sizeof a atIndex:3];
			grid1(e, n * heads * rope_dim / 2, 64);
			rc = KVS_OK;
		}
		return rc;
	});
}

static int elementwise(int op, float *out, const float *a, const float *b, int64_t len, float s, int64_t rows) {
	if (len < 0) return KVS_ERR_ARG;
	if (len == 0) return KVS_OK;
	struct ew_args args = {op, s, len, rows};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"elementwise");
		int rc = KVS_ERR_ARG;
		if (bind(e, out, 0) && bind(e, a, 1) && bind(e, b, 2)) {
			[e setBytes:&args length:sizeof args atIndex:3];
			grid1(e, len, 256);
			rc = KVS_OK;
		}
		return rc;
	});
}

KVS_API int kvs_swiglu(float *out, const float *gate, const float *up, int64_t len) {
	return elementwise(0, out, gate, up, len, 0, 1);
}
KVS_API int kvs_geglu(float *out, const float *gate, const float *up, int64_t len) {
	return elementwise(1, out, gate, up, len, 0, 1);
}
KVS_API int kvs_add(float *x, const float *y, int64_t len) { return elementwise(2, x, x, y, len, 0, 1); }
KVS_API int kvs_scale(float *x, int64_t len, float s) { return elementwise(3, x, x, NULL, len, s, 1); }
KVS_API int kvs_add_bias(float *x, const float *bias, int64_t n, int64_t rows) {
	if (rows <= 0) return rows < 0 ? KVS_ERR_ARG : KVS_OK;
	return elementwise(4, x, x, bias, n * rows, 0, rows);
}

KVS_API int kvs_gather(float *dst, const float *src, const int32_t *rows, int64_t n, int64_t width) {
	if (n < 0 || width < 0) return KVS_ERR_ARG;
	if (n == 0 || width == 0) return KVS_OK;
	struct rows_args a = {0, 1, 0, 0, 0, 0, width};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"gather");
		int rc = KVS_ERR_ARG;
		if (bind(e, dst, 0) && bind(e, src, 1) && bind(e, rows, 2)) {
			[e setBytes:&a length:sizeof a atIndex:3];
			[e dispatchThreads:MTLSizeMake((NSUInteger)width, (NSUInteger)n, 1) threadsPerThreadgroup:MTLSizeMake(64, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

/* -------------------------------------------------------------- paged K/V */

KVS_API int kvs_kv_supported(int32_t prec, int32_t key) {
	(void)key;
	return prec == KVS_KV_F16 || prec == KVS_KV_Q8_0 ? KVS_OK : KVS_ERR_TYPE;
}

static int plane_of(const struct kvs_kv_plane *p, int32_t layer, struct plane_args *a) {
	if (!p || p->layers < 1 || p->blocks < 1 || p->block_size < 1 || p->kv_heads < 1 || p->head_dim < 1 ||
	    p->head_dim > KVS_MAX_HEAD_DIM || !p->data || layer < 0 || layer >= p->layers)
		return KVS_ERR_ARG;
	if (kvs_kv_supported(p->prec, p->key) != KVS_OK || p->key) return KVS_ERR_TYPE;
	if (p->prec == KVS_KV_Q8_0 && (!p->scale || p->group < 1 || p->groups < 1)) return KVS_ERR_ARG;
	*a = (struct plane_args){p->prec, p->layers, p->blocks, p->block_size, p->kv_heads, p->head_dim, p->row_bytes,
	                         p->group, p->groups, layer, p->data_per_block, p->scales_per_block};
	return KVS_OK;
}

static int kv_rows(NSString *kernel, const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots,
                   const void *rows) {
	struct plane_args a;
	int rc0 = plane_of(p, layer, &a);
	if (rc0 != KVS_OK) return rc0;
	if (n < 0) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(kernel);
		int rc = KVS_ERR_ARG;
		if (bind(e, p->data, 0) && bind(e, p->scale, 1) && bind(e, slots, 2) && bind(e, rows, 3)) {
			[e setBytes:&a length:sizeof a atIndex:4];
			[e dispatchThreadgroups:MTLSizeMake((NSUInteger)n, 1, 1) threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}

/* The Metal library stores no int8/int4 keys, so it takes no residual
 * slots (resid) and quantizes no key groups. */
KVS_API int kvs_kv_write(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, const float *rows,
                         uint8_t *const *resid) {
	(void)resid;
	return kv_rows(@"kv_write", p, layer, n, slots, rows);
}

KVS_API int kvs_kv_read(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, float *rows,
                        const uint8_t *const *resid) {
	(void)resid;
	return kv_rows(@"kv_read", p, layer, n, slots, rows);
}

KVS_API int kvs_key_quantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	(void)p, (void)n, (void)groups, (void)resid;
	return KVS_ERR_TYPE;
}

KVS_API int kvs_key_dequantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid) {
	(void)p, (void)n, (void)groups, (void)resid;
	return KVS_ERR_TYPE;
}

KVS_API int kvs_kv_copy_block(const struct kvs_kv_plane *p, int32_t dst, int32_t src) {
	struct plane_args a;
	int rc0 = plane_of(p, 0, &a);
	if (rc0 != KVS_OK) return rc0;
	if (dst < 0 || dst >= p->blocks || src < 0 || src >= p->blocks) return KVS_ERR_ARG;
	if (dst == src) return KVS_OK;
	LOCKED({
		flush();
		int64_t db = p->data_per_block * (p->prec == KVS_KV_F16 ? 2 : 1), sb = p->scales_per_block * 2;
		for (int64_t l = 0; l < p->layers; l++) {
			int64_t d = l * p->blocks + dst, s = l * p->blocks + src;
			memcpy((uint8_t *)p->data + d * db, (const uint8_t *)p->data + s * db, (size_t)db);
			if (p->prec != KVS_KV_F16 && p->scale)
				memcpy((uint8_t *)p->scale + d * sb, (const uint8_t *)p->scale + s * sb, (size_t)sb);
		}
		return KVS_OK;
	});
}

KVS_API int64_t kvs_attention_scratch(int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t max_pos) {
	if (n < 0 || heads < 1 || kv_heads < 1 || heads % kv_heads || heads / kv_heads > KVS_MAX_GROUP || head_dim < 1 ||
	    head_dim > KVS_MAX_HEAD_DIM || max_pos < 1)
		return KVS_ERR_ARG;
	return 0; /* one pass a row: no partial results */
}

KVS_API int kvs_attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                          int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q,
                          const int32_t *n_pos, const int32_t *tables, const int64_t *table_off,
                          const uint8_t *const *k_resid, float *scratch, float *out) {
	(void)k_resid, (void)scratch;
	struct plane_args ka, va;
	int rc0 = plane_of(k, layer, &ka);
	if (rc0 == KVS_OK) rc0 = plane_of(v, layer, &va);
	if (rc0 != KVS_OK) return rc0;
	if (n < 0 || heads < 1 || heads % k->kv_heads || window < 0 || k->blocks != v->blocks || k->block_size != v->block_size)
		return KVS_ERR_ARG;
	int32_t g = heads / k->kv_heads;
	if (head0 < 0 || head1 > heads || head0 > head1 || head0 % g || head1 % g) return KVS_ERR_ARG;
	if (n == 0 || head0 == head1) return KVS_OK;
	struct attn_args a = {heads, head0, g, window, scale, 0};
	LOCKED({
		id<MTLComputeCommandEncoder> e = encoder(@"attention");
		int rc = KVS_ERR_ARG;
		if (bind(e, k->data, 0) && bind(e, k->scale, 1) && bind(e, v->data, 2) && bind(e, v->scale, 3) && bind(e, q, 4) &&
		    bind(e, n_pos, 5) && bind(e, tables, 6) && bind(e, table_off, 7) && bind(e, out, 8)) {
			[e setBytes:&ka length:sizeof ka atIndex:9];
			[e setBytes:&va length:sizeof va atIndex:10];
			[e setBytes:&a length:sizeof a atIndex:11];
			[e dispatchThreadgroups:MTLSizeMake((NSUInteger)n, (NSUInteger)(head1 - head0), 1)
			    threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
			rc = KVS_OK;
		}
		return rc;
	});
}
