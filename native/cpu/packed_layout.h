/* packed_layout.h: where each part of a packed group's block lies, shared
 * by the packer (packed_pack.c) and the kernels (packed.c, packed_k.c).
 * kvscope.h describes the layouts in words. */
#ifndef KVS_PACKED_LAYOUT_H
#define KVS_PACKED_LAYOUT_H

#include <stdint.h>

/* 32-element types (Q4_0, Q5_0, Q8_0): a group holds its nb blocks in
 * pairs, one after another: a line of both blocks' 16 f16 scales (32 bytes
 * a block), then both blocks' code bytes (pk32_code_bytes each); an odd
 * last block is a pair of its own, the second half of its scale line
 * zero. So a group is read front to back, one run of memory. */
static inline int64_t pk32_code_bytes(uint32_t type) { return type == 2 ? 256 : type == 6 ? 320 : 512; }
static inline int64_t pk32_pair_bytes(uint32_t t) { return 64 + 2 * pk32_code_bytes(t); }
/* pk32_group_bytes is a group's bytes for nb blocks a row. */
static inline int64_t pk32_group_bytes(uint32_t t, int64_t nb) {
	return nb / 2 * pk32_pair_bytes(t) + nb % 2 * (64 + pk32_code_bytes(t));
}
/* pk32_codes and pk32_scales are where block i's codes and scales start
 * in its group. */
static inline int64_t pk32_codes(uint32_t t, int64_t i) { return i / 2 * pk32_pair_bytes(t) + 64 + i % 2 * pk32_code_bytes(t); }
static inline int64_t pk32_scales(uint32_t t, int64_t i) { return i / 2 * pk32_pair_bytes(t) + 32 * (i % 2); }

/* K-quants (Q4_K 12, Q5_K 13, Q6_K 14): a group holds nb blocks of
 * pkk_block_bytes each, one after another. A block is read front to back:
 * first PKK_META bytes of what the block's end needs (the sub-block
 * scales, 16 bytes a sub-block, byte r row r's; Q4_K/Q5_K's mins, 128
 * bytes; the rows' f16 d, 32 bytes; Q4_K/Q5_K's f16 dmin, 32; Q6_K 32
 * bytes of padding), then 32 chunks of 64 bytes of low code nibbles, with
 * the high code bits' lines among them: Q5_K's line L after chunk 4L+3,
 * Q6_K's after chunk 2L+1. So the kernels' loads run through memory in
 * one direction, as the hardware prefetcher follows best (with the scales
 * after the codes, a 5632×2048 Q4_K product streamed from memory at 71-73%
 * of kvs_sum64's rate on one core, 79-86% with them first). */
enum {
	PKK_META = 320,
};
static inline int64_t pkk_high_bytes(uint32_t t) { return t == 13 ? 512 : t == 14 ? 1024 : 0; }
static inline int64_t pkk_sub_blocks(uint32_t t) { return t == 14 ? 16 : 8; }
static inline int64_t pkk_scales(uint32_t t) { return (void)t, 0; }
static inline int64_t pkk_mins(uint32_t t) { return 16 * pkk_sub_blocks(t); }
static inline int64_t pkk_d(uint32_t t) { return pkk_mins(t) + (t == 14 ? 0 : 128); }
static inline int64_t pkk_dmin(uint32_t t) { return pkk_d(t) + 32; }
static inline int64_t pkk_block_bytes(uint32_t t) { return PKK_META + 2048 + pkk_high_bytes(t); }
/* pkk_code is where chunk k (0..31) of a block's low nibbles starts. */
static inline int64_t pkk_code(uint32_t t, int k) {
	return PKK_META + 64 * (t == 13 ? k + k / 4 : t == 14 ? k + k / 2 : k);
}
/* pkk_high is where high-bit line L (Q5_K 0..7, Q6_K 0..15) starts. */
static inline int64_t pkk_high(uint32_t t, int L) { return PKK_META + 64 * (t == 13 ? 5 * L + 4 : 3 * L + 2); }

/* KVS_TILES runs T(nv) with nv = min(left, 8) as a constant, so that each
 * kernel's tile is inlined with its vector count known: the packed
 * kernels' loop over vectors, eight at a time. */
#define KVS_TILES(left, T)                                                                                             \
	switch ((left) < 8 ? (left) : 8) {                                                                             \
	case 1: T(1); break;                                                                                           \
	case 2: T(2); break;                                                                                           \
	case 3: T(3); break;                                                                                           \
	case 4: T(4); break;                                                                                           \
	case 5: T(5); break;                                                                                           \
	case 6: T(6); break;                                                                                           \
	case 7: T(7); break;                                                                                           \
	default: T(8);                                                                                                 \
	}

#endif
