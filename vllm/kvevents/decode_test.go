package kvevents

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// omap is a msgpack map written in the given key order, as msgspec writes a
// struct's fields in declaration order.
type omap []any // key, value, key, value ...

func (m omap) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(len(m) / 2); err != nil {
		return err
	}
	for _, v := range m {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const bigHash = uint64(0xfedcba9876543210) // above 2^63: msgspec writes a uint64

func TestDecodeBatch(t *testing.T) {
	h1, h2 := []byte{0xde, 0xad, 0xbe, 0xef}, []byte{0x01, 0x02}
	tests := []struct {
		name    string
		payload any
		want    Batch
	}{{
		// vllm-project/vllm@b4e69e0a: [ts, events]; BlockStored ends at lora_id,
		// BlockRemoved has only block_hashes.
		name: "array, early release",
		payload: []any{1.5, []any{
			[]any{"BlockStored", []any{int64(11), int64(12)}, nil, []any{1, 2, 3, 4, 5, 6, 7, 8}, 4, nil},
			[]any{"BlockRemoved", []any{int64(11)}},
			[]any{"AllBlocksCleared"},
		}},
		want: Batch{TS: 1.5, DataParallelRank: -1, Encoding: Array, Events: []Event{
			&BlockStored{BlockHashes: []Hash{IntHash(11), IntHash(12)}, TokenIDs: []int32{1, 2, 3, 4, 5, 6, 7, 8},
				BlockSize: 4, LoraID: -1, GroupIdx: -1, KVCacheSpecSlidingWindow: -1, Encoding: Array},
			&BlockRemoved{BlockHashes: []Hash{IntHash(11)}, GroupIdx: -1, Encoding: Array},
			&AllBlocksCleared{Encoding: Array},
		}},
	}, {
		// 1CatAI/1Cat-vLLM@92a785cb (array_like, v0.1x): data_parallel_rank,
		// medium and lora_name appended.
		name: "array, with medium and rank",
		payload: []any{1700000000.25, []any{
			[]any{"BlockStored", []any{bigHash, int64(-5)}, int64(7), []any{9, 9}, 1, 3, "GPU", "adapter"},
			[]any{"BlockRemoved", []any{bigHash}, "CPU"},
		}, 2},
		want: Batch{TS: 1700000000.25, DataParallelRank: 2, Encoding: Array, Events: []Event{
			&BlockStored{BlockHashes: []Hash{IntHash(bigHash), IntHash(uint64(0xfffffffffffffffb))}, ParentBlockHash: IntHash(7),
				TokenIDs: []int32{9, 9}, BlockSize: 1, LoraID: 3, Medium: "GPU", LoraName: "adapter",
				GroupIdx: -1, KVCacheSpecSlidingWindow: -1, Encoding: Array},
			&BlockRemoved{BlockHashes: []Hash{IntHash(bigHash)}, Medium: "CPU", GroupIdx: -1, Encoding: Array},
		}},
	}, {
		// vllm-project/vllm@0181ea31 (after PR #42892): maps, fields in
		// declaration order, defaults omitted, the tag under "type".
		name: "map, bytes hashes",
		payload: omap{"ts", 2.0, "events", []any{
			omap{"type", "BlockStored", "block_hashes", []any{h1, h2}, "parent_block_hash", nil,
				"token_ids", []any{100, 200, 300}, "block_size", 2, "lora_id", nil, "medium", "GPU",
				"lora_name", nil, "extra_keys", []any{nil, []any{"salt"}}, "group_idx", 1,
				"kv_cache_spec_kind", "full_attention"},
			omap{"type", "BlockRemoved", "block_hashes", []any{h2}, "medium", "GPU", "group_idx", 1},
			omap{"type", "AllBlocksCleared"},
		}, "data_parallel_rank", 0},
		want: Batch{TS: 2, DataParallelRank: 0, Encoding: Map, Events: []Event{
			&BlockStored{BlockHashes: []Hash{BytesHash(h1), BytesHash(h2)}, TokenIDs: []int32{100, 200, 300},
				BlockSize: 2, LoraID: -1, Medium: "GPU", ExtraKeys: []any{nil, []any{"salt"}}, GroupIdx: 1,
				KVCacheSpecKind: "full_attention", KVCacheSpecSlidingWindow: -1, Encoding: Map},
			&BlockRemoved{BlockHashes: []Hash{BytesHash(h2)}, Medium: "GPU", GroupIdx: 1, Encoding: Map},
			&AllBlocksCleared{Encoding: Map},
		}},
	}, {
		name: "map batch without rank, array events",
		payload: omap{"ts", int64(3), "events", []any{
			[]any{"BlockRemoved", []any{uint64(1)}, nil},
		}},
		want: Batch{TS: 3, DataParallelRank: -1, Encoding: Map, Events: []Event{
			&BlockRemoved{BlockHashes: []Hash{IntHash(1)}, GroupIdx: -1, Encoding: Array},
		}},
	}, {
		name: "array batch, map events and an unknown type",
		payload: []any{0.0, []any{
			omap{"type", "BlockStored", "block_hashes", []any{5}, "parent_block_hash", 4,
				"token_ids", []any{}, "block_size", 16, "lora_id", nil, "medium", nil, "lora_name", nil},
			omap{"type", "SomethingNew", "x", 1},
			[]any{"AlsoNew", 1, 2},
		}, nil},
		want: Batch{DataParallelRank: -1, Encoding: Array, Events: []Event{
			&BlockStored{BlockHashes: []Hash{IntHash(5)}, ParentBlockHash: IntHash(4), TokenIDs: []int32{},
				BlockSize: 16, LoraID: -1, GroupIdx: -1, KVCacheSpecSlidingWindow: -1, Encoding: Map},
			&UnknownEvent{Tag: "SomethingNew", Encoding: Map},
			&UnknownEvent{Tag: "AlsoNew", Encoding: Array},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBatch(pack(t, tt.payload))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
				for i := range min(len(got.Events), len(tt.want.Events)) {
					if !reflect.DeepEqual(got.Events[i], tt.want.Events[i]) {
						t.Errorf("event %d: got %#v, want %#v", i, got.Events[i], tt.want.Events[i])
					}
				}
			}
		})
	}
}

func TestDecodeBatchMalformed(t *testing.T) {
	good := pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1}}}})
	deep := bytes.Repeat([]byte{0x91}, 10000) // [[[[...
	deep = append(deep, 0x01)
	tests := []struct {
		name    string
		payload []byte
		want    string // substring of the error
	}{
		{"empty", nil, "empty payload"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"trailing bytes", append(append([]byte{}, good...), 0x00), "trailing bytes"},
		{"invalid code", []byte{0xc1}, "invalid msgpack code"},
		{"too deep", deep, "deeper than"},
		{"huge array claim", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, "truncated"},
		{"huge string claim", []byte{0xdb, 0x7f, 0xff, 0xff, 0xff}, "truncated"},
		{"not a container", pack(t, 42), "want an array or a map"},
		{"short array", pack(t, []any{1.0}), "array of 1 items"},
		{"map without ts", pack(t, omap{"events", []any{}}), "no \"ts\""},
		{"map without events", pack(t, omap{"ts", 1.0}), "no \"events\""},
		{"ts a string", pack(t, []any{"now", []any{}}), "ts"},
		{"events a map", pack(t, []any{1.0, omap{"a", 1}}), "events is a msgpack map"},
		{"event a number", pack(t, []any{1.0, []any{7}}), "event 0"},
		{"empty event array", pack(t, []any{1.0, []any{[]any{}}}), "empty event array"},
		{"tag not string", pack(t, []any{1.0, []any{[]any{3, 1}}}), "want a string"},
		{"map event without type", pack(t, []any{1.0, []any{omap{"block_hashes", []any{}}}}), "\"type\""},
		{"stored too short", pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil}}}), "no token_ids"},
		{"hash a float", pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}}), "want an int or bytes"},
		{"hashes not array", pack(t, []any{1.0, []any{[]any{"BlockRemoved", 1}}}), "block_hashes"},
		{"token id a string", pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{"a"}, 1, nil}}}), "token_ids[0]"},
		{"token id too big", pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{int64(1) << 40}, 1, nil}}}), "token_ids[0]"},
		{"negative block size", pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{}, -1, nil}}}), "block_size"},
		{"medium an int", pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1}, 5}}}), "medium"},
		{"rank a string", pack(t, []any{1.0, []any{}, "zero"}), "data_parallel_rank"},
		{"int map key", []byte{0x92, 0x01, 0x91, 0x81, 0x01, 0x02}, "\"type\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBatch(tt.payload)
			if err == nil {
				t.Fatalf("no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseFrames(t *testing.T) {
	payload := pack(t, []any{1.0, []any{[]any{"AllBlocksCleared"}}})
	tests := []struct {
		name    string
		frames  [][]byte
		wantErr string
		wantSeq int64
	}{
		{"ok", [][]byte{[]byte("kv@pod-1@llama"), SeqBytes(42), payload}, "", 42},
		{"two frames", [][]byte{[]byte("kv"), SeqBytes(1)}, "2 frames", 0},
		{"short seq", [][]byte{[]byte("kv"), {1, 2}, payload}, "2 bytes", 0},
		{"end marker", [][]byte{[]byte("kv"), SeqBytes(EndSeq), payload}, "negative", 0},
		{"bad payload", [][]byte{[]byte("kv"), SeqBytes(7), {0xc1}}, "seq 7", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseFrames(tt.frames)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if m.Seq != tt.wantSeq {
					t.Errorf("seq %d, want %d", m.Seq, tt.wantSeq)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Topic != "kv@pod-1@llama" || m.Seq != tt.wantSeq || len(m.Batch.Events) != 1 {
				t.Errorf("got %+v", m)
			}
		})
	}
}

func TestHash(t *testing.T) {
	tests := []struct {
		h             Hash
		str, short    string
		isBytes, zero bool
	}{
		{Hash{}, "none", "none", false, true},
		{IntHash(255), "255", "ff", false, false},
		{IntHash(bigHash), "18364758544493064720", "76543210", false, false},
		{BytesHash([]byte{0xab, 0xcd}), "abcd", "abcd", true, false},
		{BytesHash(bytes.Repeat([]byte{0x11, 0x22}, 8)), strings.Repeat("1122", 8), "11221122", true, false},
	}
	for _, tt := range tests {
		if tt.h.String() != tt.str || tt.h.Short() != tt.short || tt.h.IsBytes() != tt.isBytes || tt.h.IsZero() != tt.zero {
			t.Errorf("%#v: String %q Short %q IsBytes %v IsZero %v; want %q %q %v %v", tt.h,
				tt.h.String(), tt.h.Short(), tt.h.IsBytes(), tt.h.IsZero(), tt.str, tt.short, tt.isBytes, tt.zero)
		}
	}
	if IntHash(1) == BytesHash([]byte{1}) {
		t.Error("an int hash equals a bytes hash")
	}
	if BytesHash([]byte{1, 2}) != BytesHash([]byte{1, 2}) {
		t.Error("equal bytes hashes differ")
	}
}

func TestBlockTokens(t *testing.T) {
	e := &BlockStored{BlockHashes: []Hash{IntHash(1), IntHash(2), IntHash(3)}, TokenIDs: []int32{1, 2, 3, 4, 5}, BlockSize: 2}
	want := [][]int32{{1, 2}, {3, 4}, {5}}
	for i, w := range want {
		if got := e.BlockTokens(i); !reflect.DeepEqual(got, w) {
			t.Errorf("block %d: %v, want %v", i, got, w)
		}
	}
	if e.BlockTokens(3) != nil || e.BlockTokens(-1) != nil {
		t.Error("out-of-range block has tokens")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	seeds := []any{
		[]any{1.5, []any{[]any{"BlockStored", []any{11, 12}, nil, []any{1, 2, 3, 4}, 2, nil, "GPU", nil}}, 0},
		omap{"ts", 2.0, "events", []any{omap{"type", "BlockRemoved", "block_hashes", []any{[]byte{1}}, "medium", "GPU"}}},
		[]any{0.0, []any{[]any{"AllBlocksCleared"}}},
	}
	for _, s := range seeds {
		f.Add(pack(f, s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p)
		if err != nil {
			return
		}
		for _, e := range b.Events {
			if s, ok := e.(*BlockStored); ok {
				for i := range s.BlockHashes {
					_ = s.BlockTokens(i)
				}
			}
		}
	})
}

func ExampleDecodeBatch() {
	// An EventBatch as vLLM (array_like releases) publishes it.
	payload, _ := msgpack.Marshal([]any{1700000000.0, []any{
		[]any{"BlockStored", []any{101, 102}, nil, []any{1, 2, 3, 4}, 2, nil, "GPU", nil},
		[]any{"BlockRemoved", []any{102}, "GPU"},
	}, 0})
	b, err := DecodeBatch(payload)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range b.Events {
		switch e := e.(type) {
		case *BlockStored:
			fmt.Println(e.Type(), e.BlockHashes, "parent", e.ParentBlockHash, "block 1 tokens", e.BlockTokens(1))
		case *BlockRemoved:
			fmt.Println(e.Type(), e.BlockHashes, e.Medium)
		}
	}
	// Output:
	// BlockStored [101 102] parent none block 1 tokens [3 4]
	// BlockRemoved [102] GPU
}

func FuzzParseFrames(f *testing.F) {
	f.Add([]byte("kv@pod@m"), SeqBytes(3), pack(f, []any{1.0, []any{[]any{"AllBlocksCleared"}}}))
	f.Add([]byte(""), []byte{1}, []byte{0xc1})
	f.Fuzz(func(t *testing.T, topic, seq, payload []byte) {
		m, err := ParseFrames([][]byte{topic, seq, payload})
		if err == nil && (m.Seq < 0 || m.Topic != string(topic)) {
			t.Fatalf("parsed %+v", m)
		}
	})
}
