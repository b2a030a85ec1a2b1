package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// Message is one published message: the three ZMQ frames decoded.
type Message struct {
	Topic string
	Seq   int64
	Batch Batch
}

// EndSeq is the sequence number of the replay socket's end marker.
const EndSeq = -1

// ParseSeq decodes an 8-byte big-endian sequence number (signed, so that
// the replay's end marker reads as -1).
func ParseSeq(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("sequence frame is %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// SeqBytes encodes seq as the 8-byte big-endian frame vLLM uses.
func SeqBytes(seq int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	return b[:]
}

// ParseFrames decodes a PUB message: topic, sequence number, payload.
func ParseFrames(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("message has %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	seq, err := ParseSeq(frames[1])
	if err != nil {
		return Message{}, err
	}
	if seq < 0 {
		return Message{}, fmt.Errorf("negative sequence number %d", seq)
	}
	b, err := DecodeBatch(frames[2])
	if err != nil {
		return Message{Topic: string(frames[0]), Seq: seq}, fmt.Errorf("seq %d: %w", seq, err)
	}
	return Message{Topic: string(frames[0]), Seq: seq, Batch: b}, nil
}

// DecodeBatch decodes one msgpack EventBatch in either encoding.
func DecodeBatch(payload []byte) (Batch, error) {
	if len(payload) == 0 {
		return Batch{}, fmt.Errorf("empty payload")
	}
	if err := scan(payload); err != nil {
		return Batch{}, fmt.Errorf("event batch: %w", err)
	}
	dec := msgpack.NewDecoder(bytes.NewReader(payload))
	dec.UseLooseInterfaceDecoding(true)
	dec.SetMapDecoder(decodeMap)
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return Batch{}, fmt.Errorf("event batch: %w", err)
	}
	return batchFrom(v)
}

// decodeMap decodes a msgpack map into map[any]any, refusing keys that Go
// cannot hash (msgpack's own untyped map decoder panics on them).
func decodeMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	m := make(map[any]any, n)
	for range n {
		k, err := d.DecodeInterfaceLoose()
		if err != nil {
			return nil, err
		}
		switch x := k.(type) {
		case []byte:
			k = string(x)
		case []any, map[any]any:
			return nil, fmt.Errorf("msgpack map key is a %s", kindOf(k))
		}
		v, err := d.DecodeInterfaceLoose()
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}

func batchFrom(v any) (Batch, error) {
	b := Batch{DataParallelRank: -1}
	var ts, events, rank any
	switch x := v.(type) {
	case []any:
		b.Encoding = Array
		if len(x) < 2 {
			return Batch{}, fmt.Errorf("event batch: array of %d items, want [ts, events, (data_parallel_rank)]", len(x))
		}
		ts, events = x[0], x[1]
		if len(x) > 2 {
			rank = x[2]
		}
	case map[any]any:
		b.Encoding = Map
		var ok bool
		if ts, ok = x["ts"]; !ok {
			return Batch{}, fmt.Errorf("event batch: map has no \"ts\"")
		}
		if events, ok = x["events"]; !ok {
			return Batch{}, fmt.Errorf("event batch: map has no \"events\"")
		}
		rank = x["data_parallel_rank"]
	default:
		return Batch{}, fmt.Errorf("event batch: a msgpack %s, want an array or a map", kindOf(v))
	}
	var err error
	if b.TS, err = float(ts); err != nil {
		return Batch{}, fmt.Errorf("event batch: ts: %w", err)
	}
	if rank != nil {
		if b.DataParallelRank, err = integer(rank); err != nil {
			return Batch{}, fmt.Errorf("event batch: data_parallel_rank: %w", err)
		}
	}
	list, ok := events.([]any)
	if !ok {
		return Batch{}, fmt.Errorf("event batch: events is a msgpack %s, want an array", kindOf(events))
	}
	b.Events = make([]Event, 0, len(list))
	for i, e := range list {
		ev, err := eventFrom(e)
		if err != nil {
			return Batch{}, fmt.Errorf("event %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

// fields gives an event's fields by name whichever its encoding.
type fields struct {
	arr   []any // after the tag
	m     map[any]any
	names []string // positional names, for arr
}

func (f fields) get(name string) (any, bool) {
	if f.m != nil {
		v, ok := f.m[name]
		return v, ok
	}
	for i, n := range f.names {
		if n == name {
			if i < len(f.arr) {
				return f.arr[i], true
			}
			return nil, false
		}
	}
	return nil, false
}

// Field orders of the array_like structs (after the tag), as declared in
// vllm/distributed/kv_events.py.
var (
	storedOrder = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size",
		"lora_id", "medium", "lora_name", "extra_keys", "group_idx",
		"kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	removedOrder = []string{"block_hashes", "medium", "group_idx"}
)

func eventFrom(v any) (Event, error) {
	var tag string
	var f fields
	var enc Encoding
	switch x := v.(type) {
	case []any:
		enc = Array
		if len(x) == 0 {
			return nil, fmt.Errorf("empty event array, want a tag first")
		}
		t, ok := x[0].(string)
		if !ok {
			return nil, fmt.Errorf("event tag is a msgpack %s, want a string", kindOf(x[0]))
		}
		tag, f.arr = t, x[1:]
	case map[any]any:
		enc = Map
		t, ok := x["type"].(string)
		if !ok {
			return nil, fmt.Errorf("event map has no string \"type\"")
		}
		tag, f.m = t, x
	default:
		return nil, fmt.Errorf("event is a msgpack %s, want an array or a map", kindOf(v))
	}
	switch tag {
	case "BlockStored":
		f.names = storedOrder
		return storedFrom(f, enc)
	case "BlockRemoved":
		f.names = removedOrder
		return removedFrom(f, enc)
	case "AllBlocksCleared":
		return &AllBlocksCleared{Encoding: enc}, nil
	}
	return &UnknownEvent{Tag: tag, Encoding: enc}, nil
}

func storedFrom(f fields, enc Encoding) (*BlockStored, error) {
	e := &BlockStored{Encoding: enc, LoraID: -1, GroupIdx: -1, KVCacheSpecSlidingWindow: -1}
	for _, name := range []string{"block_hashes", "parent_block_hash", "token_ids", "block_size"} {
		if _, ok := f.get(name); !ok {
			return nil, fmt.Errorf("BlockStored: no %s", name)
		}
	}
	var err error
	v, _ := f.get("block_hashes")
	if e.BlockHashes, err = hashes(v); err != nil {
		return nil, fmt.Errorf("BlockStored: block_hashes: %w", err)
	}
	if v, _ := f.get("parent_block_hash"); v != nil {
		if e.ParentBlockHash, err = hashFrom(v); err != nil {
			return nil, fmt.Errorf("BlockStored: parent_block_hash: %w", err)
		}
	}
	v, _ = f.get("token_ids")
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("BlockStored: token_ids is a msgpack %s, want an array", kindOf(v))
	}
	e.TokenIDs = make([]int32, len(list))
	for i, t := range list {
		n, err := integer(t)
		if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, fmt.Errorf("BlockStored: token_ids[%d]: not a token id (%v)", i, t)
		}
		e.TokenIDs[i] = int32(n)
	}
	v, _ = f.get("block_size")
	if e.BlockSize, err = integer(v); err != nil || e.BlockSize < 0 {
		return nil, fmt.Errorf("BlockStored: block_size: not a size (%v)", v)
	}
	if e.LoraID, err = optInt(f, "lora_id"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	if e.Medium, err = optString(f, "medium"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	if e.LoraName, err = optString(f, "lora_name"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	if v, _ := f.get("extra_keys"); v != nil {
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("BlockStored: extra_keys is a msgpack %s, want an array", kindOf(v))
		}
		e.ExtraKeys = l
	}
	if e.GroupIdx, err = optInt(f, "group_idx"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	if e.KVCacheSpecKind, err = optString(f, "kv_cache_spec_kind"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	if e.KVCacheSpecSlidingWindow, err = optInt(f, "kv_cache_spec_sliding_window"); err != nil {
		return nil, fmt.Errorf("BlockStored: %w", err)
	}
	return e, nil
}

func removedFrom(f fields, enc Encoding) (*BlockRemoved, error) {
	e := &BlockRemoved{Encoding: enc, GroupIdx: -1}
	v, ok := f.get("block_hashes")
	if !ok {
		return nil, fmt.Errorf("BlockRemoved: no block_hashes")
	}
	var err error
	if e.BlockHashes, err = hashes(v); err != nil {
		return nil, fmt.Errorf("BlockRemoved: block_hashes: %w", err)
	}
	if e.Medium, err = optString(f, "medium"); err != nil {
		return nil, fmt.Errorf("BlockRemoved: %w", err)
	}
	if e.GroupIdx, err = optInt(f, "group_idx"); err != nil {
		return nil, fmt.Errorf("BlockRemoved: %w", err)
	}
	return e, nil
}

func hashes(v any) ([]Hash, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("a msgpack %s, want an array", kindOf(v))
	}
	out := make([]Hash, len(list))
	for i, x := range list {
		h, err := hashFrom(x)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = h
	}
	return out, nil
}

func hashFrom(v any) (Hash, error) {
	switch x := v.(type) {
	case int64:
		return IntHash(uint64(x)), nil
	case uint64:
		return IntHash(x), nil
	case []byte:
		return BytesHash(x), nil
	case string:
		return BytesHash([]byte(x)), nil
	}
	return Hash{}, fmt.Errorf("hash is a msgpack %s, want an int or bytes", kindOf(v))
}

func optInt(f fields, name string) (int, error) {
	v, _ := f.get(name)
	if v == nil {
		return -1, nil
	}
	n, err := integer(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

func optString(f fields, name string) (string, error) {
	v, _ := f.get(name)
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	}
	return "", fmt.Errorf("%s is a msgpack %s, want a string", name, kindOf(v))
}

func integer(v any) (int, error) {
	switch x := v.(type) {
	case int64:
		if x < math.MinInt || x > math.MaxInt {
			break
		}
		return int(x), nil
	case uint64:
		if x > math.MaxInt {
			break
		}
		return int(x), nil
	default:
		return 0, fmt.Errorf("a msgpack %s, want an int", kindOf(v))
	}
	return 0, fmt.Errorf("%v is out of range", v)
}

func float(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("a msgpack %s, want a number", kindOf(v))
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "bool"
	case int64, uint64, int8, int16, int32, uint8, uint16, uint32:
		return "int"
	case float32, float64:
		return "float"
	case string:
		return "string"
	case []byte:
		return "bin"
	case []any:
		return "array"
	case map[any]any, map[string]any:
		return "map"
	}
	return fmt.Sprintf("%T", v)
}
