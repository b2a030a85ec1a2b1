package prefixcache

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"kvscope/vllm/kvevents"
)

func h(n uint64) kvevents.Hash { return kvevents.IntHash(n) }

func stored(parent uint64, tokens []int32, hashes ...uint64) *kvevents.BlockStored {
	e := &kvevents.BlockStored{BlockSize: 2, TokenIDs: tokens, LoraID: -1, GroupIdx: -1, Medium: "GPU"}
	if parent != 0 {
		e.ParentBlockHash = h(parent)
	}
	for _, x := range hashes {
		e.BlockHashes = append(e.BlockHashes, h(x))
	}
	return e
}

func removed(hashes ...uint64) *kvevents.BlockRemoved {
	e := &kvevents.BlockRemoved{GroupIdx: -1, Medium: "GPU"}
	for _, x := range hashes {
		e.BlockHashes = append(e.BlockHashes, h(x))
	}
	return e
}

func batch(ts float64, events ...kvevents.Event) kvevents.Batch {
	return kvevents.Batch{TS: ts, Events: events, DataParallelRank: -1}
}

// shape renders a tree as indented "hash(size)" lines, orphans marked.
func shape(t Tree) string {
	var sb strings.Builder
	for _, n := range t.Nodes {
		mark := ""
		if n.Orphan {
			mark = " orphan"
		}
		fmt.Fprintf(&sb, "%s%s(%d)%s\n", strings.Repeat("  ", n.Depth), n.Hash, n.Size, mark)
	}
	return sb.String()
}

func TestTreeShape(t *testing.T) {
	// Two prompts sharing a 2-block system prompt (1 → 2), then diverging.
	shared := stored(0, []int32{1, 2, 3, 4}, 1, 2)
	a := stored(2, []int32{5, 6, 7, 8}, 3, 4)
	b := stored(2, []int32{9, 10}, 5)
	tests := []struct {
		name    string
		batches []kvevents.Batch
		want    string
		blocks  int
		tokens  int
	}{{
		name:    "shared trunk",
		batches: []kvevents.Batch{batch(1, shared, a, b)},
		want:    "1(5)\n  2(4)\n    3(2)\n      4(1)\n    5(1)\n",
		blocks:  5, tokens: 10,
	}, {
		name:    "leaf evicted",
		batches: []kvevents.Batch{batch(1, shared, a, b), batch(2, removed(4))},
		want:    "1(4)\n  2(3)\n    3(1)\n    5(1)\n",
		blocks:  4, tokens: 8,
	}, {
		name:    "trunk evicted leaves orphans",
		batches: []kvevents.Batch{batch(1, shared, a, b), batch(2, removed(2))},
		want:    "3(2) orphan\n  4(1)\n1(1)\n5(1) orphan\n",
		blocks:  4, tokens: 8,
	}, {
		name:    "trunk stored again reattaches",
		batches: []kvevents.Batch{batch(1, shared, a, b), batch(2, removed(2)), batch(3, stored(1, []int32{3, 4}, 2))},
		want:    "1(5)\n  2(4)\n    3(2)\n      4(1)\n    5(1)\n",
		blocks:  5, tokens: 10,
	}, {
		name:    "cleared",
		batches: []kvevents.Batch{batch(1, shared, a), batch(2, &kvevents.AllBlocksCleared{}), batch(3, b)},
		want:    "5(1) orphan\n",
		blocks:  1, tokens: 2,
	}, {
		name:    "unknown removal and unknown event change nothing",
		batches: []kvevents.Batch{batch(1, shared), batch(2, removed(99), &kvevents.UnknownEvent{Tag: "X"})},
		want:    "1(2)\n  2(1)\n",
		blocks:  2, tokens: 4,
	}, {
		name:    "cycle from bad events is broken",
		batches: []kvevents.Batch{batch(1, stored(8, []int32{1, 2}, 7), stored(7, []int32{3, 4}, 8))},
		want:    "7(2)\n  8(1)\n",
		blocks:  2, tokens: 4,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{})
			for _, b := range tt.batches {
				c.Apply(b)
			}
			tr := c.Tree()
			if got := shape(tr); got != tt.want {
				t.Errorf("tree:\n%s\nwant:\n%s", got, tt.want)
			}
			s := c.Stats()
			if tr.Blocks != tt.blocks || s.Blocks != tt.blocks || tr.Tokens != tt.tokens || s.Tokens != tt.tokens {
				t.Errorf("blocks %d/%d tokens %d/%d, want %d %d", tr.Blocks, s.Blocks, tr.Tokens, s.Tokens, tt.blocks, tt.tokens)
			}
			if !strings.HasPrefix(tt.name, "cycle") && s.Roots != len(tr.Roots) {
				t.Errorf("Stats.Roots %d, tree has %d roots", s.Roots, len(tr.Roots))
			}
		})
	}
}

func TestChainTokens(t *testing.T) {
	c := New(Options{})
	c.Apply(batch(1, stored(0, []int32{1, 2, 3, 4}, 1, 2), stored(2, []int32{5, 6}, 3)))
	tr := c.Tree()
	leaf := -1
	for i, n := range tr.Nodes {
		if n.Hash == h(3) {
			leaf = i
		}
	}
	if got, want := tr.ChainTokens(leaf), []int32{1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Errorf("chain tokens %v, want %v", got, want)
	}
	b, ok := c.Block(Key{Group: -1, Hash: h(2)})
	if !ok || !reflect.DeepEqual(b.Tokens, []int32{3, 4}) || b.Parent != h(1) || b.Stores != 1 {
		t.Errorf("block 2: %+v %v", b, ok)
	}
}

func TestEvictionsAndMedia(t *testing.T) {
	c := New(Options{MaxEvictions: 3})
	cpu := stored(0, []int32{1, 2}, 1)
	cpu.Medium = "CPU"
	c.Apply(batch(10, stored(0, []int32{1, 2}, 1), cpu))
	if b, _ := c.Block(Key{-1, h(1)}); !reflect.DeepEqual(b.Media, []string{"CPU", "GPU"}) || b.Stores != 2 {
		t.Fatalf("media %v stores %d", b.Media, b.Stores)
	}
	c.Apply(batch(11, removed(1))) // GPU copy goes, CPU copy stays
	if c.Len() != 1 {
		t.Fatalf("block gone with a copy left on CPU")
	}
	rm := removed(1)
	rm.Medium = "CPU"
	c.Apply(batch(12, rm, removed(42)))
	if c.Len() != 0 {
		t.Fatal("block kept after both copies went")
	}
	c.Apply(batch(13, stored(0, []int32{7, 8}, 5), &kvevents.AllBlocksCleared{}))
	ev, next := c.EvictionsSince(0)
	if next != 4 || len(ev) != 3 {
		t.Fatalf("next %d, %d kept; want 4, 3", next, len(ev))
	}
	// The oldest went from the ring; the kept ones are CPU 1, unknown 42, clear.
	if ev[0].Medium != "CPU" || !ev[0].Known || ev[0].Tokens != 2 || ev[0].Time.Unix() != 12 {
		t.Errorf("eviction 0: %+v", ev[0])
	}
	if ev[1].Hash != h(42) || ev[1].Known {
		t.Errorf("eviction 1: %+v", ev[1])
	}
	if !ev[2].Cleared || ev[2].Count != 1 || !ev[2].Time.Equal(time.Unix(13, 0)) {
		t.Errorf("eviction 2: %+v", ev[2])
	}
	if more, n := c.EvictionsSince(next); len(more) != 0 || n != next {
		t.Errorf("nothing new, got %v %d", more, n)
	}
	s := c.Stats()
	if s.Stored != 3 || s.Removed != 3 || s.UnknownRemove != 1 || s.Clears != 1 || s.Batches != 4 || s.Last.Unix() != 13 {
		t.Errorf("stats %+v", s)
	}
}

func TestGroupsAndBytesHashes(t *testing.T) {
	c := New(Options{})
	e := &kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte{1}), kvevents.BytesHash([]byte{2})},
		TokenIDs: []int32{1, 2}, BlockSize: 1, GroupIdx: 0}
	e1 := *e
	e1.GroupIdx = 1
	c.Apply(batch(1, e, &e1))
	tr := c.Tree()
	if len(tr.Roots) != 2 || tr.Blocks != 4 {
		t.Fatalf("two groups' chains: %s", shape(tr))
	}
	c.Apply(batch(2, &kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte{2})}, GroupIdx: 1}))
	if _, ok := c.Block(Key{Group: 0, Hash: kvevents.BytesHash([]byte{2})}); !ok {
		t.Error("a removal in group 1 took group 0's block")
	}
	if c.AddHits(Key{Group: 0, Hash: kvevents.BytesHash([]byte{1})}, 3); c.Stats().Hits != 3 {
		t.Error("hits not counted")
	}
	if c.AddHits(Key{Group: 5, Hash: kvevents.BytesHash([]byte{1})}, 3) {
		t.Error("hits on an unknown block")
	}
}

func TestDeepChain(t *testing.T) {
	c := New(Options{})
	const n = 20000
	var events []kvevents.Event
	for i := uint64(1); i <= n; i++ {
		events = append(events, stored(i-1, []int32{1, 2}, i))
	}
	c.Apply(batch(1, events...))
	tr := c.Tree()
	if len(tr.Roots) != 1 || tr.Nodes[0].Size != n || tr.Nodes[n-1].Depth != n-1 {
		t.Errorf("roots %d size %d", len(tr.Roots), tr.Nodes[0].Size)
	}
}

func ExampleCache_Tree() {
	c := New(Options{})
	// A shared system prompt (blocks 1, 2) and two conversations after it.
	c.Apply(kvevents.Batch{TS: 1, Events: []kvevents.Event{
		&kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(1), kvevents.IntHash(2)}, TokenIDs: []int32{10, 11, 12, 13}, BlockSize: 2, GroupIdx: -1},
		&kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(3)}, ParentBlockHash: kvevents.IntHash(2), TokenIDs: []int32{20, 21}, BlockSize: 2, GroupIdx: -1},
		&kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(4)}, ParentBlockHash: kvevents.IntHash(2), TokenIDs: []int32{30, 31}, BlockSize: 2, GroupIdx: -1},
	}})
	for _, n := range c.Tree().Nodes {
		fmt.Printf("%s%v: %d blocks under it, tokens %v\n", strings.Repeat("  ", n.Depth), n.Hash, n.Size, n.Tokens)
	}
	// Output:
	// 1: 4 blocks under it, tokens [10 11]
	//   2: 3 blocks under it, tokens [12 13]
	//     3: 1 blocks under it, tokens [20 21]
	//     4: 1 blocks under it, tokens [30 31]
}

func TestChurn(t *testing.T) {
	c := New(Options{})
	if s, r := c.Churn(time.Minute); s != 0 || r != 0 {
		t.Errorf("empty: %v %v", s, r)
	}
	c.Apply(batch(100, stored(0, nil, 1, 2)))       // 2 stored
	c.Apply(batch(101, stored(2, nil, 3, 4, 5, 6))) // 4 stored
	c.Apply(batch(102, removed(6, 5)))              // 2 removed
	c.Apply(batch(104, removed(4, 3)))              // 2 removed
	tests := []struct {
		window         time.Duration
		stored, remove float64
	}{
		{time.Minute, 1, 1},           // 100..104: 4 stored, 4 removed in 4 s
		{3 * time.Second, 0, 4.0 / 3}, // 101..104
		{time.Second, 0, 0},           // only the last batch
	}
	for _, tt := range tests {
		if s, r := c.Churn(tt.window); s != tt.stored || r != tt.remove {
			t.Errorf("Churn(%v) = %v, %v; want %v, %v", tt.window, s, r, tt.stored, tt.remove)
		}
	}
}

// TestRandomEventsInvariants: whatever the events (parents stored or not,
// hashes reused, removals of unknown blocks, clears), the tree holds every
// cached block once and the figures agree.
func TestRandomEventsInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := New(Options{MaxEvictions: 50})
	for b := range 300 {
		var events []kvevents.Event
		for range 10 {
			switch r := rng.IntN(100); {
			case r == 0:
				events = append(events, &kvevents.AllBlocksCleared{})
			case r < 40:
				events = append(events, removed(uint64(1+rng.IntN(200)), uint64(1+rng.IntN(200))))
			default:
				var parent uint64
				if rng.IntN(3) > 0 {
					parent = uint64(1 + rng.IntN(200))
				}
				var hashes []uint64
				var tokens []int32
				for range 1 + rng.IntN(3) {
					hashes = append(hashes, uint64(1+rng.IntN(200)))
					tokens = append(tokens, int32(rng.IntN(100)), int32(rng.IntN(100)))
				}
				events = append(events, stored(parent, tokens[:len(tokens)-rng.IntN(2)], hashes...))
			}
		}
		c.Apply(batch(float64(b), events...))
		tr := c.Tree()
		s := c.Stats()
		if tr.Blocks != c.Len() || len(tr.Nodes) != c.Len() || s.Blocks != c.Len() {
			t.Fatalf("batch %d: tree %d blocks, %d nodes; cache %d", b, tr.Blocks, len(tr.Nodes), c.Len())
		}
		if tr.Tokens != s.Tokens {
			t.Fatalf("batch %d: tree %d tokens, stats %d", b, tr.Tokens, s.Tokens)
		}
		sum := 0
		seen := map[Key]bool{}
		for _, i := range tr.Roots {
			sum += tr.Nodes[i].Size
		}
		for i, n := range tr.Nodes {
			if seen[n.Key] {
				t.Fatalf("batch %d: %v twice", b, n.Key)
			}
			seen[n.Key] = true
			kids := 1
			for _, k := range n.Children {
				kids += tr.Nodes[k].Size
				if tr.Nodes[k].Up != i || tr.Nodes[k].Depth != n.Depth+1 {
					t.Fatalf("batch %d: child links broken", b)
				}
			}
			if kids != n.Size {
				t.Fatalf("batch %d: node %v size %d, children sum to %d", b, n.Key, n.Size, kids)
			}
		}
		if sum != tr.Blocks {
			t.Fatalf("batch %d: roots' sizes sum to %d of %d", b, sum, tr.Blocks)
		}
	}
}
