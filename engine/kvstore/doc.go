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
// two values a byte, the even dim in the low nibble); scales and zero points
// sit in parallel arrays indexed by layer and block:
//
//   - Q8_0, FP8 and Int8/Int4 values: [tokenInBlock][group], where a group is
//     a run of a token's row of KVHeads*HeadDim values (head-major).
//   - Int8/Int4 keys: [kvHead][keyGroup][headDim], one per channel and key
//     group of tokens.
//
// ReadK and ReadV decode a block's first n tokens into [kvHead][n][headDim].
//
// # Precisions
//
// Every scale and zero point is an f16. Bits a value, counting them, for a
// head dim D, key group KG (default min(32, BlockSize)) and value group VG
// (default 32); the last two columns are stories260K (4 KV heads, D 8) and a
// TinyLlama-like shape (4 KV heads, D 64) at block size 32:
//
//	precision  layout                                           bits a value       D=8    D=64
//	f32        per value                                        32                 32     32
//	f16        per value, round to nearest even                 16                 16     16
//	bf16       per value, round to nearest even                 16                 16     16
//	q8_0       per token row, groups of 32, scale absmax/127    8 + 16/32          8.5    8.5
//	fp8        E4M3FN per value, scale absmax/448 per token     8 + 16/D           10     8.25
//	           and KV head
//	int8 K     per channel over KG tokens, asymmetric min/max   8 + 32/KG          9      9
//	int4 K     per channel over KG tokens, asymmetric min/max   4 + 32/KG          5      5
//	int8 V     per token row, groups of VG, asymmetric          8 + 32/VG          9      9
//	int4 V     per token row, groups of VG, asymmetric          4 + 32/VG          5      5
//
// BitsPerValue computes these for a Config, BlockBytes the bytes of a block.
//
// Q8_0 follows ggml's quantize_row_q8_0: d = absmax/127 rounded to f16,
// q = round(x/d) with the unrounded d, halves away from zero. When a token's
// row is not a multiple of 32 values, its last group is shorter; a group spans
// heads when HeadDim is under 32 (stories260K's 32-value row is one group),
// which is llama.cpp's row layout, and it works for any head size.
//
// FP8 is OCP E4M3FN (bias 7, largest 448, no infinity; NaN never stored),
// rounded to nearest even, saturating, with one f16 scale per token and KV
// head. A per-block scale would need every token of the block before the
// first could be stored, that is the same residual machinery as Int8/Int4
// keys, for a saving of 2 bits a value at D 8 and a quarter bit at D 64; it is
// not implemented.
//
// Int8 and Int4 are KIVI-style and asymmetric: scale = (max-min)/(2^bits-1)
// and zero point = min, both rounded to f16, q = round((x-min)/scale). Keys
// are quantized per channel (kvHead, dim) across the KG tokens of a key
// group, because keys carry outlier channels that would crush every other
// channel of a per-token group. Values are quantized per token in groups of
// VG consecutive values of the row; with HeadDim 8 a group of 32 spans 4
// heads, which keeps Int4 at 5 bits a value (set ValueGroup to HeadDim for
// per-head groups: better accuracy, 8 bits a value at D 8). When KG does not
// divide BlockSize or VG the row, the last group is shorter. Scales and zero
// points past f16's range saturate at ±65504.
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
// For Int8 keys a slot stores only the high byte of each f16 value: the low
// byte waits in the block's own 8-bit key storage, where the token's
// quantized byte goes later. A partial key group costs ResidualBytes(c) =
// Layers*KVHeads*KG*HeadDim bytes, all layers together, for Int8 keys and
// twice that for Int4; a cache budget should count it once per running
// sequence (SequenceBytes does), and Store.Residuals reports what is held.
// At block size 32 this puts 1000-token sequences at 1.753× (Int8) and 3.048×
// (Int4) the tokens of f16 in the same memory for stories260K's shape, and
// 1.754× and 3.048× for 22 layers, 4 KV heads, head dim 64 (TestCapacity).
//
// A group's state is tracked per layer by a mask of written slots. The block
// pool should call Reset when it gives a block to a new owner; otherwise,
// writing a slot of a full key group again re-quantizes the group with its
// old tokens, which is correct only once all of them are rewritten.
//
// # Concurrency and errors
//
// Write, ReadK and ReadV may run in parallel for different blocks, and
// Writes for distinct slots of one block may too; Int8/Int4 keys take a
// per-block lock (shared for reads) because a write may quantize the group.
// Indices out of range are programming errors and panic with a message that
// names them; Config.Validate, New and Load return errors for everything a
// user or a file can get wrong.
//
// Save writes a block as a little-endian byte string: a header with the
// store's shape and precisions, then per layer the K data, scales and zero
// points (for Int8/Int4 keys also the slot mask and, per key group, a
// residual flag and slot), then the same for V. Load checks it all before
// changing the block.
package kvstore
