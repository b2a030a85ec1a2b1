/* pool.c: the library's threads. kvs_set_threads(n) makes the heavy
 * kernels (dispatch.c) split their work between the calling thread and n-1
 * threads of the library's own, as llama.cpp's thread pool does.
 *
 * Why here and not in Go: Go goroutines calling into C from two cores left
 * both of Go's Ps in system calls, and the runtime's monitor, finding no
 * idle P, handed each one off to a freshly woken thread every 20 µs. On a
 * 2-core machine that third thread took turns with the two computing ones:
 * a decode step's matrix products read their weights at about 20 GB/s
 * where the same kernel on plain threads read 28 to 31. Now one Go thread
 * makes one call and the library's threads do the rest.
 *
 * A job is [0, total) cut into one contiguous region per worker. A worker
 * takes ranges from the front of its own region, a quarter of what is left
 * at a time, so that it streams through one run of memory (the kernels'
 * prefetches past the end of one range fetch the start of the next); a
 * worker whose region is empty steals half of what is left from the back
 * of another's, so that one that started late does not hold the call up.
 * After a job the helpers spin for 2 ms watching for the next (a decode
 * step's operations come microseconds apart), then sleep on a condition
 * variable. A call made while another runs (another engine's thread) runs
 * alone on its caller. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define relax() _mm_pause()
#elif defined(__aarch64__)
#define relax() __asm__ volatile("yield")
#else
#define relax() ((void)0)
#endif

struct region {
	_Atomic uint64_t span; /* [lo, hi) as lo | hi << 32 */
	char pad[56];
};

struct job {
	kvs_par_fn fn;
	void *ctx;
	int64_t unit;
	int nw;
	struct region reg[KVS_MAX_THREADS];
	_Atomic int joined;
	char pad[60];
	_Atomic int64_t done;
	_Atomic int bad;
};

static struct {
	pthread_mutex_t call; /* held while a job runs */
	pthread_mutex_t mu;   /* with cv, for sleeping helpers */
	pthread_cond_t cv;
	int started;
	_Atomic int threads;
	_Atomic uint64_t gen; /* bumped for each job */
	_Atomic(struct job *) job;
	_Atomic int sleeping, inside;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 1, 0, 0, 0, 0};

int kvs_set_threads(int32_t n) {
	if (n < 1 || n > KVS_MAX_THREADS) return KVS_ERR_ARG;
	atomic_store(&pool.threads, n);
	return KVS_OK;
}

int kvs_threads(void) { return atomic_load(&pool.threads); }

static inline uint64_t span(int64_t lo, int64_t hi) { return (uint64_t)lo | (uint64_t)hi << 32; }

/* take cuts a range off region r, from the front (own) or the back, of
 * what is left / div rounded to units; 0 when r is empty. */
static int take(struct job *j, struct region *r, int own, int64_t div, int64_t *a, int64_t *b) {
	int64_t u = j->unit;
	uint64_t v = atomic_load(&r->span);
	for (;;) {
		int64_t lo = (int64_t)(v & 0xffffffff), hi = (int64_t)(v >> 32);
		if (lo >= hi) return 0;
		int64_t n = (hi - lo) / div / u * u;
		if (n < u) n = u;
		if (n > hi - lo) n = hi - lo;
		if (own) {
			*a = lo, *b = lo + n;
			if (atomic_compare_exchange_weak(&r->span, &v, span(*b, hi))) return 1;
		} else {
			*a = hi - n, *b = hi;
			if (*a % u && *a > lo) *a = *a / u * u; /* keep starts on units (the last unit may be short) */
			if (atomic_compare_exchange_weak(&r->span, &v, span(lo, *a))) return 1;
		}
	}
}

static void run(struct job *j, int k, int64_t a, int64_t b) {
	int rc = j->fn(j->ctx, k, a, b);
	if (rc) atomic_store(&j->bad, rc);
	atomic_fetch_add(&j->done, b - a);
}

/* work runs worker k's region, then steals until every region is empty. */
static void work(struct job *j, int k) {
	int64_t a, b;
	while (take(j, &j->reg[k], 1, 4, &a, &b)) run(j, k, a, b);
	for (int stole = 1; stole;) {
		stole = 0;
		for (int i = 1; i < j->nw; i++) {
			int o = (k + i) % j->nw;
			if (take(j, &j->reg[o], 0, 2, &a, &b)) run(j, k, a, b), stole = 1;
		}
	}
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *helper(void *arg) {
	(void)arg;
	uint64_t seen = atomic_load(&pool.gen);
	for (;;) {
		double t0 = now();
		for (int i = 0; atomic_load(&pool.gen) == seen; i++) {
			relax();
			if ((i & 1023) == 1023 && now() - t0 > 2e-3) {
				pthread_mutex_lock(&pool.mu);
				atomic_fetch_add(&pool.sleeping, 1);
				while (atomic_load(&pool.gen) == seen) pthread_cond_wait(&pool.cv, &pool.mu);
				atomic_fetch_sub(&pool.sleeping, 1);
				pthread_mutex_unlock(&pool.mu);
				t0 = now();
			}
		}
		seen = atomic_load(&pool.gen);
		/* inside counts helpers that may hold the job's address: the
		 * caller, whose stack holds the job, waits for none before it
		 * returns. Counted before the load, so the caller cannot miss one. */
		atomic_fetch_add(&pool.inside, 1);
		struct job *j = atomic_load(&pool.job);
		if (j) {
			int k = atomic_fetch_add(&j->joined, 1) + 1;
			if (k < j->nw) work(j, k);
		}
		atomic_fetch_sub(&pool.inside, 1);
	}
	return NULL;
}

int kvs_par(int64_t total, int64_t unit, int split, kvs_par_fn fn, void *ctx) {
	int nw = kvs_threads();
	if (unit < 1) unit = 1;
	int64_t units = (total + unit - 1) / unit;
	if (units < nw) nw = (int)units;
	if (nw < 2 || !split || total > 0xffffffffLL || pthread_mutex_trylock(&pool.call) != 0) return fn(ctx, 0, 0, total);
	while (pool.started < nw - 1) {
		pthread_t t;
		if (pthread_create(&t, NULL, helper, NULL) != 0) break;
		pthread_detach(t);
		pool.started++;
	}
	if (nw > pool.started + 1) nw = pool.started + 1;
	struct job j = {.fn = fn, .ctx = ctx, .unit = unit, .nw = nw};
	for (int k = 0; k < nw; k++) {
		int64_t lo = units * k / nw * unit, hi = units * (k + 1) / nw * unit;
		if (hi > total) hi = total;
		atomic_store(&j.reg[k].span, span(lo, hi < lo ? lo : hi));
	}
	atomic_store(&pool.job, &j);
	atomic_fetch_add(&pool.gen, 1);
	if (atomic_load(&pool.sleeping) > 0) {
		pthread_mutex_lock(&pool.mu);
		pthread_cond_broadcast(&pool.cv);
		pthread_mutex_unlock(&pool.mu);
	}
	work(&j, 0);
	while (atomic_load(&j.done) < total) relax();
	atomic_store(&pool.job, (struct job *)NULL);
	while (atomic_load(&pool.inside) > 0) relax();
	pthread_mutex_unlock(&pool.call);
	return atomic_load(&j.bad);
}
