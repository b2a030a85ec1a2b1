package kvstore

import "fmt"

// MaxBlockSize is the largest number of tokens a block may hold.
const MaxBlockSize = 256

// maxStoreBytes bounds the memory one Store may take (2^46 bytes, 64 TiB), so
// that size arithmetic can never overflow.
const maxStoreBytes = 1 << 46

// Config describes a Store: the model's K/V shape, the block geometry and the
// precision of K and V.
type Config struct {
	Layers    int // transformer layers
	KVHeads   int // key/value heads per layer
	HeadDim   int // values per head
	BlockSize int // tokens per block, 1..MaxBlockSize
	Blocks    int // blocks in the store; a block id names the same slot in every layer

	K, V Precision // storage precision of keys and of values

	// KeyGroup is the number of consecutive tokens of a block whose keys share
	// one scale (and, for Int4, a zero point) per channel, for Int8, Int4 and
	// FP8 keys; 0 means min(16, BlockSize). When it does not divide BlockSize, a
	// block's last key group is shorter. Ignored for other key precisions.
	KeyGroup int

	// ValueGroup is the number of consecutive values of a token's V row
	// (KVHeads*HeadDim values, head-major; for Int4, each head's values
	// rotated) that share one scale, for Int8, Int4 and FP8 values; 0 means
	// 32 for Int8 and FP8 values (as Q8_0's groups) and 16 for Int4. A group
	// may span heads when HeadDim is smaller (with head dim 16, one group of
	// 32 covers 2 heads; set it to HeadDim for per-head groups). When it
	// does not divide the row, the last group is shorter. Ignored for other
	// value precisions.
	ValueGroup int
}

// keyGroup returns the effective key group length: the default is 16 tokens,
// whose scales cost a quarter bit a value for Int8 and FP8 keys and 1.19
// bits for Int4 (at 32 tokens, 0.59: int4 3.34× f16 instead of 3.22×, but a
// mean KL of 0.021 on parity-llama3 instead of 0.017).
func (c Config) keyGroup() int {
	if c.KeyGroup > 0 {
		return c.KeyGroup
	}
	return min(16, c.BlockSize)
}

// valueGroup returns the effective value group length along the token row:
// the default is 32 values of a token's row a scale for Int8 and FP8 (a
// quarter bit a value) and 16 for Int4 (half a bit: a 16-level codebook
// needs its scale closer to its values than 8 bits do).
func (c Config) valueGroup() int {
	g := c.ValueGroup
	if g <= 0 {
		g = 32
		if c.V == Int4 {
			g = 16
		}
	}
	return min(g, c.KVHeads*c.HeadDim)
}

// Validate reports the first thing wrong with c, in words that name the
// setting.
func (c Config) Validate() error {
	if err := c.checkShape(); err != nil {
		return err
	}
	if c.Blocks < 1 {
		return fmt.Errorf("kvstore: block count must be at least 1, got %d", c.Blocks)
	}
	if c.Blocks > maxStoreBytes {
		return fmt.Errorf("kvstore: %d blocks is too many", c.Blocks)
	}
	bb := BlockBytes(c)
	if int64(bb)*int64(c.Blocks) > maxStoreBytes {
		return fmt.Errorf("kvstore: %d blocks of %d bytes exceed the %d-byte limit of one store", c.Blocks, bb, int64(maxStoreBytes))
	}
	return nil
}

// checkShape is Validate without the block count: what the size functions
// need to compute.
func (c Config) checkShape() error {
	switch {
	case c.Layers < 1:
		return fmt.Errorf("kvstore: layer count must be at least 1, got %d", c.Layers)
	case c.KVHeads < 1:
		return fmt.Errorf("kvstore: KV head count must be at least 1, got %d", c.KVHeads)
	case c.HeadDim < 1:
		return fmt.Errorf("kvstore: head dimension must be at least 1, got %d", c.HeadDim)
	case c.BlockSize < 1 || c.BlockSize > MaxBlockSize:
		return fmt.Errorf("kvstore: block size must be between 1 and %d tokens, got %d", MaxBlockSize, c.BlockSize)
	case !c.K.valid():
		return fmt.Errorf("kvstore: unknown key precision %v", c.K)
	case !c.V.valid():
		return fmt.Errorf("kvstore: unknown value precision %v", c.V)
	case c.KeyGroup < 0 || c.KeyGroup > c.BlockSize:
		return fmt.Errorf("kvstore: key group must be 0 (default) or 1..block size %d tokens, got %d", c.BlockSize, c.KeyGroup)
	case c.ValueGroup < 0:
		return fmt.Errorf("kvstore: value group must be 0 (default) or a positive number of values, got %d", c.ValueGroup)
	}
	// Bound the sizes before multiplying them together.
	if c.Layers > 1<<16 || c.KVHeads > 1<<16 || c.HeadDim > 1<<16 || c.KVHeads*c.HeadDim > 1<<20 {
		return fmt.Errorf("kvstore: shape %d layers × %d KV heads × head dim %d is too large", c.Layers, c.KVHeads, c.HeadDim)
	}
	return nil
}

// shape is the per-layer, per-block storage of one of K or V.
type shape struct {
	prec     Precision
	key      bool // per-channel key layout with residual (Int8/Int4/FP8 keys)
	dim      int  // HeadDim
	rowBytes int  // bytes of one (head, token) row of HeadDim values
	group    int  // row-quantized: values per group along the token row; key: tokens per group
	groups   int  // row-quantized: groups per token; key: groups per block
	data     int  // data bytes (or elements, for F32/F16/BF16) per layer and block
	scales   int  // scale elements per layer and block: for row planes one a group and token; for keys, bytes of keyScaleBytes (Int8, FP8) or keyMetaBytes (Int4) a (head, group)
	scale8   bool // scales are bytes (Int8/Int4/FP8), not f16 (Q8_0)
}

// keyScaleBytes returns the scale bytes of one (head, key group) of
// symmetric keys (Int8, FP8) of head dim d: an E5M3 base scale, then a
// 4-bit multiplier a channel, two a byte (the even dim in the low nibble).
func keyScaleBytes(d int) int { return 1 + (d+1)/2 }

// shapeOf returns the storage shape of keys (key true) or values at
// precision p under c.
func shapeOf(c Config, p Precision, key bool) shape {
	h, d, b := c.KVHeads, c.HeadDim, c.BlockSize
	row := h * d
	s := shape{prec: p, dim: d}
	switch p {
	case F32, F16, BF16:
		s.rowBytes = d * [...]int{F32: 4, F16: 2, BF16: 2}[p]
		s.data = h * b * d
		return s
	case Int4:
		s.rowBytes = (d + 1) / 2
	default:
		s.rowBytes = d
	}
	s.data = h * b * s.rowBytes
	s.scale8 = p != Q8_0
	switch {
	case key && p.keyResidual():
		s.key = true
		s.group = c.keyGroup()
		s.groups = (b + s.group - 1) / s.group
		s.scales = h * s.groups * keyScaleBytes(d)
		if p == Int4 {
			s.scales = h * s.groups * keyMetaBytes(d)
		}
		return s
	case p == Q8_0:
		s.group = min(32, row)
	default: // Int8, Int4, FP8 values
		s.group = c.valueGroup()
	}
	s.groups = (row + s.group - 1) / s.group
	s.scales = b * s.groups
	return s
}

// bytes returns the bytes of one layer's share of one block.
func (s shape) bytes() int {
	switch s.prec {
	case F32:
		return s.data * 4
	case F16, BF16:
		return s.data * 2
	}
	if !s.scale8 {
		return s.data + 2*s.scales
	}
	return s.data + s.scales
}

// BlockBytes returns the bytes one block takes across all layers, K and V,
// scales and zero points included: the figure a cache budget divides by. It
// leaves out the f16 key residuals (see ResidualBytes) and the few bytes of
// bookkeeping per block. It ignores Blocks, and returns 0 when c's shape is
// invalid (see Validate), as do the other size functions.
func BlockBytes(c Config) int {
	if c.checkShape() != nil {
		return 0
	}
	return c.Layers * (shapeOf(c, c.K, true).bytes() + shapeOf(c, c.V, false).bytes())
}

// BytesPerToken returns BlockBytes divided by the block size: the storage one
// token slot costs, for metrics tables.
func BytesPerToken(c Config) float64 {
	if c.checkShape() != nil {
		return 0
	}
	return float64(BlockBytes(c)) / float64(c.BlockSize)
}

// ResidualBytes returns the bytes of key residual a partly filled key group
// holds across all layers, or 0 when the key precision needs none. Int8,
// Int4 and FP8 keys are quantized per channel across a key group of tokens,
// so the tokens of a group that is not yet full are kept at f16 in residual slots
// taken from a pool shared by the whole store, one slot per layer, returned
// as soon as that layer's group is full.
//
// For Int8 and FP8 keys a slot holds only the high byte of each f16 value:
// the low byte sits in the block's own (not yet used) 8-bit key storage, so
// the residual costs Layers*KVHeads*KeyGroup*HeadDim bytes. Int4 keys keep
// whole f16 values, twice that. A sequence being extended holds one partial key
// group at a time, so a cache budget should count ResidualBytes once per
// running sequence; SequenceBytes does.
func ResidualBytes(c Config) int {
	if c.checkShape() != nil {
		return 0
	}
	switch c.K {
	case Int8, FP8:
		return c.Layers * c.KVHeads * c.keyGroup() * c.HeadDim
	case Int4:
		return 2 * c.Layers * c.KVHeads * c.keyGroup() * c.HeadDim
	}
	return 0
}

// SequenceBytes returns the storage a sequence of n tokens holds: its blocks
// and, when its last key group is partly filled, one residual slot.
func SequenceBytes(c Config, n int) int {
	if n <= 0 || c.checkShape() != nil {
		return 0
	}
	blocks := (n + c.BlockSize - 1) / c.BlockSize
	total := blocks * BlockBytes(c)
	if r := n % c.BlockSize; r != 0 && r%c.keyGroup() != 0 {
		total += ResidualBytes(c)
	}
	return total
}

// BitsPerValue returns the storage cost, in bits per stored K value and per
// stored V value, of c's precisions, scales and zero points included
// (residual slots excluded).
func BitsPerValue(c Config) (k, v float64) {
	if c.checkShape() != nil {
		return 0, 0
	}
	n := float64(c.KVHeads * c.HeadDim * c.BlockSize)
	return float64(8*shapeOf(c, c.K, true).bytes()) / n, float64(8*shapeOf(c, c.V, false).bytes()) / n
}
