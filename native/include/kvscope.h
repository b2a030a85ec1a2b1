/*
 * kvscope.h: the C ABI of kvscope's native compute library.
 *
 * One library (libkvscope_cpu.so, .dylib on macOS) holds every operation of
 * the forward pass that the Go engine may hand to native code; the GPU
 * libraries (libkvscope_cuda.so, libkvscope_metal.dylib) export the same
 * functions on device memory (see "devices" below). Go loads it
 * with purego (no cgo), checks kvs_abi_version() == KVS_ABI_VERSION, and
 * falls back to its own kernels when the library is missing, mismatched, or
 * returns KVS_ERR_TYPE for a tensor type.
 *
 * Conventions, for every function:
 *   - Sizes and indices are int64_t; matrices are row-major and dense.
 *   - Functions return KVS_OK (0) or a negative kvs_status. They never
 *     allocate, never keep a pointer after returning, and read and write only
 *     the memory the documented shapes name. The caller guarantees that every
 *     pointer covers its documented shape (the Go side checks slice lengths
 *     before calling); the library checks shapes and enum values and returns
 *     KVS_ERR_ARG for nonsense.
 *   - Every function is thread-safe: callers run several calls at once on
 *     disjoint outputs (Go goroutines, each on a range of output rows).
 *   - Results are deterministic: each output's arithmetic has a fixed order
 *     that does not depend on the batch, the row range, or the SIMD path, so
 *     a row's result is bit-identical alone or in any batch, and on every
 *     path this library runs (scalar, AVX2, AVX-512, NEON).
 */
#ifndef KVSCOPE_H
#define KVSCOPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KVS_API marks the exported functions (the library hides everything else). */
#if defined(_WIN32)
#define KVS_API __declspec(dllexport)
#else
#define KVS_API __attribute__((visibility("default")))
#endif

/* KVS_ABI_VERSION changes whenever any declaration below changes meaning. */
#define KVS_ABI_VERSION 10

/* kvs_status: what a function returns. */
enum kvs_status {
	KVS_OK = 0,
	KVS_ERR_TYPE = -1, /* tensor type or K/V precision not implemented here: fall back */
	KVS_ERR_ARG = -2,  /* a shape, index or enum value is out of range */
	KVS_ERR_PATH = -3,  /* kvs_set_path: this CPU cannot run that path */
	KVS_ERR_DEVICE = -4 /* a device failure (kvs_last_error says which) */
};

/* kvs_abi_version returns KVS_ABI_VERSION as the library was built. */
KVS_API int kvs_abi_version(void);

/* KVS_MAX_THREADS is the most threads kvs_set_threads takes. */
#define KVS_MAX_THREADS 64

/* kvs_set_threads makes the host library's kernels (kvs_quantize_acts,
 * kvs_matmul, kvs_matmul_packed, kvs_swiglu, kvs_add and kvs_attention) split large
 * calls between the calling thread and n-1 threads of the library's own
 * (1, the default: the caller alone). The split never changes a result.
 * The threads spin briefly after each call, watching for the next, then
 * sleep. Concurrent calls are safe: one made while another is split runs
 * on its caller alone. Device libraries accept it and compute on their
 * device. */
KVS_API int kvs_set_threads(int32_t n);

/* ---------------------------------------------------------------- CPU paths */

/* kvs_path: the SIMD code paths. Every path computes the same bits. */
enum kvs_path {
	KVS_PATH_BEST = -1, /* kvs_set_path: the fastest this CPU runs */
	KVS_PATH_SCALAR = 0,
	KVS_PATH_AVX2 = 1,   /* AVX2 + FMA + F16C */
	KVS_PATH_AVX512 = 2,     /* AVX-512 F/BW/VL, plus the AVX2 set */
	KVS_PATH_AVX512VNNI = 3, /* AVX512 plus AVX-512 VNNI */
	KVS_PATH_NEON = 4,       /* arm64 Advanced SIMD (built only on arm64) */
	KVS_NUM_PATHS = 5
};

/* Bits of kvs_cpu_features(). */
#define KVS_CPU_AVX2 (1u << 0)
#define KVS_CPU_FMA (1u << 1)
#define KVS_CPU_F16C (1u << 2)
#define KVS_CPU_AVX512F (1u << 3)
#define KVS_CPU_AVX512BW (1u << 4)
#define KVS_CPU_AVX512VL (1u << 5)
#define KVS_CPU_AVX512VNNI (1u << 6)
#define KVS_CPU_NEON (1u << 7)

/* kvs_cpu_features returns the KVS_CPU_* bits this CPU (and OS, for the
 * AVX register state) supports. */
KVS_API uint32_t kvs_cpu_features(void);

/* kvs_path_supported reports (1 or 0) whether this build and CPU can run
 * path. */
KVS_API int kvs_path_supported(int path);

/* kvs_set_path makes every later call run path (KVS_PATH_BEST: the fastest
 * supported). It returns KVS_ERR_PATH, changing nothing, when the path is not
 * supported. It is meant for tests and benchmarks: calls running while it
 * changes the path may use either path (both give the same bits). */
KVS_API int kvs_set_path(int path);

/* kvs_path returns the path calls run now. */
KVS_API int kvs_path(void);

/* kvs_path_name returns a static name ("scalar", "avx2", "avx512",
 * "avx512vnni", "neon") for path; out-of-range paths give "unknown". */
KVS_API const char *kvs_path_name(int path);

/* ------------------------------------------------------- quantized matmul */

/*
 * Weight types, numbered as ggml's (and engine/quant's Type): F32 0, F16 1,
 * Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13,
 * Q6_K 14, IQ4_NL 20, BF16 30. A weight matrix is `rows` rows of `cols` elements,
 * each row kvs_row_bytes(type, cols) bytes in ggml's block layout, rows one
 * after another: exactly the bytes a GGUF tensor holds.
 *
 * Quantized types multiply by activations rounded to 8 bits: each activation
 * vector is cut into blocks (32 elements for Q4_0..Q8_0 and IQ4_NL, 256 for
 * K-quants) with a float scale dx = max|x|/127 and codes
 * q = round-to-even(x/dx), s = the block's code sum.
 *
 * Q4_0 and Q8_0: per (row, vector), in block order, isum = the exact integer
 * sum of the block's weight codes (Q4_0's offset to signed, q-8) times its
 * activation codes, then acc += float(isum) * (dw*dx): one float sum, which
 * is the result. (kvs_matmul_packed's layout, below, computes 16 rows of it at once.)
 * Q5_0 likewise, its codes offset by 16.
 *
 * Q4_K, Q5_K and Q6_K: per (row, vector), in block order, isum = the exact
 * integer sum over the block's sub-blocks of the sub-block scale times the
 * sum of its weight codes (unsigned: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63
 * less 32) times their activation codes; Q4_K and Q5_K also msum = the
 * exact sum over sub-blocks of the sub-block min times the activation codes'
 * sum. Then acc = acc + float(isum) * (d*dx), and (Q4_K, Q5_K)
 * acc = acc - float(msum) * (dmin*dx): one float sum, the result. (These
 * types are computed on their packed form: kvs_matmul packs each 16-row
 * group into scratch.)
 *
 * The other quantized types: per (row, vector), in block order, the weight
 * codes (IQ4_NL's mapped to its levels,
 * Q3_K's kept unsigned: q+4)
 * times the activation codes (times the sub-block scales, for K-quants) are
 * summed exactly as eight int32 lanes, lane m holding elements 4m..4m+3 of
 * every 32; the lanes are converted to float, multiplied by dw*dx and added
 * to eight float sums. Q4_1 and Q5_1 add (mw*dx)*s (s: the block's code
 * sum) and Q2_K subtracts (dmin*dx)*(mins times sums of 16
 * codes) in a ninth float sum (Q3_K's offset too: (d*dx)*(-4
 * * scales times sums of 16)). The result is the eight sums added as (l, l+4), (l, l+2), (l, l+1),
 * plus the ninth.
 *
 * Float types (F32, F16, BF16) multiply the float activations directly,
 * element j in lane j%16 of sixteen float sums (each product rounded, then
 * added), summed at the end as lanes (l, l+8), then (l, l+4), (l, l+2),
 * (l, l+1). No operation is fused.
 */

/* kvs_row_bytes returns the bytes of one row of cols elements of type, or 0
 * when the type is not implemented or cols is not a positive whole number of
 * its blocks. */
KVS_API int64_t kvs_row_bytes(uint32_t type, int64_t cols);

/* kvs_act_bytes returns the bytes kvs_quantize_acts writes for n activation
 * vectors of cols elements for weights of type: 0 for float types (which
 * read the activations themselves), a negative kvs_status when type or cols
 * is not supported. */
KVS_API int64_t kvs_act_bytes(uint32_t type, int64_t cols, int64_t n);

/* kvs_quantize_acts rounds the n activation vectors x[n][cols] to the 8-bit
 * blocks type's dot products use, writing kvs_act_bytes(type, cols, n) bytes
 * at qx. Vector b's blocks depend on vector b alone. For float types it does
 * nothing. */
KVS_API int kvs_quantize_acts(uint32_t type, const float *x, int64_t cols, int64_t n, void *qx);

/* kvs_matmul computes out[b*rows + r] = dot(row r of w, vector b) for rows
 * r in [row0, row1) and vectors b in [0, n). w holds all `rows` rows (row r at
 * w + r*kvs_row_bytes(type, cols)); x holds the float activations x[n][cols]
 * (read for float types); qx holds kvs_quantize_acts's output for x (read for
 * quantized types; may be NULL for float types). out holds n*rows floats;
 * only the named outputs are written. */
KVS_API int kvs_matmul(uint32_t type, const void *w, int64_t rows, int64_t cols, int64_t row0, int64_t row1,
               const float *x, const void *qx, int64_t n, float *out);

/*
 * The packed layout of Q4_0, Q5_0 and Q8_0 weights: groups of KVS_PACK_ROWS rows
 * (the last padded with zero rows), nb = cols/32 blocks a row, cb = 256 code
 * bytes a block for Q4_0, 320 for Q5_0 and 512 for Q8_0. A group holds its
 * blocks in pairs of 64 + 2*cb bytes, one after another (an odd last block
 * a pair of 64 + cb): first 64 bytes of scales, 16 f16 a block (row r's d
 * at byte 2r of its block's 32; an odd last block's second 32 zero), then
 * both blocks' code bytes; group g starts at g times a group's bytes.
 * Block i's code bytes are chunks of 64
 * (4 for Q4_0, 8 for Q8_0): byte 4r+j of chunk k is row r's qs[4k+j] (Q4_0:
 * elements 4k+j in the low nibble and 16+4k+j in the high one) or qs[4k+j]
 * + 128 (Q8_0, as unsigned). So one vector register of 16 int32 lanes takes
 * four codes of each row, lane r for row r. Q5_0's fifth bits follow its
 * four chunks: byte 4r+j of those 64 has, in bit k, the fifth bit of
 * element 4k+j of row r, and in bit 4+k that of element 16+4k+j.
 *
 * Q4_K, Q5_K and Q6_K: groups of 16 rows likewise, group g at g*nb*B bytes
 * (but for panels, below), nb = cols/256 blocks of B = 2368 (Q4_K), 2880
 * (Q5_K) or 3392 (Q6_K) bytes, one after another. A block starts with 320
 * bytes: the sub-block scales, 16 bytes each (row r's at byte r; 8 sub-blocks
 * of 32 elements, Q6_K 16 of 16, int8), Q4_K/Q5_K's mins (sub-blocks 2p and
 * 2p+1 at bytes 32p+2r and 32p+2r+1), the 16 rows' f16 d, Q4_K/Q5_K's 16 f16
 * dmin, and Q6_K 32 bytes of padding. Then 32 chunks of 64 bytes, byte 4r+j
 * of chunk k holding the low four bits of row r's codes of elements 4k+j (low
 * nibble) and 128+4k+j (high nibble), with the high bits' lines among them:
 * Q5_K's line L (after chunk 4L+3) byte 4r+j bit (k%4 + 4n) for chunk k =
 * 4L+k%4's nibble n; Q6_K's line L (after chunk 2L+1) byte 4r+j bits
 * 2(2(k%2)+n) and up for chunk k = 2L+k%2. A block is so read front to back.
 *
 * Panels (Q4_K, Q5_K, Q6_K): where one group's blocks take more than 40960
 * bytes, the groups are stored in super-groups of 4 (the last may have
 * fewer), and each row of blocks is cut into panels of P blocks (np =
 * ceil(group bytes / 16384) panels, P = ceil(nb / np); the last panel may be
 * narrower). A super-group of k groups holds panel 0 of each of its groups in
 * order, then panel 1 of each, and so on; a group's part of a panel (w
 * blocks) is laid out as a group of w blocks, above. So group g's blocks from
 * i0 (a multiple of P) start at s*4*G(nb) + k*G(i0) + (g%4)*G(w), for
 * super-group s = g/4 and G(n) the bytes of a group of n blocks. A matrix of
 * 16 rows or fewer is one group and needs no reordering.
 */
#define KVS_PACK_ROWS 16

/* KVS_MULTI_MAX is the most matrices one kvs_matmul_packed_n takes. */
#define KVS_MULTI_MAX 8

/* kvs_matmul_packed_n multiplies the same activations by count packed
 * matrices (1 to KVS_MULTI_MAX) of cols columns: matrix i, of type
 * types[i] and rows[i] rows at packed[i], times the n vectors of qx into
 * outs[i] (n*rows[i] floats), all rows of each. The types must round
 * activations alike (kvs_quantize_acts: all K-quants, or all of Q4_0, Q5_0
 * and Q8_0), and qx is that rounding. The matrices' row groups are split
 * among the threads as the rows of one matrix, in one call (a layer's
 * query, key and value products, or its gate and up): each product gives
 * kvs_matmul_packed's bits. */
KVS_API int kvs_matmul_packed_n(int32_t count, const uint32_t *types, const void *const *packed, const int64_t *rows,
                                int64_t cols, const void *qx, int64_t n, float *const *outs);

/* kvs_pack writes groups [g0, g1) of the packed form of a rows×cols weight
 * matrix of type into packed (which holds the whole packed matrix,
 * kvs_packed_bytes), reading w: rows 16*g0 up to 16*g1 (or rows) in the
 * file's layout, row 16*g0 first. KVS_ERR_TYPE for a type without a packed
 * form. */
KVS_API int kvs_pack(uint32_t type, int64_t rows, int64_t cols, int64_t g0, int64_t g1, const void *w, void *packed);

/* kvs_packed_bytes returns the bytes of the packed form of rows×cols
 * weights of type, KVS_ERR_TYPE for a type without one (all but Q4_0, Q5_0,
 * Q8_0, Q4_K, Q5_K and Q6_K), or KVS_ERR_ARG when rows or cols do not fit. */
KVS_API int64_t kvs_packed_bytes(uint32_t type, int64_t rows, int64_t cols);

/* kvs_matmul_packed is kvs_matmul over packed weights (the caller packs them),
 * for rows [row0, row1) (row0 a multiple of KVS_PACK_ROWS, row1 too unless
 * it is rows), with qx from kvs_quantize_acts: the same bits as
 * kvs_matmul on the unpacked weights. */
KVS_API int kvs_matmul_packed(uint32_t type, const void *packed, int64_t rows, int64_t cols, int64_t row0,
                              int64_t row1, const void *qx, int64_t n, float *out);

/* kvs_dequant_rows decodes rows [row0, row1) of w (as for kvs_matmul) into
 * out[(r-row0)*cols + c]: the embedding lookup. Its values are bit-identical
 * to engine/quant.Dequantize's. */
KVS_API int kvs_dequant_rows(uint32_t type, const void *w, int64_t cols, int64_t row0, int64_t row1, float *out);

/* ------------------------------------------------------- element-wise ops */

/* kvs_rmsnorm writes out[r][i] = x[r][i] * s_r * weight[i] for n rows of dim
 * values, s_r = 1/sqrt(mean(x[r]^2) + eps), the sum of squares in double
 * (element i in lane i%8, lanes summed as kvs_matmul's). out may equal x. */
KVS_API int kvs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, int64_t dim, float eps);

/* kvs_rope rotates, in place, the first rope_dim values of each head of x,
 * which holds n rows of heads*head_dim values; row r is at position pos[r].
 * Pair i (i < rope_dim/2) is (2i, 2i+1), or (i, i+rope_dim/2) when neox is
 * nonzero, rotated by theta = pos * base^(-2i/rope_dim) (stepped by float
 * multiplication from pos), divided by scale, and divided by
 * freq_factors[i] when freq_factors is not NULL (rope_dim/2 floats). */
KVS_API int kvs_rope(float *x, int64_t n, int64_t heads, int64_t head_dim, int64_t rope_dim, const int32_t *pos,
             float base, float scale, const float *freq_factors, int neox);

/* kvs_swiglu writes out[i] = silu(gate[i]) * up[i] for i < len, silu(g) =
 * g/(1+exp(-g)), exp in float operations within 2 ulps of e^x (its
 * argument clamped to [-87, 88]), the same bits on every path. out may
 * equal gate or up. */
KVS_API int kvs_swiglu(float *out, const float *gate, const float *up, int64_t len);

/* kvs_add adds y to x: x[i] += y[i] for i < len. */
KVS_API int kvs_add(float *x, const float *y, int64_t len);

/* ------------------------------------------------------------ paged K/V */

/* kvs_sum64 writes to *sum the sum, modulo 2^64, of the words 64-bit
 * little-endian words at p, read with the path's widest loads and split
 * among the library's threads: the read-bandwidth probe `kvscope bench`
 * times (a matrix-vector product cannot read its weights faster). Device
 * libraries return KVS_ERR_TYPE. */
KVS_API int kvs_sum64(const void *p, int64_t words, uint64_t *sum);

/* KVS_MAX_HEAD_DIM is the largest head_dim the K/V functions take, and
 * KVS_MAX_GROUP the most query heads kvs_attention lets share a KV head. */
#define KVS_MAX_HEAD_DIM 1024
#define KVS_MAX_GROUP 256

/* K/V precisions, numbered as engine/kvstore's Precision. */
enum kvs_kv_prec {
	KVS_KV_F32 = 0,
	KVS_KV_F16 = 1,
	KVS_KV_BF16 = 2,
	KVS_KV_Q8_0 = 3,
	KVS_KV_INT8 = 4,
	KVS_KV_INT4 = 5,
	KVS_KV_FP8 = 6
};

/*
 * struct kvs_kv_plane describes one of K or V of an engine/kvstore Store, all
 * layers and blocks, in the store's own memory (see engine/kvstore's doc for
 * the layouts). Layer l, block b is lb = l*blocks + b:
 *   - f32/f16/bf16: data holds [lb][kv_head][slot][head_dim] values (float,
 *     IEEE half, bfloat16 bits).
 *   - q8_0, fp8, int8/int4 values ("row" planes): data holds bytes
 *     [lb][kv_head][slot][row_bytes] (int4: two values a byte, even dim in the
 *     low nibble; int8: signed codes); scale holds [lb][slot][groups], each
 *     group `group` consecutive values of the token's kv_heads*head_dim row
 *     (the last may be shorter): for q8_0 f16 bits, otherwise one byte each:
 *     an E5M3 scale (the f16 of its bits << 7), for int4 a signed scale d
 *     (the f16 of its bits << 8). int4 values are stored rotated, each head's
 *     D values by the orthonormal Walsh-Hadamard transform in blocks of
 *     D & -D, as codes q of d*T[q], T llama.cpp's IQ4_NL table.
 *   - int8/int4/fp8 keys (key != 0): data as row planes, quantized per channel
 *     over key groups of `group` tokens. int4: scale holds, per
 *     [lb][kv_head][groups], 2*head_dim + 3*ceil(head_dim/8) bytes: the low
 *     bytes of each channel's 9-bit scale code (an f16's bits 14..6), the low
 *     bytes of its 10-bit zero code (bits 15..6), then bit planes of the
 *     scales' bit 8 and the zeros' bits 8 and 9; a key is q*s + z.
 *     int8, fp8 (symmetric): scale holds, per [lb][kv_head][groups],
 *     1 + (head_dim+1)/2 bytes: an E5M3 base b, then a 4-bit multiplier m per
 *     channel (even dim in the low nibble): the channel's scale is
 *     b*(m+1)/16. A key group not yet full lives in an f16 residual slot
 *     (see kvs_attention's k_resid).
 * data_per_block and scales_per_block are the elements (bytes for quantized
 * data, values for f32/f16/bf16) of data and of scale per lb (scale's
 * elements: f16 for q8_0, bytes otherwise).
 */
struct kvs_kv_plane {
	int32_t prec;
	int32_t key;
	int32_t layers, blocks, block_size, kv_heads, head_dim;
	int32_t row_bytes, group, groups;
	int64_t data_per_block, scales_per_block;
	const void *data;
	const void *scale;
	const void *zero; /* unused (NULL): int4 keeps no zero points since ABI 9 */
};

/* kvs_kv_write stores n tokens' rows, rows[i] holding kv_heads*head_dim
 * values (head-major), in layer of plane p at slots[i] (block*block_size +
 * slot in block), in row order, rounding as engine/kvstore's Write does
 * (bit-identical bytes). data and scale must be writable. A slot out
 * of range returns KVS_ERR_ARG before anything is written.
 * resid: NULL, except for int8/int4/fp8 keys (p->key), whose key groups are
 * quantized across tokens: resid[i] is then the residual slot of row i's key
 * group (see kvs_attention's k_resid), where the row goes at f16 (int8, fp8: the
 * high byte of each value there, the low byte in data at the token's row,
 * where its quantized byte goes later). Once every token of a group is
 * written, the caller quantizes it with kvs_key_quantize. */
KVS_API int kvs_kv_write(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots,
                         const float *rows, uint8_t *const *resid);

/* kvs_key_quantize quantizes n key groups of an int8/int4/fp8 key plane
 * from their residual slots: group i is key group groups[i] % p->groups of
 * layer-block groups[i] / p->groups, its every token written into resid[i]
 * (kvs_kv_write). Per channel (kv_head, dim) over the group's tokens, as
 * engine/kvstore stores a group when it fills: int4 takes, of the zero codes
 * z0-1..z0+1 around min's (signed E5M4) and for each the scale codes
 * s0-1..s0+1 around (max-zero)/15's (E5M4), the pair with the least
 * squared error, q = round((x-zero)/scale) halves up, clamped to 0..15
 * (engine/kvstore's doc says it exactly); int8 and fp8 take a base
 * b = E5M3(amax/qmax) over the head's channels rounded up (qmax 127, 448),
 * per channel the smallest m in 0..15 with b*(m+1)/16 >= amax_channel/qmax,
 * then q = round_half_away(x/scale) clamped to ±127 or E4M3(x/scale). The
 * slots may be reused after the call (on a device: by later calls). Other
 * planes return KVS_ERR_TYPE. */
KVS_API int kvs_key_quantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid);

/* kvs_key_dequantize is kvs_key_quantize's inverse, to write tokens of a
 * quantized key group again: it decodes group groups[i]'s tokens, rounds
 * them to f16 and stores them in residual slot resid[i] as kvs_kv_write
 * would; the caller then writes the new rows and quantizes the group again. */
KVS_API int kvs_key_dequantize(const struct kvs_kv_plane *p, int64_t n, const int64_t *groups, uint8_t *const *resid);

/*
 * kvs_attention computes, for n rows (query tokens, possibly of different
 * sequences), out = softmax(q·Kᵀ·scale)·V over positions 0..n_pos[r]-1 of the
 * row's sequence (only the last `window` of them when window > 0: a
 * sliding-window layer), per query head h in [head0, head1), reading K and
 * V straight from the blocks its block table names (position p is slot
 * p%block_size of block tables[table_off[r] + p/block_size]).
 *   q, out: [n][heads][head_dim]; query head h reads KV head h/(heads/kv_heads).
 *     Only the heads in [head0, head1) are read and written; head0 and head1
 *     are multiples of heads/kv_heads (whole KV-head groups), so callers
 *     split one row's heads among threads.
 *   n_pos: n counts, each >= 1; table_off: n offsets into tables.
 *   k_resid: for int8/int4/fp8 keys, the residual slot of each table entry's key
 *     groups, k_resid[(table_off[r]+j)*k->groups + g], or NULL where the group
 *     is quantized (full); a slot holds [kv_head][token_in_group][head_dim] f16
 *     values (int8, fp8: only their high bytes, the low bytes in data; int4: whole,
 *     little-endian). NULL for other key precisions.
 *   scratch: kvs_attention_scratch bytes: in the host library, for each of
 *     kvs_threads() threads, (heads/kv_heads)*max(n_pos) floats (at most
 *     window each, with a window), for the scores of the query heads
 *     sharing one KV head (each decoded K and V row serves them all).
 * Scores run in position order: per position the float dot product of the
 * query head with the decoded key row, in the sixteen-lane order of
 * kvs_matmul's float types, times scale (the host library scores a quantized
 * int8/int4 key group with exact integer sums instead: the query times the
 * group's channel scales rounded to 22-bit codes, cpu/attention.c); then the
 * max, exp (in float operations, within 2 ulps, as kvs_swiglu's), their
 * sum in double in position order, and
 * out = sum over positions, in order, of p_t*v_t (each product rounded, then
 * added). The result does not depend on the block size, nor on the head
 * range a call covers.
 */
KVS_API int kvs_attention(const struct kvs_kv_plane *k, const struct kvs_kv_plane *v, int32_t layer, int64_t n,
                  int32_t heads, int32_t head0, int32_t head1, int32_t window, float scale, const float *q, const int32_t *n_pos, const int32_t *tables,
                  const int64_t *table_off, const uint8_t *const *k_resid, float *scratch, float *out);

/* -------------------------------------------------------------- devices */

/*
 * The device ABI. One ABI serves every library: libkvscope_cpu.so (host
 * memory), libkvscope_cuda.so (native/cuda, an NVIDIA GPU) and
 * libkvscope_metal.dylib (native/metal, Apple GPUs) all export every
 * function of this header; kvs_device_kind() says which memory they
 * compute on.
 *
 * In a device library (kvs_device_kind() != KVS_DEVICE_HOST) every array
 * pointer passed to a compute function is device memory from kvs_malloc:
 * weights, activations, quantized activations, outputs, positions, slots,
 * token ids, gather rows, n_pos, tables, table_off, k_resid and resid (arrays
 * of device pointers to residual slots in device memory), frequency
 * factors, scratch, and the data and scale arrays that a struct
 * kvs_kv_plane names. Small descriptor structs (struct kvs_kv_plane itself)
 * are passed by host pointer and read before the call returns. Host memory
 * crosses only through kvs_memcpy_h2d and kvs_memcpy_d2h.
 *
 * A device library queues its work in call order on one stream of its own
 * and returns from a compute function once the arguments it can see on the
 * host (shapes, enum values, plane descriptions) check out: KVS_ERR_ARG and
 * KVS_ERR_TYPE come back at once, as in the host library. Values in device
 * memory cannot be checked before the work runs, so there a slot, token id,
 * gather row or block out of range writes nothing (kvs_kv_write) or zeros
 * (the others) instead of failing. A failure of the device itself (a
 * launch, an out-of-memory, a fault) makes the next kvs_synchronize or
 * kvs_memcpy_d2h return KVS_ERR_DEVICE, and kvs_last_error says what it
 * was. Calls from several threads are serialized by the library (one
 * stream); the per-thread output split of the host library buys nothing
 * there. In the host library every call completes before it returns, and
 * its functions stay thread-safe as above.
 *
 * A device library's results follow the same formulas as the host
 * library's but not its arithmetic order (a GPU sums in trees of its
 * warps): they agree within rounding, not bit for bit, while each row's
 * result still depends on that row alone (no batch-dependent reduction
 * order), so batch invariance holds on every library.
 */

/* kvs_device_kind: what memory a library computes on. */
enum kvs_device_kind {
	KVS_DEVICE_HOST = 0,  /* this process's memory (libkvscope_cpu) */
	KVS_DEVICE_CUDA = 1,  /* an NVIDIA GPU's memory (libkvscope_cuda) */
	KVS_DEVICE_METAL = 2  /* an Apple GPU's memory (libkvscope_metal) */
};

/* kvs_device_kind returns the library's enum kvs_device_kind. */
KVS_API int kvs_device_kind(void);

/* kvs_device_name writes the device's name (as "NVIDIA H100 80GB HBM3, 80 GiB,
 * sm_90"), NUL-terminated and cut to len bytes, into buf. It returns
 * KVS_ERR_DEVICE, with the reason in buf, when the library has no usable
 * device (no GPU, no driver, a driver too old for the library). */
KVS_API int kvs_device_name(char *buf, int64_t len);

/* kvs_malloc allocates bytes (> 0) of device memory, aligned to 256 bytes,
 * into *ptr; KVS_ERR_DEVICE when there is not enough. Its contents are
 * undefined. kvs_free releases memory from kvs_malloc (NULL: nothing). */
KVS_API int kvs_malloc(int64_t bytes, void **ptr);
KVS_API int kvs_free(void *ptr);

/* kvs_memcpy_h2d copies bytes from host memory src to device memory dst,
 * after every call issued before it; src may be reused once it returns.
 * kvs_memcpy_d2h waits for every call issued before it, then copies device
 * memory src to host memory dst, and returns the first device failure since
 * the last kvs_synchronize or kvs_memcpy_d2h (KVS_ERR_DEVICE), if any.
 * kvs_memcpy_d2d copies within the device, in order. kvs_memset sets bytes
 * of device memory to the byte value. */
KVS_API int kvs_memcpy_h2d(void *dst, const void *src, int64_t bytes);
KVS_API int kvs_memcpy_d2h(void *dst, const void *src, int64_t bytes);
KVS_API int kvs_memcpy_d2d(void *dst, const void *src, int64_t bytes);
KVS_API int kvs_memset(void *dst, int value, int64_t bytes);

/* kvs_synchronize waits for every call issued so far and returns KVS_OK or
 * KVS_ERR_DEVICE, the first device failure since the last kvs_synchronize or
 * kvs_memcpy_d2h. */
KVS_API int kvs_synchronize(void);

/* kvs_last_error writes the message of the library's last failure (empty
 * when none), NUL-terminated and cut to len bytes, into buf. */
KVS_API int kvs_last_error(char *buf, int64_t len);

/* ------------------------------------------- element-wise ops on devices */

/* kvs_add_bias adds bias[r] to x[b*rows + r] for n vectors of rows values
 * (a matmul's bias). */
KVS_API int kvs_add_bias(float *x, const float *bias, int64_t n, int64_t rows);

/* kvs_scale multiplies x[i] by s for i < len. */
KVS_API int kvs_scale(float *x, int64_t len, float s);

/* kvs_geglu writes out[i] = gelu(gate[i]) * up[i] for i < len with GELU's
 * tanh approximation 0.5*g*(1 + tanh(sqrt(2/pi)*(g + 0.044715*g^3))), in
 * double (float on a GPU), rounded to float, then times up. out may equal
 * gate or up. */
KVS_API int kvs_geglu(float *out, const float *gate, const float *up, int64_t len);

/* kvs_gather copies row rows[j] of src into row j of dst, n rows of width
 * floats. */
KVS_API int kvs_gather(float *dst, const float *src, const int32_t *rows, int64_t n, int64_t width);

/* kvs_get_rows decodes row ids[i] of the weight matrix w (rows rows of cols
 * elements of type, as for kvs_matmul) into out[i*cols..]: the embedding
 * lookup of n tokens, each row as kvs_dequant_rows decodes it. */
KVS_API int kvs_get_rows(uint32_t type, const void *w, int64_t rows, int64_t cols, const int32_t *ids, int64_t n,
                         float *out);

/* --------------------------------------------------- paged K/V on devices */

/* kvs_kv_supported returns KVS_OK when the library writes, reads and attends
 * over K (key != 0) or V (key == 0) at precision prec, else KVS_ERR_TYPE.
 * Int8/int4 keys (key != 0) are stored per channel, as engine/kvstore does. */
KVS_API int kvs_kv_supported(int32_t prec, int32_t key);

/* kvs_kv_read decodes the n rows at slots[i] of layer of plane p into
 * rows[i] (kv_heads*head_dim values, head-major): kvs_kv_write's inverse up
 * to its rounding, the values engine/kvstore's ReadK/ReadV give. resid: NULL,
 * except for int8/int4/fp8 keys: resid[i] is row i's key group's residual slot,
 * or NULL when the group is quantized. */
KVS_API int kvs_kv_read(const struct kvs_kv_plane *p, int32_t layer, int64_t n, const int32_t *slots, float *rows,
                        const uint8_t *const *resid);

/* kvs_kv_copy_block makes block dst of plane p a copy of block src in every
 * layer (data, scale, zero): copy on write. Key residual slots are the
 * caller's to copy. */
KVS_API int kvs_kv_copy_block(const struct kvs_kv_plane *p, int32_t dst, int32_t src);

/* kvs_attention_scratch returns the bytes of scratch kvs_attention needs for
 * n rows of heads query heads over kv_heads KV heads of head_dim, none
 * attending more than max_pos positions, or a negative kvs_status for
 * shapes it does not take. A device library splits long contexts into
 * partitions whose partial softmax sums and outputs it keeps there; it
 * returns 0 when max_pos needs none, and kvs_attention then takes NULL.
 * kvs_attention's scratch is this many bytes (the host library's: for
 * each of its threads, (heads/kv_heads)*max_pos floats, as above). */
KVS_API int64_t kvs_attention_scratch(int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t max_pos);

#ifdef __cplusplus
}
#endif

#endif
