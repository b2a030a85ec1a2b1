/* ops.cu: the element-wise steps of the forward pass: RMSNorm, RoPE
 * (adjacent pairs or NeoX halves, frequency factors, partial rotation),
 * SwiGLU, GeGLU, add, scale, bias, gather. Transcendentals run in double,
 * as the Go reference does, so that they round alike. */
#include "common.cuh"

/* rmsnorm_kernel: one block of 256 threads per row; the sum of squares in
 * double, each thread's share then a fixed tree. */
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int64_t dim, float eps) {
	__shared__ double part[256];
	const float *row = x + (int64_t)blockIdx.x * dim;
	float *o = out + (int64_t)blockIdx.x * dim;
	double ss = 0;
	for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)(row[i] * row[i]);
	part[threadIdx.x] = ss;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
		__syncthreads();
	}
	float mean = (float)(part[0] / (double)dim);
	float scale = 1.0f / (float)sqrt((double)(mean + eps));
	for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = row[i] * scale * w[i];
}

KVS_EXPORT int kvs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps) {
	if (n < 0 || dim <= 0 || n > 0x7fffffff) return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!out || !x || !weight) return KVS_ERR_ARG;
	KVS_LAUNCH((unsigned)n, 256, 0, kvs_stream(), rmsnorm_kernel)(out, x, weight, dim, eps);
	return kvs_launched("rmsnorm");
}

/* rope_kernel: one thread per (row, head, pair); the angle steps from the
 * position by float multiplication, as ggml and the Go backend do. */
__global__ void rope_kernel(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim,
                            const int32_t *pos, float theta_scale, float scale, const float *freqs, int neox) {
	int64_t half = rope_dim / 2, total = n * heads * half;
	for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = t % half, h = (t / half) % heads, r = t / (half * heads);
		float theta = (float)pos[r];
		for (int64_t k = 0; k < i; k++) theta *= theta_scale;
		float a = theta / scale;
		if (freqs) a /= freqs[i];
		float c = (float)cos((double)a), s = (float)sin((double)a);
		float *head = x + (r * heads + h) * head_dim;
		int64_t p = neox ? i : 2 * i, q = neox ? i + half : 2 * i + 1;
		float x0 = head[p], x1 = head[q];
		head[p] = x0 * c - x1 * s;
		head[q] = x0 * s + x1 * c;
	}
}

KVS_EXPORT int kvs_rope(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
                        float base, float scale, const float *freq_factors, int neox) {
	if (n < 0 || heads <= 0 || head_dim <= 0 || rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 || !(base > 0) ||
	    !(scale > 0))
		return KVS_ERR_ARG;
	if (n == 0) return KVS_OK;
	if (!x || !pos) return KVS_ERR_ARG;
	float ts = (float)pow((double)base, -2.0 / (double)rope_dim);
	KVS_LAUNCH(grid_1d(n * heads * rope_dim / 2, 256), 256, 0, kvs_stream(), rope_kernel)(x, n, heads, head_dim, rope_dim, pos, ts,
	                                                                             scale, freq_factors, neox);
	return kvs_launched("rope");
}

#define ELEMENTWISE(name, body)                                                                                     \
	__global__ void name##_kernel(float *out, const float *a, const float *b, int64_t len, float s) {              \
		for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) \
			body;                                                                                               \
	}

ELEMENTWISE(swiglu, { float g = a[i]; out[i] = g / (1 + (float)exp(-(double)g)) * b[i]; })
ELEMENTWISE(geglu, {
	double g = a[i];
	out[i] = (float)(0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))) * b[i];
})
ELEMENTWISE(add, { out[i] = a[i] + b[i]; })
ELEMENTWISE(scale, { out[i] = a[i] * s; })

static int elementwise(const char *what, int kind, float *out, const float *a, const float *b, int64_t len, float s) {
	if (len < 0) return KVS_ERR_ARG;
	if (len == 0) return KVS_OK;
	if (!out || !a || (kind != 3 && !b)) return KVS_ERR_ARG;
	unsigned g = grid_1d(len, 256);
	cudaStream_t st = kvs_stream();
	switch (kind) {
	case 0: KVS_LAUNCH(g, 256, 0, st, swiglu_kernel)(out, a, b, len, s); break;
	case 1: KVS_LAUNCH(g, 256, 0, st, geglu_kernel)(out, a, b, len, s); break;
	case 2: KVS_LAUNCH(g, 256, 0, st, add_kernel)(out, a, b, len, s); break;
	default: KVS_LAUNCH(g, 256, 0, st, scale_kernel)(out, a, b, len, s); break;
	}
	return kvs_launched(what);
}

KVS_EXPORT int kvs_swiglu(float *out, const float *gate, const float *up, int64_t len) {
	return elementwise("swiglu", 0, out, gate, up, len, 0);
}

KVS_EXPORT int kvs_geglu(float *out, const float *gate, const float *up, int64_t len) {
	return elementwise("geglu", 1, out, gate, up, len, 0);
}

KVS_EXPORT int kvs_add(float *x, const float *y, int64_t len) { return elementwise("add", 2, x, x, y, len, 0); }

KVS_EXPORT int kvs_scale(float *x, int64_t len, float s) { return elementwise("scale", 3, x, x, NULL, len, s); }

__global__ void bias_kernel(float *x, const float *bias, int64_t total, int64_t rows) {
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
		x[i] += bias[i % rows];
}

KVS_EXPORT int kvs_add_bias(float *x, const float *bias, int64_t n, int64_t rows) {
	if (n < 0 || rows < 0) return KVS_ERR_ARG;
	if (n == 0 || rows == 0) return KVS_OK;
	if (!x || !bias) return KVS_ERR_ARG;
	KVS_LAUNCH(grid_1d(n * rows, 256), 256, 0, kvs_stream(), bias_kernel)(x, bias, n * rows, rows);
	return kvs_launched("bias");
}

/* gather_kernel: row j of dst is row rows[j] of src (negative: zeros; the
 * caller checks the upper bound). */
__global__ void gather_kernel(float *dst, const float *src, const int32_t *rows, int64_t width) {
	int64_t j = blockIdx.y, r = rows[j];
	for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < width; c += (int64_t)gridDim.x * blockDim.x)
		dst[j * width + c] = r < 0 ? 0.0f : src[r * width + c];
}

KVS_EXPORT int kvs_gather(float *dst, const float *src, const int32_t *rows, int64_t n, int64_t width) {
	if (n < 0 || width < 0 || n > 65535) return KVS_ERR_ARG;
	if (n == 0 || width == 0) return KVS_OK;
	if (!dst || !src || !rows) return KVS_ERR_ARG;
	unsigned gx = grid_1d(width, 256) > 64 ? 64 : grid_1d(width, 256);
	KVS_LAUNCH(dim3(gx, (unsigned)n), 256, 0, kvs_stream(), gather_kernel)(dst, src, rows, width);
	return kvs_launched("gather");
}
