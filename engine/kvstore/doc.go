// Package kvstore holds the K and V tensors of the paged KV cache, in
// fixed-size blocks, at a chosen precision per K and V.
//
// It is storage only. Which sequence owns a block, reference counts, prefix
// hashes, eviction and block tables belong to the block pool (engine/kvcache);
// the model writes and reads through Store. No Go library stores attention
// K/V in these layouts (llama.cpp's Q8_0, KIVI's per-channel keys, FP8 E4M3),
// so the package implements them, using engine/quant's f16 and bf16
// conversions.
//
// # Layout
//
// A block id names the same slot in every layer, as in vLLM: one block holds
// its tokens for all layers, and one block table serves a sequence's every
// layer. For each layer there is one K array and one V array of Blocks
// blocks. A block holds [kvHead][tokenInBlock][headDim] values, so one head's
// keys for a block are contiguous. Quantized data keeps that order (Int4 packs
// two values a byte, the even dim in the low nibble); scales sit in a
// parallel array indexed by layer and block (there is no zero-point array):
//
//   - Q8_0, and Int8, Int4 and FP8 values: [tokenInBlock][group], where a
//     group is a run of a token's row of KVHeads*HeadDim values
//     (head-major; for Int4, of each head's values rotated).
//   - Int4 keys: [kvHead][keyGroup] of 2*HeadDim + 3*ceil(HeadDim/8) bytes:
//     per channel d the low byte of its 9-bit scale code, then of its 10-bit
//     zero code, then three bit planes (bit d&7 of byte d>>3): scale bit 8,
//     zero bit 8, zero sign.
//   - Int8 and FP8 keys: [kvHead][keyGroup] of 1 + ceil(HeadDim/2) bytes: a
//     base scale, then a 4-bit multiplier per channel (the even dim in the
//     low nibble).
//
// ReadK and ReadV decode a block's first n tokens into [kvHead][n][headDim].
//
// # Precisions
//
// Q8_0's scales are f16, as llama.cpp's. Int8, Int4 and FP8 scales and zero
// points are f16 values cut to their top bits, so that every backend
// decodes them with a shift and an f16 conversion. Int8 and FP8 scales are
// unsigned E5M3 (an f16's bits 14..7: 2^-17 to 61440, three mantissa
// bits), rounded up, so that no value of its group lies past the largest
// code (NVFP4's rule), except that an Int8 value group takes the code
// below when that codes the group with a smaller squared error. Int4 key
// scales are unsigned E5M4 (bits 14..6) and zero points signed E5M4 (bits
// 15..6); Int4 value scales are signed E5M2 (bits 15..8, FP8's other
// format). Int4 searches its codes by squared error (below). Bits a value,
// counting them, for a head dim D, key group KG (default min(16,
// BlockSize)) and value
// group VG (default 32 for Int8 and FP8 values, 16 for Int4, never more
// than the KVHeads*D row); the last four columns are
// stories260K (4 KV heads, D 8, block 32), parity-llama3 (1 KV head, D 32,
// block 16), TinyLlama (4 KV heads, D 64, block 16) and a Llama 3 8B shape
// (8 KV heads, D 128, block 16), K/V:
//
//	precision  layout                                         bits a value            D=8        D=32       D=64       D=128
//	f32        per value                                      32                      32         32         32         32
//	f16        per value, round to nearest even               16                      16         16         16         16
//	bf16       per value, round to nearest even               16                      16         16         16         16
//	q8_0       per token row, groups of 32, scale absmax/127  8 + 16/32               8.5/8.5    8.5/8.5    8.5/8.5    8.5/8.5
//	int8 K     per channel over KG tokens, symmetric: a base  8 + (8+4D)/(KG*D)       8.31       8.27       8.26       8.25
//	           scale per head and a 4-bit multiplier a channel
//	int8 V     per token row, groups of VG, symmetric         8 + 8/VG                8.25       8.25       8.25       8.25
//	fp8 K, V   E4M3FN codes, scaled as int8 (scale absmax/448) as int8                8.31/8.25  8.27/8.25  8.26/8.25  8.25/8.25
//	int4 K     per channel over KG tokens, asymmetric, E5M4   4 + 19/KG (D%8 == 0)    5.19       5.19       5.19       5.19
//	           scale and zero point searched 3×3
//	int4 V     per token row rotated per head (Hadamard),     4 + 8/VG                4.5        4.5        4.5        4.5
//	           groups of VG, IQ4_NL table, signed E5M2 scale
//
// BitsPerValue computes these for a Config, BlockBytes the bytes of a block.
// With the key residual counted once per 1,000-token sequence (below), int8
// and fp8 hold 1.92× the tokens of f16 at D 8 to 128 (block 16 or 32),
// int4 3.22×; q8_0 holds 1.88×.
//
// Why these layouts. Int8 must hold at least 1.9× f16's tokens (at most
// about 8.4 bits a value, residual included) at head dim 32 and block 16,
// where f16 metadata costs most: an f16 scale and zero point per channel
// over 16 tokens is 2 bits a key value by itself. So int8 is symmetric (no
// zero point: on stories260K and parity-llama3 this costs less than the
// scales' precision does), its scales are 8 bits, and a key channel's scale
// is a 4-bit multiplier m of one E5M3 base b per head and key group,
// b*(m+1)/16, with b = amax/127 over the head's channels rounded up and m
// the smallest that covers the channel's amax/127: a quarter bit a value at
// block 16 instead of half a bit for an E5M3 scale a channel, and about as
// precise (the multiplier's step is a sixteenth of the base; the E5M3
// step an eighth). Int8 and FP8 take key groups of 16 tokens and value
// groups of 32 (q8_0's) even at block 32, where groups of 32 and 64
// would cost 0.13 bits a value less: on gen-model's random-weight "small"
// preset of head dim 64, values dominate int8's error (KL 3.4e-6 with
// only V quantized, against q8_0 values' 2.4e-6; keys 1.0e-6), and groups
// of 64 values and 32 key tokens put int8's KL over q8_0's (4.6e-6 against
// 3.5e-6 at block 32). Groups of 32 values bring the values to 2.6e-6,
// and an Int8 value group choosing between its rounded-up scale and the
// code below by squared error (the largest values may clip at ±127 for
// a finer step, as ggml's make_qx_quants weighs its candidates) to 2.5e-6.
// Mean KL from f32 K/V (kvscope bench cache, pure Go backend) is then at
// or under q8_0's on all three models: gen-model "small" 3.47e-6 against
// 3.51e-6 at blocks 16 and 32 (a thin margin), parity-llama3 1.4e-4
// against 1.65e-4, the trained stories260K 1.7e-4 against 1.8e-3. FP8
// scales as int8 does, so that its keys are per channel with a residual as
// int8's and cost the same bits.
//
// Int4 must hold at least 3.2× f16's tokens. Its keys keep a zero point per
// channel: 15 levels over a channel's range instead of a symmetric 15 over
// twice its largest magnitude. Its values are rotated first: a normalized
// Walsh–Hadamard transform per head spreads a row's outliers over the
// head, leaving near-Gaussian values that a non-uniform 16-level table
// (IQ4_NL's) codes better than 16 even steps, and that need no zero point.
// Both search their metadata by squared error, the keys among the 3×3
// scale and zero codes around the nearest ones, the values among 7 scale
// codes around amax/127 of either sign (a negative scale mirrors the
// asymmetric table). Against the earlier layout (E5M3 scales and E5M2 zero
// points at the nearest codes, keys and values alike, value groups of 64)
// at block 16, mean KL falls from 0.035 to 0.0168 on parity-llama3, 0.0128
// to 0.0080 on stories260K and 1.0e-3 to 5.7e-4 on gen-model "small", for
// 0.69 more bits a key value and 0.25 a value value (3.22× f16 instead of
// 3.28×). Key groups of 32 at block 32 would hold 3.34× f16, but at a KL
// of 0.021 on parity-llama3, so int4 keys take groups of 16 there too.
//
// Q8_0 follows ggml's quantize_row_q8_0: d = absmax/127 rounded to f16,
// q = round(x/d) with the unrounded d, halves away from zero. When a token's
// row is not a multiple of 32 values, its last group is shorter; a group spans
// heads when HeadDim is under 32 (stories260K's 32-value row is one group),
// which is llama.cpp's row layout, and it works for any head size.
//
// Int8 codes are signed bytes, q = round(x/s) halves away from zero,
// clamped to ±127, with s the decoded 8-bit scale (the value of its code)
// and 1/s rounded to float. An Int8 value group's scale code is scaleUp's
// c = up(amax/127) or c-1, whichever gives the smaller sum of (q*s - x)^2
// over the group's values in order, each operation rounded to float32 (c on
// a tie), so that every backend picks the same code. Int4 key codes are
// q = round((x-z)/s) halves up, clamped to 0..15, with s and z decoded; of
// the zero codes around the nearest to the channel's minimum and, for
// each, the scale codes around the nearest to (max-z)/15, the first (in
// ascending order) with the smallest sum of (q*s + z - x)^2 is kept. Int4
// values are rotated per head in blocks of the largest power of two R
// dividing HeadDim (butterflies (a+b, a-b) of stride 1, 2, 4 ..., then a
// multiply by 1/sqrt(R): its own inverse); a rotated value u codes as the
// table level nearest u/d (a tie to the lower), with d the first of the
// ±E5M2 codes c0-3..c0+3 (c0 nearest amax/127) with the smallest squared
// error; ReadV decodes d*level and rotates back. Every float operation is
// rounded to float32 in a fixed order, so that every backend stores the
// same bits (int4.go). FP8 is OCP E4M3FN (bias
// 7, largest 448, no infinity; NaN never stored) of x/s, rounded to nearest
// even, saturating. Keys are quantized per channel (kvHead, dim) across the
// KG tokens of a key group, because keys carry outlier channels that would
// crush every other channel of a per-token group (KIVI). Values are
// quantized per token in groups of VG consecutive values of the row; with
// HeadDim 8 an Int4 group of 16 spans 2 heads (set ValueGroup to HeadDim
// for per-head groups). When KG does not divide BlockSize or VG the row, the
// last group is shorter. A scale or zero point past its format's range
// saturates (61440 for E5M3 and E5M4, 57344 for E5M2; values past them
// clip).
//
// # The key residual
//
// A key group can be quantized only once all its tokens are there, so until
// then its keys stay at f16 (KIVI's full-precision residual) and ReadK returns
// exactly those f16 values. The residual is not a full f16 copy of every
// block: a pool of residual slots, shared by the store and grown on demand,
// hands a slot to each layer's key group that has some but not all of its
// tokens written; when the group's last token is written, the group is
// quantized and the slot returns to the pool. A sequence being extended
// therefore holds one partial key group's slots, one per layer; a prefill
// that runs layer by layer holds at most one more slot while it fills a
// group (TestResidualPeak).
//
// For Int8 and FP8 keys a slot stores only the high byte of each f16 value:
// the low byte waits in the block's own 8-bit key storage, where the
// token's quantized byte goes later. A partial key group costs
// ResidualBytes(c) = Layers*KVHeads*KG*HeadDim bytes, all layers together,
// for Int8 and FP8 keys and twice that for Int4; a cache budget should
// count it once per running sequence (SequenceBytes does), and
// Store.Residuals reports what is held. At block size 32 this puts
// 1000-token sequences at 1.92× (Int8, FP8) and 3.22× (Int4) the tokens of
// f16 in the same memory for stories260K's shape and for 22 layers, 4 KV
// heads, head dim 64 (TestCapacity).
//
// A group's state is tracked per layer by a mask of written slots. The block
// pool should call Reset when it gives a block to a new owner; otherwise,
// writing a slot of a full key group again re-quantizes the group with its
// old tokens, which is correct only once all of them are rewritten.
//
// # Concurrency and errors
//
// Write, ReadK and ReadV may run in parallel for different blocks, and
// Writes for distinct slots of one block may too; Int8/Int4/FP8 keys take a
// per-block lock (shared for reads) because a write may quantize the group
// (FP8 keys too).
// Indices out of range are programming errors and panic with a message that
// names them; Config.Validate, New and Load return errors for everything a
// user or a file can get wrong.
//
// Save writes a block as a little-endian byte string: a header with the
// store's shape and precisions (magic "KVB3": int4 v3, the layout above;
// Load refuses KVB2's 8-bit int4 scales and zero points), then per layer
// the K data and scales (for Int8/Int4/FP8
// keys also the slot mask and, per key group, a residual flag and slot),
// then the same for V. Load checks it all before changing the block.
package kvstore
