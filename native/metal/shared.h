/* shared.h: the argument blocks the Objective-C shim (kvscope_metal.m)
 * hands the Metal kernels (kernels.metal) with setBytes, in one layout for
 * both sides. The Makefile puts this file in front of kernels.metal, and
 * the shim compiles the two at load time (newLibraryWithSource). */
#ifndef KVS_METAL_SHARED_H
#define KVS_METAL_SHARED_H

#ifdef __METAL_VERSION__
typedef int i32;
typedef long i64;
typedef uint u32;
#else
#include <stdint.h>
typedef int32_t i32;
typedef int64_t i64;
typedef uint32_t u32;
#endif

/* Weight types (kvscope.h), as far as the Metal kernels go. */
#define MT_F32 0
#define MT_F16 1
#define MT_Q4_0 2
#define MT_Q8_0 8

/* K/V precisions (kvscope.h's enum kvs_kv_prec) the Metal kernels store. */
#define MKV_F16 1
#define MKV_Q8_0 3

struct mat_args {
	u32 type;
	i32 pad;
	i64 rows, row0, row1, cols, rb, n;
};

/* ew_args: element-wise ops; op 0 swiglu, 1 geglu, 2 add, 3 scale, 4 bias. */
struct ew_args {
	i32 op;
	float s;
	i64 len, rows;
};

struct norm_args {
	i64 dim;
	float eps;
	i32 pad;
};

struct rope_args {
	i64 n, heads, head_dim, rope_dim;
	float theta_scale, scale;
	i32 neox, has_freqs;
};

struct rows_args {
	u32 type;
	i32 use_ids;
	i64 rows, cols, rb, row0, width;
};

/* plane: struct kvs_kv_plane without its pointers (passed as buffers). */
struct plane_args {
	i32 prec, layers, blocks, block_size, kv_heads, head_dim, row_bytes, group, groups, layer;
	i64 data_per_block, scales_per_block;
};

struct attn_args {
	i32 heads, head0, group, window;
	float scale;
	i32 pad;
};

#endif
