/* hipcpu.h: the CUDA names this library uses, on ROCm's HIP-CPU runtime,
 * so that the same .cu sources build with g++ into a library that runs its
 * kernels on the CPU (make cuda-emu; native/README.md, "The CUDA library
 * on the CPU"). common.cuh includes it instead of the CUDA headers when
 * KVS_HIPCPU is defined; nothing else in the sources knows which build it
 * is in, except device.cu's device name and kvs_emulated.
 *
 * HIP-CPU runs the grid: thread blocks in parallel on TBB's threads, each
 * thread of a block a fiber (threadIdx, blockIdx, blockDim and gridDim are
 * its), __shared__ as per-OS-thread storage, and the half conversions.
 * What HIP-CPU does not give as CUDA defines it is done here:
 *
 * - Warps. HIP-CPU's warps are 64 fibers wide, numbered in its own order,
 *   and its shuffles are barriers of the whole block, so a shuffle inside
 *   a loop that warps run different numbers of times (a warp a position)
 *   desynchronises the block. Here a warp is 32 threads by CUDA's linear
 *   thread index, and __shfl_xor_sync and __reduce_add_sync wait for the
 *   lanes their mask names, only those.
 * - __syncthreads waits for every thread of the block that has not exited.
 * - Misuse that is undefined on a GPU is a device fault: a shuffle whose
 *   mask names a lane that has exited, that reads a lane outside its mask,
 *   or threads waiting for each other for ever (a barrier or shuffle not
 *   every thread reaches). The fault is sticky, as CUDA's are: the launch
 *   fails, and every later launch, copy and synchronisation with it.
 * - Launch limits: more than 1024 threads a block, a grid's y or z over
 *   65535, or more dynamic shared memory than 48 KiB (or what
 *   cudaFuncSetAttribute raised it to, up to an A100's 163 KiB) fail the
 *   launch with CUDA's error, as on a GPU.
 * - Dynamic shared memory is a fresh allocation of exactly the bytes the
 *   launch asked for, filled with 0xff bytes (a NaN in every float), so
 *   that reading it before writing it, or past its end, shows (the latter
 *   under AddressSanitizer: make cuda-emu SANITIZE=1).
 * - The runtime: one stream, and every operation on it runs to completion
 *   when it is queued (which CUDA allows a stream to do), on the calling
 *   thread and TBB's. HIP-CPU's own streams are not used: they start a
 *   thread that polls them for the life of the process.
 *
 * Kernels are launched with KVS_LAUNCH (common.cuh), which is <<<...>>>
 * under nvcc. */
#ifndef KVS_CUDA_HIPCPU_H
#define KVS_CUDA_HIPCPU_H

#include <hip/hip_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

/* HIP-CPU's __global__ and __device__ ask GCC for SIMD clones of every
 * function, which only slows the build; __forceinline__ without NDEBUG is
 * not even inline, which breaks the header's functions. */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __align__(n) alignas(n)

/* ------------------------------------------------------------- errors */

enum cudaError_t {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidPitchValue = 12,
	cudaErrorInvalidDevice = 101,
	cudaErrorLaunchFailure = 719,
};

namespace kvs_emu {

/* The first device fault, sticky for the life of the process. */
inline std::atomic<int> fault_code{0};
inline char fault_text[400];
inline std::mutex fault_mu;

/* per_thread_error is cudaGetLastError's: launch failures, reset when read. */
inline thread_local cudaError_t per_thread_error = cudaSuccess;

/* append copies s to the end of buf (n bytes); no printf, which needs more
 * stack than a fiber has. */
inline void append(char *buf, size_t n, const char *s) {
	size_t l = strlen(buf);
	while (*s && l + 1 < n) buf[l++] = *s++;
	buf[l] = 0;
}

inline void append_int(char *buf, size_t n, long long v) {
	char t[24];
	int i = 23;
	t[i] = 0;
	bool neg = v < 0;
	unsigned long long u = neg ? 0 - (unsigned long long)v : (unsigned long long)v;
	do t[--i] = (char)('0' + u % 10), u /= 10;
	while (u);
	if (neg) t[--i] = '-';
	append(buf, n, t + i);
}

/* record_fault keeps the first fault's text ("kernel K: what"). */
inline void record_fault(const char *kernel, const char *what) {
	std::lock_guard<std::mutex> g(fault_mu);
	if (fault_code.load()) return;
	fault_text[0] = 0;
	append(fault_text, sizeof fault_text, "device fault in the emulation: kernel ");
	append(fault_text, sizeof fault_text, kernel);
	append(fault_text, sizeof fault_text, ": ");
	append(fault_text, sizeof fault_text, what);
	fault_code.store(cudaErrorLaunchFailure);
}

/* status returns the sticky fault, or cudaSuccess. */
inline cudaError_t status() { return (cudaError_t)fault_code.load(); }

} // namespace kvs_emu

inline cudaError_t cudaGetLastError(void) {
	cudaError_t e = kvs_emu::per_thread_error;
	kvs_emu::per_thread_error = cudaSuccess;
	return e != cudaSuccess ? e : kvs_emu::status();
}

inline const char *cudaGetErrorName(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	}
	return "cudaErrorUnknown";
}

inline const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidPitchValue: return "invalid pitch argument";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorLaunchFailure:
		return kvs_emu::fault_code.load() ? kvs_emu::fault_text : "unspecified launch failure";
	}
	return "unknown error";
}

/* ------------------------------------------------------------ devices */

struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
	int major, minor;
};

enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace kvs_emu {
/* The limits of the smallest GPU this library is built for (sm_80, A100). */
constexpr size_t smem_default = 48 * 1024, smem_optin = 163 * 1024;

/* smem_limits: kernel (its address) -> dynamic shared memory allowed. */
inline std::mutex smem_mu;
inline std::unordered_map<const void *, size_t> smem_limits;

inline size_t smem_limit(const void *kernel) {
	std::lock_guard<std::mutex> g(smem_mu);
	auto it = smem_limits.find(kernel);
	return it == smem_limits.end() ? smem_default : it->second;
}

/* threads returns how many threads run the blocks (TBB's). */
inline unsigned threads() {
	unsigned n = std::thread::hardware_concurrency();
	return n ? n : 1;
}
} // namespace kvs_emu

inline cudaError_t cudaGetDeviceCount(int *n) {
	*n = 1;
	return cudaSuccess;
}

inline cudaError_t cudaGetDevice(int *d) {
	*d = 0;
	return cudaSuccess;
}

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
	if (dev != 0) return cudaErrorInvalidDevice;
	memset(p, 0, sizeof *p);
	kvs_emu::append(p->name, sizeof p->name, "HIP-CPU");
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	p->totalGlobalMem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
	p->major = 8, p->minor = 0;
	return cudaSuccess;
}

inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev) {
	if (dev != 0) return cudaErrorInvalidDevice;
	if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorInvalidValue;
	*v = (int)kvs_emu::smem_optin;
	return cudaSuccess;
}

template <class F> inline cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute a, int v) {
	if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || (size_t)v > kvs_emu::smem_optin)
		return cudaErrorInvalidValue;
	std::lock_guard<std::mutex> g(kvs_emu::smem_mu);
	kvs_emu::smem_limits[reinterpret_cast<const void *>(kernel)] = (size_t)v;
	return cudaSuccess;
}

/* ------------------------------------------- memory, streams, events */

/* Streams and events are tokens: every operation has finished when its
 * call returns. */
typedef struct kvs_emu_stream *cudaStream_t;
typedef struct kvs_emu_event *cudaEvent_t;
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocDefault = 0 };
enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
};

namespace kvs_emu {
inline char stream_token, event_token;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
	*s = (cudaStream_t)&kvs_emu::stream_token;
	return cudaSuccess;
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return kvs_emu::status(); }

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
	*e = (cudaEvent_t)&kvs_emu::event_token;
	return cudaSuccess;
}

inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return kvs_emu::status(); }

inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return kvs_emu::status(); }

/* Device memory is the host's, 256-byte aligned as cudaMalloc's is, and
 * filled with 0xff bytes (a NaN in every float): a GPU's is not cleared,
 * so a kernel that reads what nothing wrote must not find zeros here. */
inline cudaError_t cudaMalloc(void **p, size_t bytes) {
	/* exactly bytes, so that AddressSanitizer stops a read at the end */
	if (posix_memalign(p, 256, bytes ? bytes : 1)) return *p = NULL, cudaErrorMemoryAllocation;
	memset(*p, 0xff, bytes);
	return cudaSuccess;
}

inline cudaError_t cudaFree(void *p) {
	free(p);
	return kvs_emu::status();
}

inline cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) {
	*p = malloc(bytes);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* The copies fail after a fault, as CUDA's do; memcpy, not memmove: a copy
 * between overlapping ranges is undefined in CUDA too (AddressSanitizer
 * reports it). */
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t) {
	if (kvs_emu::status()) return kvs_emu::status();
	if (n) memcpy(dst, src, n);
	return cudaSuccess;
}

inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t) {
	if (kvs_emu::status()) return kvs_emu::status();
	if (n) memset(dst, v, n);
	return cudaSuccess;
}

inline cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t) {
	if (kvs_emu::status()) return kvs_emu::status();
	if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
	for (size_t r = 0; r < height; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
	return cudaSuccess;
}

/* ---------------------------------------------------- device functions */

/* CUDA's integer min and max (the kernels take them of int and int64_t). */
template <class A, class B, std::enable_if_t<std::is_integral_v<A> && std::is_integral_v<B>, int> = 0>
inline std::common_type_t<A, B> min(A a, B b) {
	return a < b ? a : b;
}
template <class A, class B, std::enable_if_t<std::is_integral_v<A> && std::is_integral_v<B>, int> = 0>
inline std::common_type_t<A, B> max(A a, B b) {
	return a > b ? a : b;
}

/* The _rn arithmetic: the build has -ffp-contract=off, so nothing fuses. */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }

/* __float2int_rn: to nearest, ties to even, saturating, NaN to 0 (PTX's
 * cvt.rni.s32.f32). */
inline int __float2int_rn(float x) {
	if (x != x) return 0;
	if (x >= 2147483648.0f) return INT32_MAX;
	if (x <= -2147483648.0f) return INT32_MIN;
	return (int)std::nearbyint(x);
}

/* __dp4a: the four signed byte products of a and b, plus c. */
inline int __dp4a(int a, int b, int c) {
	uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
	uint32_t s = (uint32_t)c;
	for (int k = 0; k < 4; k++) s += (uint32_t)((int)(int8_t)(ua >> 8 * k) * (int)(int8_t)(ub >> 8 * k));
	return (int)s;
}

namespace kvs_emu {

constexpr int warp_size = 32;
constexpr int max_threads = 1024;
constexpr int max_warps = max_threads / warp_size;

/* Warp: one warp's shuffle exchange. Two value buffers, by round parity: a
 * lane can be one round ahead of the slowest (it cannot finish a round
 * until every lane has arrived at it, so has read the one before). */
struct Warp {
	uint64_t val[2][warp_size];
	uint32_t arrived; /* lanes at the current round */
	uint32_t gen;     /* rounds completed */
};

/* Block: the state of the thread block that this OS thread runs. A block
 * runs from start to end on one thread, its threads HIP-CPU's fibers,
 * which take turns in the order of their numbers: cur is the one running.
 * The coordinates are kept here, read from HIP-CPU once a block. */
struct Block {
	const char *kernel;
	int n, live, exited, cur;
	int returned; /* fibers returned to HIP-CPU, in their order */
	int bar_arrived;
	uint32_t bar_gen;
	uint64_t progress; /* arrivals and exits, for telling a deadlock */
	bool fault;
	const hip::detail::Fiber *fibers;
	dim3 bdim, bidx, gdim;
	void *smem;
	uint32_t gone[max_warps]; /* exited lanes, by warp */
	Warp warp[max_warps];
	uint32_t tx[max_threads], ty[max_threads], tz[max_threads];
	int lin[max_threads]; /* CUDA's linear thread index (x fastest) */
};

/* block_p: this OS thread's block (the build's TLS descriptors make
 * reading it a short call, not __tls_get_addr's). */
inline thread_local Block *block_p;

inline Block *blk() {
	Block *b = block_p;
	if (!b) block_p = b = new Block();
	return b;
}

/* reverse: the threads of a block take their turns in descending order
 * (after thread 0, which HIP-CPU starts first) in the sanitizer build, in
 * ascending order in the other, so that a race that one order hides (a
 * __syncthreads missing between a write and another thread's read) shows
 * in the other. */
#ifdef __SANITIZE_ADDRESS__
constexpr bool reverse = true;
#else
constexpr bool reverse = false;
#endif

/* yield hands the OS thread to the block's next fiber, straight through
 * libco's swap: HIP-CPU's Fiber::yield (and libco's co_switch) also keep
 * thread-local pointers to the running fiber, which only their own
 * switches at the end of a block read, so finish sets them right first. */
inline void yield(Block *b) {
	int me = b->cur, next = reverse ? (me == 0 ? b->n - 1 : me - 1) : (me + 1 == b->n ? 0 : me + 1);
	b->cur = next;
	co_swap(b->fibers[next].native_handle(), b->fibers[me].native_handle());
}

/* fault stops the block's waits (its threads run on to their ends, their
 * results garbage) and records the fault: what, then why. */
inline void fault(const char *what, const char *why = "") {
	Block *b = blk();
	char msg[240] = "";
	append(msg, sizeof msg, what);
	append(msg, sizeof msg, why);
	b->fault = true;
	record_fault(b->kernel, msg);
}

/* deadlock: every thread of the block waits, and none can go on. */
inline void deadlock() {
	Block *b = blk();
	char msg[200] = "";
	append(msg, sizeof msg, "deadlock: of its ");
	append_int(msg, sizeof msg, b->n);
	append(msg, sizeof msg, " threads, ");
	append_int(msg, sizeof msg, b->bar_arrived);
	append(msg, sizeof msg, " wait at __syncthreads, ");
	int w = 0;
	for (int i = 0; i < (b->n + warp_size - 1) / warp_size; i++) w += __builtin_popcount(b->warp[i].arrived);
	append_int(msg, sizeof msg, w);
	append(msg, sizeof msg, " at a warp shuffle, ");
	append_int(msg, sizeof msg, b->exited);
	append(msg, sizeof msg, " have exited (a barrier or shuffle that not all of its threads reach)");
	fault(msg);
}

/* wait yields until done() holds. Two rounds of the block's fibers in
 * which nothing arrives anywhere are a deadlock. */
template <class C> inline void wait(Block *b, C done) {
	uint64_t seen = b->progress;
	int idle = 0;
	while (!done() && !b->fault) {
		if (b->n == 1) return deadlock();
		yield(b);
		if (b->progress != seen) seen = b->progress, idle = 0;
		else if (++idle >= 2) return deadlock();
	}
}

inline void release_barrier(Block *b) {
	b->bar_arrived = 0;
	b->bar_gen++;
}

inline void sync_block() {
	Block *b = blk();
	if (b->fault) return;
	uint32_t g = b->bar_gen;
	b->bar_arrived++, b->progress++;
	if (b->bar_arrived >= b->live) return release_barrier(b);
	wait(b, [&] { return b->bar_gen != g; });
}

/* nothing is exchange's default completion: the lanes read the values. */
struct nothing {
	void operator()(uint64_t *, uint32_t) const {}
};

/* exchange publishes this lane's value to its warp, waits for the lanes of
 * mask, and returns the round's values (need: the lanes that took part;
 * lane: this one's). The lane that completes the round first calls
 * complete(values, need), which may replace the values with results. */
template <class Complete = nothing>
inline uint64_t *exchange(const char *what, uint32_t mask, uint64_t v, uint32_t *need, int *lane,
                          Complete complete = {}) {
	Block *b = blk();
	int tid = b->lin[b->cur], w = tid / warp_size, first = w * warp_size;
	*lane = tid % warp_size;
	uint32_t exist = b->n - first >= warp_size ? 0xffffffffu : (1u << (b->n - first)) - 1;
	*need = mask & exist;
	Warp &x = b->warp[w];
	uint32_t g = x.gen;
	if (b->fault) return x.val[g & 1];
	if (!(mask >> *lane & 1)) {
		fault(what, " called by a lane that its mask leaves out");
		return x.val[g & 1];
	}
	if (*need & b->gone[w]) {
		fault(what, " whose mask names a lane that has exited");
		return x.val[g & 1];
	}
	x.val[g & 1][*lane] = v;
	x.arrived |= 1u << *lane;
	b->progress++;
	if ((x.arrived & *need) == *need) {
		complete(x.val[g & 1], *need);
		x.arrived = 0;
		x.gen++;
	} else {
		wait(b, [&] { return x.gen != g; });
	}
	return x.val[g & 1];
}

/* warp_butterfly is `for (m = 16; m > 0; m >>= 1) v = op(v,
 * __shfl_xor_sync(0xffffffff, v, m))` (common.cuh's warp_sum, warp_max,
 * warp_min): the same operations on the same values in the same order, so
 * the same bits, done once for the warp by the lane that completes one
 * exchange, where the shuffles would take five, each a turn of every
 * fiber of the block. */
template <class Op> inline float warp_butterfly(float v, Op op) {
	uint32_t need, bits;
	int lane;
	memcpy(&bits, &v, 4);
	const uint64_t *vals =
	    exchange("a warp reduction", 0xffffffffu, bits, &need, &lane, [&](uint64_t *vals, uint32_t need) {
		    if (need != 0xffffffffu) return fault("a warp reduction", " with fewer than 32 lanes in its warp");
		    float a[warp_size], t[warp_size];
		    for (int l = 0; l < warp_size; l++) {
			    uint32_t u = (uint32_t)vals[l];
			    memcpy(&a[l], &u, 4);
		    }
		    for (int m = warp_size / 2; m > 0; m >>= 1) {
			    for (int l = 0; l < warp_size; l++) t[l] = op(a[l], a[l ^ m]);
			    memcpy(a, t, sizeof a);
		    }
		    for (int l = 0; l < warp_size; l++) {
			    uint32_t u;
			    memcpy(&u, &a[l], 4);
			    vals[l] = u;
		    }
	    });
	uint32_t u = (uint32_t)vals[lane];
	float r;
	memcpy(&r, &u, 4);
	return r;
}

/* begin readies the block's state; its thread 0 calls it first. */
inline void begin(Block *b, const char *kernel, dim3 g, dim3 t, size_t smem) {
	b->kernel = kernel;
	b->n = b->live = (int)(t.x * t.y * t.z);
	b->exited = b->bar_arrived = b->returned = b->cur = 0;
	b->bar_gen = 0;
	b->progress = 0;
	b->fault = status() != 0;
	b->bdim = t, b->gdim = g, b->bidx = hip::detail::BIdx::call();
	for (int i = 0; i < (b->n + warp_size - 1) / warp_size; i++) b->gone[i] = 0, b->warp[i].arrived = 0, b->warp[i].gen = 0;
	b->fibers = b->n > 1 ? std::data(hip::detail::Tile::fibers()) : NULL;
	b->smem = NULL;
	if (smem) {
		b->smem = malloc(smem);
		if (!b->smem) fault("the block's shared memory", ": no host memory for it");
		else memset(b->smem, 0xff, smem);
	}
}

/* start records the coordinates of the thread starting, fiber me: in
 * CUDA's order (x fastest), so that the fibers' numbers are CUDA's linear
 * thread indices and a warp is 32 fibers in a row. */
inline void start(Block *b, int me) {
	uint32_t x = b->bdim.x, y = b->bdim.y, f = (uint32_t)me;
	b->tx[me] = f % x, b->ty[me] = f / x % y, b->tz[me] = f / (x * y);
	b->lin[me] = me;
}

/* finish: fiber me has returned from the kernel. HIP-CPU's fibers must
 * return in the order of their numbers, 0 first (a fiber that returned
 * before its turn would run the kernel again when its turn came), and
 * through its own switches, so each waits here for all to finish, then
 * for its turn. */
inline void finish(Block *b, int me) {
	int tid = b->lin[me];
	b->gone[tid / warp_size] |= 1u << tid % warp_size;
	b->live--, b->exited++, b->progress++;
	if (b->bar_arrived > 0 && b->bar_arrived >= b->live) release_barrier(b);
	if (b->exited == b->n) {
		free(b->smem);
		b->smem = NULL;
	}
	if (b->n == 1) return;
	while (b->exited < b->n) yield(b);
	while (b->returned != me) {
		int next = me + 1 == b->n ? 0 : me + 1;
		b->cur = next;
		/* this fiber may have been switched to by swap */
		co_active_handle = b->fibers[me].native_handle();
		hip::detail::Fiber::yield(b->fibers[next]);
	}
	b->returned++;
	b->cur = me + 1 == b->n ? 0 : me + 1; /* where HIP-CPU switches next */
}

/* run runs the grid: CUDA's launch checks, then every block, each on one of
 * TBB's threads, its threads as HIP-CPU's fibers. */
template <class F> inline void run(const char *kernel, const void *key, dim3 g, dim3 t, size_t smem, const F &body) {
	if (status()) {
		per_thread_error = status();
		return;
	}
	uint64_t n = (uint64_t)t.x * t.y * t.z;
	if (!t.x || !t.y || !t.z || t.x > 1024 || t.y > 1024 || t.z > 64 || n > max_threads || !g.x || !g.y || !g.z ||
	    g.x > INT32_MAX || g.y > 65535 || g.z > 65535) {
		per_thread_error = cudaErrorInvalidConfiguration;
		return;
	}
	if (smem > smem_limit(key)) {
		per_thread_error = cudaErrorInvalidValue;
		return;
	}
	auto thread = [&]() {
		Block *b = blk();
		int me = n > 1 ? b->cur : 0;
		if (me == 0) begin(b, kernel, g, t, smem);
		start(b, me);
		if (me == 0 && n > 1) {
			/* From here on every thread is a fiber: HIP-CPU's tile
			 * switches to them when thread 0 returns. */
			hip::detail::this_tile::has_barrier = true;
			yield(b);
		}
		body();
		finish(b, me);
	};
	struct {
		const decltype(thread) *f;
		void operator()() const { (*f)(); }
	} fiber_fn{&thread};
	hip::detail::Tiled_domain domain{t, g, (uint32_t)smem, fiber_fn};
	for_each_tile(domain, thread, std::tuple<>{});
}

/* Launch holds a launch's configuration until its arguments come, which
 * are converted to the kernel's parameter types, as CUDA does. */
template <class... P> struct Launch {
	void (*fn)(P...);
	const char *name;
	dim3 grid, block;
	size_t smem;

	void operator()(P... a) const {
		const std::tuple<P...> args(a...);
		auto f = fn;
		run(name, reinterpret_cast<const void *>(fn), grid, block, smem, [&] { std::apply(f, args); });
	}
};

template <class... P>
inline Launch<P...> launch(void (*fn)(P...), const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t) {
	return Launch<P...>{fn, name, g, b, smem};
}

inline void *dynamic_smem() { return blk()->smem; }

/* The coordinates, from the block's state (HIP-CPU's recompute them from
 * its fiber's number at every read). */
#define KVS_EMU_COORD(Name, expr)                                                      \
	struct Name {                                                                      \
		struct X {                                                                     \
			operator uint32_t() const { const Block *b = blk(); return expr(x); }      \
		} x;                                                                           \
		struct Y {                                                                     \
			operator uint32_t() const { const Block *b = blk(); return expr(y); }      \
		} y;                                                                           \
		struct Z {                                                                     \
			operator uint32_t() const { const Block *b = blk(); return expr(z); }      \
		} z;                                                                           \
	};
#define KVS_EMU_TIDX(c) b->t##c[b->cur]
#define KVS_EMU_BIDX(c) b->bidx.c
#define KVS_EMU_BDIM(c) b->bdim.c
#define KVS_EMU_GDIM(c) b->gdim.c
KVS_EMU_COORD(ThreadIdx, KVS_EMU_TIDX)
KVS_EMU_COORD(BlockIdx, KVS_EMU_BIDX)
KVS_EMU_COORD(BlockDim, KVS_EMU_BDIM)
KVS_EMU_COORD(GridDim, KVS_EMU_GDIM)
#undef KVS_EMU_COORD
inline constexpr ThreadIdx thread_idx{};
inline constexpr BlockIdx block_idx{};
inline constexpr BlockDim block_dim{};
inline constexpr GridDim grid_dim{};

} // namespace kvs_emu

#define threadIdx ::kvs_emu::thread_idx
#define blockIdx ::kvs_emu::block_idx
#define blockDim ::kvs_emu::block_dim
#define gridDim ::kvs_emu::grid_dim

#undef __syncthreads
#define __syncthreads() ::kvs_emu::sync_block()

/* The warp functions this library uses, on 32-lane warps. */
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = kvs_emu::warp_size) {
	static_assert(sizeof(T) <= 8, "a shuffled value is at most 8 bytes");
	uint64_t bits = 0;
	memcpy(&bits, &v, sizeof v);
	uint32_t need;
	int lane;
	const uint64_t *vals = kvs_emu::exchange("__shfl_xor_sync", mask, bits, &need, &lane);
	int seg = lane & ~(width - 1), src = seg + ((lane - seg) ^ lane_mask);
	if (src >= seg + width) src = lane; /* outside its segment: a lane keeps its value */
	if (!kvs_emu::blk()->fault && !(need >> src & 1)) {
		kvs_emu::fault("__shfl_xor_sync", " reads a lane outside its mask");
		return v;
	}
	T r;
	memcpy(&r, &vals[src], sizeof r);
	return r;
}

inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
	uint32_t need;
	int lane;
	const uint64_t *vals = kvs_emu::exchange("__reduce_add_sync", mask, v, &need, &lane);
	unsigned s = 0;
	for (int l = 0; l < kvs_emu::warp_size; l++)
		if (need >> l & 1) s += (unsigned)vals[l];
	return s;
}

inline int __reduce_add_sync(unsigned mask, int v) { return (int)__reduce_add_sync(mask, (unsigned)v); }

/* KVS_LAUNCH(grid, block, smem, stream, kernel)(args...) runs kernel. */
#define KVS_LAUNCH(grid, block, smem, stream, ...) \
	::kvs_emu::launch(&__VA_ARGS__, #__VA_ARGS__, (grid), (block), (size_t)(smem), (stream))
/* KVS_DYNAMIC_SHARED(type, name) declares the block's dynamic shared memory. */
#define KVS_DYNAMIC_SHARED(type, name) type *name = (type *)::kvs_emu::dynamic_smem()

#endif
