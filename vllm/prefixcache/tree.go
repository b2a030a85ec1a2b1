package prefixcache

import (
	"slices"
	"sort"
)

// Node is one block in a Tree.
type Node struct {
	Block
	// Depth is the block's place in its chain as cached here (0 for a
	// root).
	Depth int
	// Up indexes the parent node in Tree.Nodes, -1 for a root.
	Up int
	// Children index Tree.Nodes, largest subtree first.
	Children []int
	// Size is the number of blocks in the subtree, this one included: a
	// trunk shared by many prompts has a large Size.
	Size int
	// Tokens in the subtree, this block's included.
	SubtreeTokens int
	// Orphan is true for a root whose parent hash is not cached (evicted
	// first, or stored before the events were followed).
	Orphan bool
}

// Tree is a snapshot of a Cache as a forest of hash chains, in depth-first
// order: each node's subtree follows it.
type Tree struct {
	Nodes []Node
	// Roots index Nodes, largest subtree first.
	Roots  []int
	Blocks int
	Tokens int
}

// Tree snapshots the cache as a forest.
func (c *Cache) Tree() Tree {
	c.mu.RLock()
	blocks := make(map[Key]Block, len(c.blocks))
	kids := make(map[Key][]Key, len(c.children))
	for k, b := range c.blocks {
		blocks[k] = copyBlock(b)
	}
	for pk, m := range c.children {
		if _, ok := c.blocks[pk]; !ok {
			continue
		}
		for ck := range m {
			kids[pk] = append(kids[pk], ck)
		}
	}
	c.mu.RUnlock()

	// Subtree sizes, iteratively (chains can be thousands deep).
	size := make(map[Key]int, len(blocks))
	toks := make(map[Key]int, len(blocks))
	var sizeOf func(Key)
	sizeOf = func(root Key) {
		type frame struct {
			k    Key
			next int
		}
		stack := []frame{{k: root}}
		onStack := map[Key]bool{root: true}
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.next < len(kids[f.k]) {
				ck := kids[f.k][f.next]
				f.next++
				if _, done := size[ck]; done || onStack[ck] {
					continue
				}
				onStack[ck] = true
				stack = append(stack, frame{k: ck})
				continue
			}
			s, t := 1, len(blocks[f.k].Tokens)
			for _, ck := range kids[f.k] {
				s += size[ck]
				t += toks[ck]
			}
			size[f.k], toks[f.k] = s, t
			delete(onStack, f.k)
			stack = stack[:len(stack)-1]
		}
	}
	order := func(keys []Key) {
		sort.Slice(keys, func(i, j int) bool {
			if size[keys[i]] != size[keys[j]] {
				return size[keys[i]] > size[keys[j]]
			}
			return keyLess(keys[i], keys[j])
		})
	}

	var roots []Key
	for k, b := range blocks {
		if _, ok := blocks[Key{Group: k.Group, Hash: b.Parent}]; b.Parent.IsZero() || !ok {
			roots = append(roots, k)
		}
	}
	for _, k := range roots {
		sizeOf(k)
	}
	// Blocks not reached from a root sit on a cycle (malformed events):
	// each cycle is broken at its smallest key.
	var rest []Key
	for k := range blocks {
		if _, ok := size[k]; !ok {
			rest = append(rest, k)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return keyLess(rest[i], rest[j]) })
	for _, k := range rest {
		if _, ok := size[k]; !ok {
			sizeOf(k)
			roots = append(roots, k)
		}
	}
	for k := range kids {
		order(kids[k])
	}
	order(roots)

	tr := Tree{Nodes: make([]Node, 0, len(blocks)), Blocks: len(blocks)}
	seen := make(map[Key]bool, len(blocks))
	type item struct {
		k      Key
		depth  int
		parent int
	}
	for _, rk := range roots {
		if seen[rk] {
			continue
		}
		stack := []item{{k: rk, parent: -1}}
		for len(stack) > 0 {
			it := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[it.k] {
				continue
			}
			seen[it.k] = true
			b := blocks[it.k]
			idx := len(tr.Nodes)
			tr.Nodes = append(tr.Nodes, Node{Block: b, Up: it.parent, Depth: it.depth, Size: size[it.k], SubtreeTokens: toks[it.k]})
			tr.Tokens += len(b.Tokens)
			if it.parent < 0 {
				tr.Roots = append(tr.Roots, idx)
				_, cached := blocks[Key{Group: b.Group, Hash: b.Parent}]
				tr.Nodes[idx].Orphan = !b.Parent.IsZero() && !cached
			} else {
				tr.Nodes[it.parent].Children = append(tr.Nodes[it.parent].Children, idx)
			}
			ks := kids[it.k]
			for i := len(ks) - 1; i >= 0; i-- { // pushed in reverse: popped largest first
				if !seen[ks[i]] {
					stack = append(stack, item{k: ks[i], depth: it.depth + 1, parent: idx})
				}
			}
		}
	}
	return tr
}

// Chain returns the indexes of the nodes from a root down to node i: the
// prompt prefix that node i's block ends.
func (t Tree) Chain(i int) []int {
	var out []int
	for ; i >= 0 && i < len(t.Nodes); i = t.Nodes[i].Up {
		out = append(out, i)
	}
	slices.Reverse(out)
	return out
}

// ChainTokens returns the token ids from a root down to node i, in order:
// the prompt prefix that node i's block ends, ready for a tokenizer.
func (t Tree) ChainTokens(i int) []int32 {
	var out []int32
	for _, j := range t.Chain(i) {
		out = append(out, t.Nodes[j].Tokens...)
	}
	return out
}
