/* device.cu: the CUDA library's device functions (kvscope.h "devices"):
 * one stream, a sticky first error, memory, copies through a pinned staging
 * ring, and the CPU-path functions every library exports. */
#include <mutex>
#include <stdio.h>
#include <string.h>

#include "common.cuh"

static std::mutex mu;              /* guards the state below */
static cudaStream_t stream_;       /* the library's stream */
static bool stream_ok;             /* created */
static int pending = KVS_OK;       /* the first device failure not yet reported */
static char last_error[512];       /* kvs_last_error's message */

/* The staging ring: small host-to-device copies go through pinned memory,
 * so that they queue on the stream without waiting for it (a copy from
 * pageable memory waits for the stream to drain). */
#define RING_SLOTS 8
#define RING_SLOT_BYTES (1 << 20)
static uint8_t *ring[RING_SLOTS];
static cudaEvent_t ring_done[RING_SLOTS];
static bool ring_used[RING_SLOTS];
static int ring_next;
static bool ring_ok;

cudaStream_t kvs_stream(void) {
	std::lock_guard<std::mutex> g(mu);
	if (!stream_ok) {
		if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) stream_ = 0;
		stream_ok = true;
	}
	return stream_;
}

static int record_locked(const char *what, cudaError_t err) {
	if (pending == KVS_OK) {
		pending = KVS_ERR_DEVICE;
		snprintf(last_error, sizeof last_error, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
	}
	return KVS_ERR_DEVICE;
}

int kvs_record(const char *what, cudaError_t err) {
	std::lock_guard<std::mutex> g(mu);
	return record_locked(what, err);
}

void kvs_set_error(const char *msg) {
	std::lock_guard<std::mutex> g(mu);
	snprintf(last_error, sizeof last_error, "%s", msg);
}

int kvs_launched(const char *what) {
	cudaError_t err = cudaGetLastError();
	return err == cudaSuccess ? KVS_OK : kvs_record(what, err);
}

/* take_pending returns and clears the failure not yet reported. */
static int take_pending(void) {
	std::lock_guard<std::mutex> g(mu);
	int rc = pending;
	pending = KVS_OK;
	return rc;
}

KVS_EXPORT int kvs_abi_version(void) { return KVS_ABI_VERSION; }
/* The read probe is the host library's; a device's bandwidth is measured
 * by native/cuda/check.sh's copies instead. */
KVS_EXPORT int kvs_sum64(const void *p, int64_t words, uint64_t *sum) {
	(void)p, (void)words, (void)sum;
	return KVS_ERR_TYPE;
}
/* The device computes; the host threads have nothing to split. */
KVS_EXPORT int kvs_set_threads(int32_t n) { return n >= 1 && n <= KVS_MAX_THREADS ? KVS_OK : KVS_ERR_ARG; }

KVS_EXPORT int kvs_device_kind(void) { return KVS_DEVICE_CUDA; }

__global__ void noop_kernel(int *x) {
	if (x) *x = 1;
}

KVS_EXPORT int kvs_device_name(char *buf, int64_t len) {
	if (!buf || len <= 0) return KVS_ERR_ARG;
	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess || count == 0) {
		snprintf(buf, (size_t)len, "no CUDA device (%s)", err != cudaSuccess ? cudaGetErrorString(err) : "none found");
		return KVS_ERR_DEVICE;
	}
	cudaDeviceProp p;
	if ((err = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
		snprintf(buf, (size_t)len, "cannot read the CUDA device's properties (%s)", cudaGetErrorString(err));
		return KVS_ERR_DEVICE;
	}
	/* A GPU older than the code in this library (built for sm_80 and up)
	 * cannot launch its kernels: find out now, not in the first step. */
	KVS_LAUNCH(1, 1, 0, kvs_stream(), noop_kernel)(NULL);
	if ((err = cudaGetLastError()) == cudaSuccess) err = cudaStreamSynchronize(kvs_stream());
	if (err != cudaSuccess) {
		snprintf(buf, (size_t)len, "%s (sm_%d%d) cannot run this library's kernels: %s", p.name, p.major, p.minor,
		         cudaGetErrorString(err));
		return KVS_ERR_DEVICE;
	}
#if defined(KVS_HIPCPU) && defined(__SANITIZE_ADDRESS__)
	snprintf(buf, (size_t)len, "CUDA library emulated on the CPU (HIP-CPU), %u threads, AddressSanitizer and UBSan",
	         kvs_emu::threads());
#elif defined(KVS_HIPCPU)
	snprintf(buf, (size_t)len, "CUDA library emulated on the CPU (HIP-CPU), %u threads", kvs_emu::threads());
#else
	snprintf(buf, (size_t)len, "%s, %.0f GiB, sm_%d%d", p.name, (double)p.totalGlobalMem / (1 << 30), p.major, p.minor);
#endif
	return KVS_OK;
}

#ifdef KVS_HIPCPU
/* kvs_emulated is exported by the HIP-CPU build only (make cuda-emu): its
 * kernels run on the CPU, so the Go side never takes it for a GPU. It
 * returns 1, or 2 for the build with AddressSanitizer and UBSan (make
 * cuda-emu SANITIZE=1). */
KVS_EXPORT int kvs_emulated(void) {
#ifdef __SANITIZE_ADDRESS__
	return 2;
#else
	return 1;
#endif
}
#endif

KVS_EXPORT int kvs_last_error(char *buf, int64_t len) {
	if (!buf || len <= 0) return KVS_ERR_ARG;
	std::lock_guard<std::mutex> g(mu);
	snprintf(buf, (size_t)len, "%s", last_error);
	return KVS_OK;
}

KVS_EXPORT int kvs_malloc(int64_t bytes, void **ptr) {
	if (!ptr || bytes <= 0) return KVS_ERR_ARG;
	cudaError_t err = cudaMalloc(ptr, (size_t)bytes);
	if (err != cudaSuccess) {
		cudaGetLastError(); /* not sticky: the caller may free and retry */
		char msg[160];
		snprintf(msg, sizeof msg, "cudaMalloc of %lld bytes: %s", (long long)bytes, cudaGetErrorString(err));
		kvs_set_error(msg);
		return KVS_ERR_DEVICE;
	}
	return KVS_OK;
}

KVS_EXPORT int kvs_free(void *ptr) {
	if (ptr) cudaFree(ptr); /* synchronizes with the work using it */
	return KVS_OK;
}

/* ring_slot returns a free staging slot, waiting for its last copy. */
static int ring_slot(void) {
	std::lock_guard<std::mutex> g(mu);
	if (!ring_ok) {
		ring_ok = true;
		for (int i = 0; i < RING_SLOTS; i++) {
			if (cudaHostAlloc((void **)&ring[i], RING_SLOT_BYTES, cudaHostAllocDefault) != cudaSuccess ||
			    cudaEventCreateWithFlags(&ring_done[i], cudaEventDisableTiming) != cudaSuccess) {
				cudaGetLastError();
				ring[i] = NULL;
			}
		}
	}
	int s = ring_next;
	if (!ring[s]) return -1;
	ring_next = (s + 1) % RING_SLOTS;
	if (ring_used[s]) cudaEventSynchronize(ring_done[s]);
	ring_used[s] = true;
	return s;
}

KVS_EXPORT int kvs_memcpy_h2d(void *dst, const void *src, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && (!dst || !src))) return KVS_ERR_ARG;
	if (bytes == 0) return KVS_OK;
	cudaStream_t st = kvs_stream();
	int s = bytes <= RING_SLOT_BYTES ? ring_slot() : -1;
	cudaError_t err;
	if (s >= 0) {
		memcpy(ring[s], src, (size_t)bytes);
		err = cudaMemcpyAsync(dst, ring[s], (size_t)bytes, cudaMemcpyHostToDevice, st);
		if (err == cudaSuccess) err = cudaEventRecord(ring_done[s], st);
	} else {
		/* From pageable memory: src may be reused once the stream has
		 * taken it, which a synchronization guarantees. */
		err = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, st);
		if (err == cudaSuccess) err = cudaStreamSynchronize(st);
	}
	return err == cudaSuccess ? KVS_OK : kvs_record("copy to the device", err);
}

KVS_EXPORT int kvs_memcpy_d2h(void *dst, const void *src, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && (!dst || !src))) return KVS_ERR_ARG;
	cudaStream_t st = kvs_stream();
	cudaError_t err = cudaSuccess;
	if (bytes > 0) err = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, st);
	if (err == cudaSuccess) err = cudaStreamSynchronize(st);
	if (err != cudaSuccess) kvs_record("copy from the device", err);
	return take_pending();
}

KVS_EXPORT int kvs_memcpy_d2d(void *dst, const void *src, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && (!dst || !src))) return KVS_ERR_ARG;
	if (bytes == 0) return KVS_OK;
	cudaError_t err = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, kvs_stream());
	return err == cudaSuccess ? KVS_OK : kvs_record("copy on the device", err);
}

KVS_EXPORT int kvs_memset(void *dst, int value, int64_t bytes) {
	if (bytes < 0 || (bytes > 0 && !dst)) return KVS_ERR_ARG;
	if (bytes == 0) return KVS_OK;
	cudaError_t err = cudaMemsetAsync(dst, value, (size_t)bytes, kvs_stream());
	return err == cudaSuccess ? KVS_OK : kvs_record("memset", err);
}

KVS_EXPORT int kvs_synchronize(void) {
	cudaError_t err = cudaStreamSynchronize(kvs_stream());
	if (err != cudaSuccess) kvs_record("synchronize", err);
	return take_pending();
}

/* ------------------------------------------------ the CPU-path functions */

/* A device library runs one path, 0, named after its device. */
KVS_EXPORT uint32_t kvs_cpu_features(void) { return 0; }
KVS_EXPORT int kvs_path_supported(int path) { return path == 0; }
KVS_EXPORT int kvs_set_path(int path) { return path == 0 || path == KVS_PATH_BEST ? KVS_OK : KVS_ERR_PATH; }
KVS_EXPORT int kvs_path(void) { return 0; }
KVS_EXPORT const char *kvs_path_name(int path) { return path == 0 ? "cuda" : "unknown"; }

/* No packed layout: the kernels read ggml's blocks as the file has them. */
KVS_EXPORT int64_t kvs_packed_bytes(uint32_t type, int64_t rows, int64_t cols) {
	(void)type, (void)rows, (void)cols;
	return KVS_ERR_TYPE;
}

KVS_EXPORT int kvs_pack(uint32_t type, int64_t rows, int64_t cols, int64_t g0, int64_t g1, const void *w, void *packed) {
	(void)type, (void)rows, (void)cols, (void)g0, (void)g1, (void)w, (void)packed;
	return KVS_ERR_TYPE;
}

KVS_EXPORT int kvs_matmul_packed(uint32_t type, const void *packed, int64_t rows, int64_t cols, int64_t row0,
                                 int64_t row1, const void *qx, int64_t n, float *out) {
	(void)type, (void)packed, (void)rows, (void)cols, (void)row0, (void)row1, (void)qx, (void)n, (void)out;
	return KVS_ERR_TYPE;
}

KVS_EXPORT int kvs_matmul_packed_n(int32_t count, const uint32_t *types, const void *const *packed, const int64_t *rows,
                                   int64_t cols, const void *qx, int64_t n, float *const *outs) {
	(void)count, (void)types, (void)packed, (void)rows, (void)cols, (void)qx, (void)n, (void)outs;
	return KVS_ERR_TYPE;
}
