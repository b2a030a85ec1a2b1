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

/* pk_row_blocks is how many blocks a row of cols values holds: 256 values
 * a K-quant block (types 12 to 14), 32 a block of the others. */
static inline int64_t pk_row_blocks(uint32_t t, int64_t cols) { return cols / (t >= 12 ? 256 : 32); }

/* pk_blocks_bytes is the bytes of a group of n blocks a row. */
static inline int64_t pk_blocks_bytes(uint32_t t, int64_t n) {
	return t >= 12 ? n * pkk_block_bytes(t) : pk32_group_bytes(t, n);
}

/* Panels (K-quants). A group's blocks are read once for each vector's
 * activations, which the kernels read again for every group: where a group
 * is longer than about the L1 cache (PK_PANEL_MIN bytes), streaming it
 * evicts the activations before the next group needs them: a one-vector
 * product of a 2048x5632 Q4_K matrix read its weights from memory 10-20%
 * slower than 5632x2048 on one core, and 12-15% faster when the kernel
 * read only 3 KB of activations (wrong sums, the same weights). Such a
 * matrix is stored in super-groups of PK_SUPER groups (the last may have
 * fewer), each cut into panels of pk_panel_blocks blocks (about PK_PANEL
 * bytes of a group; the last panel may be narrower): a super-group holds panel 0 of each of its groups, then
 * panel 1 of each, and so on, each group's part of a panel laid out as a
 * group of that many blocks (its segment). The kernels read a super-group
 * front to back, carrying each group's sums from panel to panel in the
 * outputs, so a panel's activations stay in L1 across the super-group's
 * groups and every core still streams one run of memory. A matrix whose
 * groups are short has one panel and groups one after another. */
enum { PK_SUPER = 4, PK_PANEL = 16384, PK_PANEL_MIN = 40960 };

/* pk_panel_blocks is how many blocks of a row one panel holds (nb: no
 * panels). Q4_0, Q5_0 and Q8_0 keep their groups whole: their kernels
 * (packed.c) taking panels, a 5632x2048 Q8_0 product from memory, with no
 * panels in it, ran at 0.81 of kvs_sum64's rate against 0.98 before. */
static inline int64_t pk_panel_blocks(uint32_t t, int64_t nb) {
	int64_t gb = pk_blocks_bytes(t, nb);
	if (t < 12 || gb <= PK_PANEL_MIN) return nb;
	int64_t np = (gb + PK_PANEL - 1) / PK_PANEL;
	return (nb + np - 1) / np;
}

/* pk_super is how many groups a super-group holds (1: no panels). */
static inline int64_t pk_super(uint32_t t, int64_t nb) { return pk_panel_blocks(t, nb) < nb ? PK_SUPER : 1; }

/* pk_segment is where group g's blocks from i0 (a multiple of
 * pk_panel_blocks) to the end of their panel lie, for groups groups of nb
 * blocks a row. */
static inline int64_t pk_segment(uint32_t t, int64_t groups, int64_t nb, int64_t g, int64_t i0) {
	const int64_t pb = pk_panel_blocks(t, nb), sg = pk_super(t, nb), s = g / sg;
	const int64_t k = groups - s * sg < sg ? groups - s * sg : sg, w = nb - i0 < pb ? nb - i0 : pb;
	return s * sg * pk_blocks_bytes(t, nb) + k * pk_blocks_bytes(t, i0) + g % sg * pk_blocks_bytes(t, w);
}

/* PK_SEGMENTS runs S(g, i0, w, off) for each segment of groups [g0, g1)
 * of a matrix of groups groups (nb blocks a row), in the order they lie
 * in memory: segment (g, i0) of w blocks at byte off. */
#define PK_SEGMENTS(t, groups, nb, g0, g1, S)                                                                          \
	do {                                                                                                           \
		const int64_t pb_ = pk_panel_blocks(t, nb), sg_ = pk_super(t, nb);                                     \
		for (int64_t s_ = (g0) - (g0) % sg_; s_ < (g1); s_ += sg_)                                             \
			for (int64_t i0_ = 0; i0_ < (nb); i0_ += pb_)                                                  \
				for (int64_t g_ = s_ > (g0) ? s_ : (g0); g_ < s_ + sg_ && g_ < (g1); g_++)             \
					S(g_, i0_, ((nb) - i0_ < pb_ ? (nb) - i0_ : pb_),                              \
					  pk_segment(t, groups, nb, g_, i0_));                                         \
	} while (0)

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
