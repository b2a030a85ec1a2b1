// kernels.metal: the Metal kernels of libkvscope_metal.dylib, mirroring
// native/cuda (matmul.cu, ops.cu, kv.cu, attention.cu) in small: GEMV/GEMM
// for F32, F16, Q4_0 and Q8_0 weights on 8-bit activations (other types
// reach it converted to F16 by the Go side), embedding rows, RMSNorm, RoPE,
// the element-wise ops, K/V write/read for f16 and q8_0, and single-pass
// paged attention with an online softmax (no context split). Metal has no
// double: the sums and transcendentals the CPU library takes in double run
// in float here. shared.h comes first (the Makefile joins them).
#include <metal_stdlib>
using namespace metal;

struct act_blk {
	float d;
	int s;
	char q[32];
};

inline float h2f(ushort h) { return float(as_type<half>(h)); }

inline ushort f16_finite(float x) {
	if (isnan(x)) return 0;
	return as_type<ushort>(half(clamp(x, -65504.0f, 65504.0f)));
}

// One simdgroup a block of 32 activations.
kernel void quantize_acts(device const float *x [[buffer(0)]], device act_blk *qx [[buffer(1)]],
                          uint b [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
	float v = x[b * 32 + lane];
	float d = simd_max(fabs(v)) / 127;
	int q = d == 0 ? 0 : clamp(int(rint(v / d)), -127, 127);
	int s = simd_sum(q);
	qx[b].q[lane] = char(q);
	if (lane == 0) {
		qx[b].d = d;
		qx[b].s = s;
	}
}

inline float block_dot(u32 type, device const uchar *row, long i, device const act_blk *a) {
	int sum = 0;
	if (type == MT_Q4_0) {
		device const uchar *blk = row + i * 18;
		float d = h2f(ushort(blk[0]) | ushort(blk[1]) << 8);
		for (int j = 0; j < 16; j++) {
			sum += (int(blk[2 + j] & 15) - 8) * int(a->q[j]);
			sum += (int(blk[2 + j] >> 4) - 8) * int(a->q[j + 16]);
		}
		return float(sum) * (d * a->d);
	}
	device const uchar *blk = row + i * 34;
	float d = h2f(ushort(blk[0]) | ushort(blk[1]) << 8);
	for (int j = 0; j < 32; j++) sum += int(char(blk[2 + j])) * int(a->q[j]);
	return float(sum) * (d * a->d);
}

// One simdgroup a row, up to 8 vectors at once: lane l takes blocks (or
// elements) l, l+32, ... in order; simd_sum adds the lanes.
kernel void matvec(device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]],
                   device const act_blk *qx [[buffer(2)]], device float *out [[buffer(3)]],
                   constant mat_args &a [[buffer(4)]], uint2 tg [[threadgroup_position_in_grid]],
                   uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
	long r = a.row0 + long(tg.x) * 4 + sg;
	long v0 = long(tg.y) * 8;
	if (r >= a.row1) return;
	int nv = int(min(8L, a.n - v0));
	float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	device const uchar *row = w + r * a.rb;
	if (a.type == MT_F32 || a.type == MT_F16) {
		for (long c = lane; c < a.cols; c += 32) {
			float wv = a.type == MT_F32 ? ((device const float *)row)[c] : h2f(((device const ushort *)row)[c]);
			for (int v = 0; v < nv; v++) acc[v] += wv * x[(v0 + v) * a.cols + c];
		}
	} else {
		long kb = a.cols / 32;
		for (long i = lane; i < kb; i += 32)
			for (int v = 0; v < nv; v++) acc[v] += block_dot(a.type, row, i, qx + (v0 + v) * kb + i);
	}
	for (int v = 0; v < nv; v++) {
		float s = simd_sum(acc[v]);
		if (lane == 0) out[(v0 + v) * a.rows + r] = s;
	}
}

inline float dequant(u32 type, device const uchar *row, long c) {
	if (type == MT_F32) return ((device const float *)row)[c];
	if (type == MT_F16) return h2f(((device const ushort *)row)[c]);
	if (type == MT_Q4_0) {
		device const uchar *blk = row + (c / 32) * 18;
		int j = int(c % 32), q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
		return float(q - 8) * h2f(ushort(blk[0]) | ushort(blk[1]) << 8);
	}
	device const uchar *blk = row + (c / 32) * 34;
	return float(char(blk[2 + c % 32])) * h2f(ushort(blk[0]) | ushort(blk[1]) << 8);
}

kernel void get_rows(device const uchar *w [[buffer(0)]], device const int *ids [[buffer(1)]],
                     device float *out [[buffer(2)]], constant rows_args &a [[buffer(3)]],
                     uint2 gid [[thread_position_in_grid]]) {
	long c = gid.x, i = gid.y;
	if (c >= a.cols) return;
	long id = a.use_ids ? long(ids[i]) : a.row0 + i;
	out[i * a.cols + c] = id < 0 || id >= a.rows ? 0.0f : dequant(a.type, w + id * a.rb, c);
}

kernel void rmsnorm(device float *out [[buffer(0)]], device const float *x [[buffer(1)]],
                    device const float *w [[buffer(2)]], constant norm_args &a [[buffer(3)]],
                    uint r [[threadgroup_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
	threadgroup float part[8];
	device const float *row = x + long(r) * a.dim;
	device float *o = out + long(r) * a.dim;
	float ss = 0;
	for (long i = t; i < a.dim; i += 256) ss += row[i] * row[i];
	ss = simd_sum(ss);
	if (lane == 0) part[sg] = ss;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float total = 0;
	for (int k = 0; k < 8; k++) total += part[k];
	float scale = 1.0f / sqrt(total / float(a.dim) + a.eps);
	for (long i = t; i < a.dim; i += 256) o[i] = row[i] * scale * w[i];
}

kernel void rope(device float *x [[buffer(0)]], device const int *pos [[buffer(1)]],
                 device const float *freqs [[buffer(2)]], constant rope_args &a [[buffer(3)]],
                 uint gid [[thread_position_in_grid]]) {
	long half_ = a.rope_dim / 2, t = gid;
	if (t >= a.n * a.heads * half_) return;
	long i = t % half_, h = (t / half_) % a.heads, r = t / (half_ * a.heads);
	float theta = float(pos[r]);
	for (long k = 0; k < i; k++) theta *= a.theta_scale;
	float an = theta / a.scale;
	if (a.has_freqs) an /= freqs[i];
	float c = precise::cos(an), s = precise::sin(an);
	device float *head = x + (r * a.heads + h) * a.head_dim;
	long p = a.neox ? i : 2 * i, q = a.neox ? i + half_ : 2 * i + 1;
	float x0 = head[p], x1 = head[q];
	head[p] = x0 * c - x1 * s;
	head[q] = x0 * s + x1 * c;
}

kernel void elementwise(device float *out [[buffer(0)]], device const float *a [[buffer(1)]],
                        device const float *b [[buffer(2)]], constant ew_args &e [[buffer(3)]],
                        uint gid [[thread_position_in_grid]]) {
	long i = gid;
	if (i >= e.len) return;
	switch (e.op) {
	case 0: out[i] = a[i] / (1 + precise::exp(-a[i])) * b[i]; break;
	case 1: {
		float g = a[i];
		out[i] = 0.5f * g * (1 + precise::tanh(0.7978845608f * (g + 0.044715f * g * g * g))) * b[i];
		break;
	}
	case 2: out[i] = a[i] + b[i]; break;
	case 3: out[i] = a[i] * e.s; break;
	default: out[i] = a[i] + b[i % e.rows]; break;
	}
}

kernel void gather(device float *dst [[buffer(0)]], device const float *src [[buffer(1)]],
                   device const int *rows [[buffer(2)]], constant rows_args &a [[buffer(3)]],
                   uint2 gid [[thread_position_in_grid]]) {
	long c = gid.x, j = gid.y;
	if (c >= a.width) return;
	long r = rows[j];
	dst[j * a.width + c] = r < 0 ? 0.0f : src[r * a.width + c];
}

inline float kv_value(constant plane_args &p, device const uchar *data, device const ushort *scale, long lb, int h,
                      int t, int d) {
	int D = p.head_dim, B = p.block_size;
	if (p.prec == MKV_F16) return h2f(((device const ushort *)data)[lb * p.data_per_block + (long(h) * B + t) * D + d]);
	device const uchar *src = data + lb * p.data_per_block + (long(h) * B + t) * p.row_bytes;
	int g = (h * D + d) / p.group;
	return float(char(src[d])) * h2f(scale[lb * p.scales_per_block + long(t) * p.groups + g]);
}

// One simdgroup a token row: f16, or q8_0 with engine/kvstore's rounding.
kernel void kv_write(device uchar *data [[buffer(0)]], device ushort *scale [[buffer(1)]],
                     device const int *slots [[buffer(2)]], device const float *rows [[buffer(3)]],
                     constant plane_args &p [[buffer(4)]], uint i [[threadgroup_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
	long slot = slots[i], total = long(p.blocks) * p.block_size;
	if (slot < 0 || slot >= total) return;
	int D = p.head_dim, B = p.block_size, row = p.kv_heads * D;
	long lb = long(p.layer) * p.blocks + slot / B, t = slot % B;
	device const float *x = rows + long(i) * row;
	if (p.prec == MKV_F16) {
		for (int e = lane; e < row; e += 32)
			((device ushort *)data)[lb * p.data_per_block + (long(e / D) * B + t) * D + e % D] = as_type<ushort>(half(x[e]));
		return;
	}
	long base = lb * p.data_per_block + t * p.row_bytes, stride = long(B) * p.row_bytes;
	for (int g = 0; g < p.groups; g++) {
		int lo = g * p.group, hi = min(lo + p.group, row);
		float amax = 0;
		for (int e = lo + lane; e < hi; e += 32) amax = max(amax, fabs(x[e]));
		amax = simd_max(amax);
		float dq = amax / 127, id = dq != 0 ? 1 / dq : 0;
		if (lane == 0) scale[lb * p.scales_per_block + t * p.groups + g] = f16_finite(dq);
		for (int e = lo + lane; e < hi; e += 32) {
			float v = x[e] * id;
			int q = v >= 127 ? 127 : v <= -127 ? -127 : v >= 0 ? int(v + 0.5f) : int(v - 0.5f);
			data[base + (e / D) * stride + e % D] = uchar(char(q));
		}
	}
}

kernel void kv_read(device const uchar *data [[buffer(0)]], device const ushort *scale [[buffer(1)]],
                    device const int *slots [[buffer(2)]], device float *rows [[buffer(3)]],
                    constant plane_args &p [[buffer(4)]], uint i [[threadgroup_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
	long slot = slots[i], total = long(p.blocks) * p.block_size;
	int D = p.head_dim, row = p.kv_heads * D;
	for (int e = lane; e < row; e += 32) {
		float v = 0;
		if (slot >= 0 && slot < total)
			v = kv_value(p, data, scale, long(p.layer) * p.blocks + slot / p.block_size, e / D, int(slot % p.block_size), e % D);
		rows[long(i) * row + e] = v;
	}
}

// Paged attention, one simdgroup a (row, query head): positions in chunks
// of 32, lane l scoring position chunk+l; an online softmax (running max
// and sum, rescaled per chunk); lane l accumulates dimensions l, l+32, ...
kernel void attention(device const uchar *kd [[buffer(0)]], device const ushort *ks [[buffer(1)]],
                      device const uchar *vd [[buffer(2)]], device const ushort *vs [[buffer(3)]],
                      device const float *q [[buffer(4)]], device const int *n_pos [[buffer(5)]],
                      device const int *tables [[buffer(6)]], device const long *table_off [[buffer(7)]],
                      device float *out [[buffer(8)]], constant plane_args &K [[buffer(9)]],
                      constant plane_args &V [[buffer(10)]], constant attn_args &a [[buffer(11)]],
                      uint2 tg [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
	long r = tg.x;
	int hq = a.head0 + int(tg.y), kvh = hq / a.group, D = K.head_dim, B = K.block_size;
	int len = n_pos[r], first = a.window > 0 && len > a.window ? len - a.window : 0;
	device const int *table = tables + table_off[r];
	device const float *qh = q + (r * a.heads + hq) * D;
	float acc[32];
	for (int j = 0; j < 32; j++) acc[j] = 0;
	float m = -INFINITY, sum = 0;
	for (int c0 = first; c0 < len; c0 += 32) {
		int t = c0 + int(lane);
		float s = -INFINITY;
		if (t < len) {
			int blk = table[t / B];
			if (blk >= 0 && blk < K.blocks) {
				long lb = long(K.layer) * K.blocks + blk;
				float dot = 0;
				for (int d = 0; d < D; d++) dot += qh[d] * kv_value(K, kd, ks, lb, kvh, t % B, d);
				s = dot * a.scale;
			}
		}
		float cm = simd_max(s), nm = max(m, cm);
		float alpha = m == -INFINITY ? 0.0f : precise::exp(m - nm);
		float p = s == -INFINITY ? 0.0f : precise::exp(s - nm);
		sum = sum * alpha + simd_sum(p);
		m = nm;
		for (int j = 0; j * 32 < D; j++) acc[j] *= alpha;
		int cn = min(32, len - c0);
		for (int k = 0; k < cn; k++) {
			float pk = simd_shuffle(p, ushort(k));
			int tk = c0 + k, blk = table[tk / B];
			if (pk == 0 || blk < 0 || blk >= V.blocks) continue;
			long lb = long(V.layer) * V.blocks + blk;
			for (int j = 0; j * 32 + int(lane) < D; j++)
				acc[j] += pk * kv_value(V, vd, vs, lb, kvh, tk % B, j * 32 + int(lane));
		}
	}
	device float *o = out + (r * a.heads + hq) * D;
	for (int j = 0; j * 32 + int(lane) < D; j++) o[j * 32 + lane] = sum > 0 ? acc[j] / sum : 0.0f;
}
