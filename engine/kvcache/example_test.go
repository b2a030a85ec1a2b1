package kvcache_test

import (
	"fmt"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
)

// newCache makes a manager over a small real K/V store: 2 layers, 1 KV head
// of 8 dims, f16, 32 blocks of 16 tokens.
func newCache() (*kvcache.Manager, *kvstore.Store) {
	sc := kvstore.Config{Layers: 2, KVHeads: 1, HeadDim: 8, BlockSize: 16, Blocks: 32, K: kvstore.F16, V: kvstore.F16}
	st, err := kvstore.New(sc)
	if err != nil {
		panic(err)
	}
	bb := kvstore.BlockBytes(sc)
	m, err := kvcache.New(kvcache.Config{BlockSize: 16, BlockBytes: bb, Budget: int64(32 * bb),
		KPrecision: "f16", VPrecision: "f16"}, st)
	if err != nil {
		panic(err)
	}
	return m, st
}

// A second request with the same 100-token system prompt reuses its six
// full blocks: the engine computes only the rest.
func Example_prefixReuse() {
	m, _ := newCache()
	system := make([]int32, 100)
	for i := range system {
		system[i] = int32(1000 + i)
	}

	first := append(append([]int32{}, system...), 1, 2, 3)
	r, _ := m.Allocate(1, first, kvcache.SeqOptions{})
	fmt.Println("request 1 computes tokens", r.Computed, "to", m.Len(1)-1)
	// ... the engine's forward pass writes their K/V, then:
	m.Commit(1, m.Len(1))
	m.Free(1)

	second := append(append([]int32{}, system...), 7, 8)
	r, _ = m.Allocate(2, second, kvcache.SeqOptions{})
	fmt.Println("request 2 computes tokens", r.Computed, "to", m.Len(2)-1)

	x := m.Metrics()
	fmt.Printf("prefix cache: %d of %d prompt tokens hit\n", x.PrefixHitTokens, x.PrefixQueryTokens)
	// Output:
	// request 1 computes tokens 0 to 102
	// request 2 computes tokens 96 to 101
	// prefix cache: 96 of 205 prompt tokens hit
}

// Two samples share their prompt's blocks; the first to write into the
// shared, partly filled last block gets its own copy.
func ExampleManager_Fork() {
	m, _ := newCache()
	prompt := make([]int32, 20) // one full block and 4 tokens
	m.Allocate(1, prompt, kvcache.SeqOptions{})
	m.Commit(1, 20)
	m.Fork(1, 2)
	fmt.Println("shared:", m.BlockTable(1), m.BlockTable(2))

	m.Append(1, []int32{42}) // sample 1's next token
	m.Append(2, []int32{17}) // sample 2's: its block is no longer shared
	fmt.Println("after:", m.BlockTable(1), m.BlockTable(2))
	fmt.Println("copies on write:", m.Metrics().CoWCopies)
	// Output:
	// shared: [0 1] [0 1]
	// after: [0 2] [0 1]
	// copies on write: 1
}
