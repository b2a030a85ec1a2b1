/* packed_layout.h: where each part of a packed group's block lies, shared
 * by the packer (packed_pack.c) and the kernels (packed.c, packed_k.c).
 * kvscope.h describes the layouts in words. */
#ifndef KVS_PACKED_LAYOUT_H
#define KVS_PACKED_LAYOUT_H

#include <stdint.h>

/* 32-element types (Q4_0, Q5_0, Q8_0): a group holds nb blocks of code
 * bytes (pk32_code_bytes each), then nb blocks of 16 f16 scales (32 bytes). */
static inline int64_t pk32_code_bytes(uint32_t type) { return type == 2 ? 256 : type == 6 ? 320 : 512; }

/* K-quants (Q4_K 12, Q5_K 13, Q6_K 14): a group holds nb blocks of
 * pkk_block_bytes each, one after another; in each block, from its start:
 * 2048 bytes of low code nibbles (32 chunks of 64), the high code bits
 * (Q5_K 512 bytes, Q6_K 1024), the sub-block scales (16 bytes a sub-block,
 * byte r row r's), Q4_K/Q5_K's mins (128 bytes), the rows' f16 d (32
 * bytes), Q4_K/Q5_K's f16 dmin (32), and Q6_K 32 bytes of padding, so that
 * every block starts on a 64-byte line. */
enum {
	PKK_CODES = 0,
	PKK_HIGH = 2048,
};
static inline int64_t pkk_high_bytes(uint32_t t) { return t == 13 ? 512 : t == 14 ? 1024 : 0; }
static inline int64_t pkk_sub_blocks(uint32_t t) { return t == 14 ? 16 : 8; }
static inline int64_t pkk_scales(uint32_t t) { return PKK_HIGH + pkk_high_bytes(t); }
static inline int64_t pkk_mins(uint32_t t) { return pkk_scales(t) + 16 * pkk_sub_blocks(t); }
static inline int64_t pkk_d(uint32_t t) { return pkk_mins(t) + (t == 14 ? 0 : 128); }
static inline int64_t pkk_dmin(uint32_t t) { return pkk_d(t) + 32; }
static inline int64_t pkk_block_bytes(uint32_t t) { return t == 14 ? 3392 : pkk_dmin(t) + 32; }

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
