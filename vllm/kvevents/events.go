package kvevents

import "time"

// Encoding names the msgpack layout of a batch or an event.
type Encoding uint8

const (
	// Array is msgspec's array_like layout (vLLM releases up to about
	// v0.23): fields by position, an event's tag first.
	Array Encoding = iota + 1
	// Map is the layout after vLLM PR #42892: fields by name, an event's
	// tag under "type".
	Map
)

func (e Encoding) String() string {
	switch e {
	case Array:
		return "array"
	case Map:
		return "map"
	}
	return "unknown"
}

// Batch is one EventBatch: the events of one scheduler step.
type Batch struct {
	// TS is the publisher's timestamp in seconds since the Unix epoch.
	TS float64
	// Events in the order vLLM applied them.
	Events []Event
	// DataParallelRank is the publishing rank, or -1 where the batch has
	// none (early releases, or None).
	DataParallelRank int
	// Encoding is the batch's own layout (its events carry theirs).
	Encoding Encoding
}

// Time returns TS as a time.Time.
func (b Batch) Time() time.Time {
	sec := int64(b.TS)
	return time.Unix(sec, int64((b.TS-float64(sec))*1e9))
}

// Event is one of *BlockStored, *BlockRemoved, *AllBlocksCleared or
// *UnknownEvent.
type Event interface {
	// Type is vLLM's tag for the event: "BlockStored", "BlockRemoved",
	// "AllBlocksCleared", or the unknown tag.
	Type() string
	// Layout is the event's own encoding.
	Layout() Encoding
}

// BlockStored says that blocks entered the prefix cache: BlockHashes[0]'s
// parent is ParentBlockHash (zero for a first block) and each later block's
// parent is the one before it.
type BlockStored struct {
	BlockHashes     []Hash
	ParentBlockHash Hash
	// TokenIDs are the tokens of all the blocks, BlockSize per block.
	TokenIDs  []int32
	BlockSize int
	// LoraID is -1 where None.
	LoraID int
	// Medium is where the blocks live ("GPU", "CPU", ...); "" where None
	// or absent (early releases, which only knew the GPU).
	Medium   string
	LoraName string
	// ExtraKeys is the per-block extra hash input (multimodal ids, LoRA
	// name, cache salt ...), decoded generically; nil where absent.
	ExtraKeys []any
	// GroupIdx is the KV-cache group (hybrid models), -1 where absent.
	GroupIdx int
	// KVCacheSpecKind and KVCacheSpecSlidingWindow describe the group's
	// cache spec where sent ("" and -1 otherwise).
	KVCacheSpecKind          string
	KVCacheSpecSlidingWindow int

	Encoding Encoding
}

// BlockRemoved says that blocks left the prefix cache (evicted).
type BlockRemoved struct {
	BlockHashes []Hash
	Medium      string
	GroupIdx    int
	Encoding    Encoding
}

// AllBlocksCleared says that the whole prefix cache was reset.
type AllBlocksCleared struct {
	Encoding Encoding
}

// UnknownEvent is an event whose tag this package does not know; its body
// is skipped.
type UnknownEvent struct {
	Tag      string
	Encoding Encoding
}

func (*BlockStored) Type() string      { return "BlockStored" }
func (*BlockRemoved) Type() string     { return "BlockRemoved" }
func (*AllBlocksCleared) Type() string { return "AllBlocksCleared" }
func (e *UnknownEvent) Type() string   { return e.Tag }

func (e *BlockStored) Layout() Encoding      { return e.Encoding }
func (e *BlockRemoved) Layout() Encoding     { return e.Encoding }
func (e *AllBlocksCleared) Layout() Encoding { return e.Encoding }
func (e *UnknownEvent) Layout() Encoding     { return e.Encoding }

// BlockTokens returns block i's token ids (a sub-slice of TokenIDs): the
// BlockSize tokens at i*BlockSize, fewer for a short last block, nil where
// TokenIDs does not reach block i.
func (e *BlockStored) BlockTokens(i int) []int32 {
	if i < 0 || i >= len(e.BlockHashes) || e.BlockSize <= 0 {
		return nil
	}
	lo := i * e.BlockSize
	if lo >= len(e.TokenIDs) {
		return nil
	}
	hi := lo + e.BlockSize
	if i == len(e.BlockHashes)-1 || hi > len(e.TokenIDs) {
		hi = min(len(e.TokenIDs), hi)
	}
	return e.TokenIDs[lo:hi:hi]
}
