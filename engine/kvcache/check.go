package kvcache

import (
	"fmt"
	"slices"
)

// Check verifies the manager's invariants and returns the first violation
// found, or nil. It is O(blocks + tokens): meant for tests and debugging
// (the engine's stress tests call it to prove no block leaked).
//
//   - every device block is exactly one of free, used or cached, and the
//     counters agree: free + used + cached = total;
//   - the free stack (paged) or free runs (contiguous) hold exactly the free
//     blocks, once each; the eviction heap holds exactly the cached blocks;
//   - each block's ref count equals its owners, and its owners are exactly
//     the sequences whose block tables list it (no sequence lists a block
//     twice);
//   - filled counts match each sequence's length; cached blocks are full;
//   - the hash map and the hashed blocks agree, and each sequence's chain
//     hashes match its tokens and the hashes of the blocks it holds;
//   - the host pool holds exactly the swapped sequences' blocks, within its
//     budget.
func (m *Manager) Check() error {
	p := m.p
	bs := m.cfg.BlockSize
	total := len(p.blocks)
	var nFree, nUsed, nCached, filled int
	for id := range p.blocks {
		b := &p.blocks[id]
		if b.ref != len(b.owners) {
			return fmt.Errorf("block %d: ref count %d but %d owners %v", id, b.ref, len(b.owners), b.owners)
		}
		if b.ref < 0 || b.filled < 0 || b.filled > bs {
			return fmt.Errorf("block %d: ref %d, filled %d (block size %d)", id, b.ref, b.filled, bs)
		}
		switch {
		case b.ref > 0:
			nUsed++
			filled += b.filled
			if b.heapIdx >= 0 {
				return fmt.Errorf("block %d: used but in the eviction heap", id)
			}
		case b.hashed && !p.contiguous:
			nCached++
			if b.heapIdx < 0 || b.heapIdx >= len(p.evictable.ids) || p.evictable.ids[b.heapIdx] != id {
				return fmt.Errorf("block %d: cached but not in the eviction heap", id)
			}
			if b.filled != bs {
				return fmt.Errorf("block %d: cached with %d of %d slots filled", id, b.filled, bs)
			}
		default:
			nFree++
			if b.heapIdx >= 0 || b.hashed || b.filled != 0 {
				return fmt.Errorf("block %d: free but heap index %d, hashed %v, filled %d", id, b.heapIdx, b.hashed, b.filled)
			}
		}
		if b.hashed {
			if got, ok := p.cache[b.hash]; !ok || got != id {
				return fmt.Errorf("block %d: hashed %s but the hash map says %d (%v)", id, b.hash, got, ok)
			}
			if HashBlock(b.parent, b.tokens) != b.hash {
				return fmt.Errorf("block %d: hash %s does not match its parent and tokens", id, b.hash)
			}
		}
	}
	if nFree+nUsed+nCached != total || nFree != p.nFree || nUsed != p.nUsed || nCached != p.nCached {
		return fmt.Errorf("counts: free %d used %d cached %d (recorded %d %d %d), total %d",
			nFree, nUsed, nCached, p.nFree, p.nUsed, p.nCached, total)
	}
	if filled != p.usedFilled {
		return fmt.Errorf("filled slots in used blocks: %d, recorded %d", filled, p.usedFilled)
	}
	if len(p.evictable.ids) != nCached {
		return fmt.Errorf("eviction heap holds %d blocks, %d are cached", len(p.evictable.ids), nCached)
	}
	for h, id := range p.cache {
		if b := &p.blocks[id]; !b.hashed || b.hash != h {
			return fmt.Errorf("hash map: %s -> block %d, which holds hash %s (hashed %v)", h, id, b.hash, b.hashed)
		}
	}
	seen := make([]bool, total)
	if p.contiguous {
		n, end := 0, -1
		for _, r := range p.runs {
			if r.n <= 0 || r.start <= end {
				return fmt.Errorf("free runs out of order or adjacent: %v", p.runs)
			}
			for id := r.start; id < r.start+r.n; id++ {
				if p.blocks[id].ref != 0 {
					return fmt.Errorf("free run %v holds used block %d", r, id)
				}
				seen[id] = true
			}
			n += r.n
			end = r.start + r.n
		}
		if n != nFree {
			return fmt.Errorf("free runs hold %d blocks, %d are free", n, nFree)
		}
	} else {
		if len(p.free) != nFree {
			return fmt.Errorf("free stack holds %d blocks, %d are free", len(p.free), nFree)
		}
		for _, id := range p.free {
			if seen[id] || p.blocks[id].ref != 0 || p.blocks[id].hashed {
				return fmt.Errorf("free stack: block %d listed twice or not free", id)
			}
			seen[id] = true
		}
	}

	// Owners against block tables.
	owners := make(map[int][]SeqID)
	var hostBytes int64
	hostSeen := make(map[int]bool)
	for id, s := range m.seqs {
		if s.id != id {
			return fmt.Errorf("sequence %d filed under %d", s.id, id)
		}
		if s.computed < 0 || s.computed > len(s.tokens) {
			return fmt.Errorf("sequence %d: computed %d of %d tokens", id, s.computed, len(s.tokens))
		}
		if s.limit > 0 && len(s.tokens) > s.limit {
			return fmt.Errorf("sequence %d: %d tokens over its limit %d", id, len(s.tokens), s.limit)
		}
		if s.swapped {
			if len(s.blocks) != 0 {
				return fmt.Errorf("sequence %d: swapped out but holds device blocks %v", id, s.blocks)
			}
			if want := m.BlocksFor(len(s.tokens)); len(s.host) != want {
				return fmt.Errorf("sequence %d: %d host blocks for %d tokens (want %d)", id, len(s.host), len(s.tokens), want)
			}
			for _, h := range s.host {
				hb, ok := m.host[h]
				if !ok || hb.seq != id || hostSeen[h] {
					return fmt.Errorf("sequence %d: host block %d missing, foreign or listed twice", id, h)
				}
				hostSeen[h] = true
				hostBytes += int64(len(hb.data))
			}
			continue
		}
		if len(s.host) != 0 {
			return fmt.Errorf("sequence %d: on the device but lists host blocks %v", id, s.host)
		}
		want := m.BlocksFor(len(s.tokens))
		if p.contiguous {
			want = m.BlocksFor(s.limit)
		}
		if len(s.blocks) != want {
			return fmt.Errorf("sequence %d: %d blocks for %d tokens (want %d)", id, len(s.blocks), len(s.tokens), want)
		}
		for i, b := range s.blocks {
			if b < 0 || b >= total {
				return fmt.Errorf("sequence %d: block table entry %d is %d, outside the pool", id, i, b)
			}
			if slices.Contains(s.blocks[:i], b) {
				return fmt.Errorf("sequence %d: block %d listed twice", id, b)
			}
			if p.contiguous && b != s.blocks[0]+i {
				return fmt.Errorf("sequence %d: contiguous reservation not adjacent: %v", id, s.blocks)
			}
			if f := min(bs, max(0, len(s.tokens)-i*bs)); p.blocks[b].filled != f {
				return fmt.Errorf("sequence %d: block %d (entry %d) has %d slots filled, want %d", id, b, i, p.blocks[b].filled, f)
			}
			owners[b] = append(owners[b], id)
		}
		// Chain hashes must match the tokens, and hashed blocks must hold them.
		var parent BlockHash
		for i, h := range s.hashes {
			if (i+1)*bs > len(s.tokens) {
				return fmt.Errorf("sequence %d: chain hash %d past its full blocks", id, i)
			}
			if HashBlock(parent, s.tokens[i*bs:(i+1)*bs]) != h {
				return fmt.Errorf("sequence %d: chain hash %d does not match its tokens", id, i)
			}
			if b := &p.blocks[s.blocks[i]]; b.hashed && b.hash != h {
				return fmt.Errorf("sequence %d: block %d holds hash %s, its chain says %s", id, s.blocks[i], b.hash, h)
			}
			parent = h
		}
		if s.noCache {
			sb := m.sinkBlocks(s.sinks)
			for i := sb; i < len(s.blocks); i++ {
				if p.blocks[s.blocks[i]].hashed {
					return fmt.Errorf("sequence %d: block %d past the sinks is hashed after a rolling-window shift", id, s.blocks[i])
				}
			}
		}
	}
	for id := range p.blocks {
		got := slices.Clone(p.blocks[id].owners)
		want := owners[id]
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("block %d: owners %v, but block tables list it for %v", id, got, want)
		}
	}
	swapped := 0
	for _, s := range m.seqs {
		if s.swapped {
			swapped++
		}
	}
	if swapped != m.nSwapped {
		return fmt.Errorf("%d sequences swapped out, %d recorded", swapped, m.nSwapped)
	}
	if len(hostSeen) != len(m.host) {
		return fmt.Errorf("host pool: %d blocks, %d belong to swapped sequences", len(m.host), len(hostSeen))
	}
	if hostBytes != m.hostB || m.hostB > m.cfg.HostBudget {
		return fmt.Errorf("host pool: %d bytes held, %d recorded, budget %d", hostBytes, m.hostB, m.cfg.HostBudget)
	}
	return nil
}
