package kvcache

import (
	"fmt"
	"slices"
)

// PreemptResult says what Preempt did.
type PreemptResult struct {
	// Mode is the mode used: Swap can fall back to Recompute (Reason says why).
	Mode PreemptMode
	// Tokens, for Recompute, are the sequence's tokens: requeue them and
	// Allocate them again later. The manager has forgotten the sequence.
	Tokens []int32
	Bytes  int64  // bytes swapped out
	Reason string // why Swap fell back to Recompute, if it did
}

// Preempt takes sequence id's device blocks back. With Recompute the
// sequence is forgotten and its tokens returned for requeueing (its hashed
// blocks stay cached, so the recomputation may be short). With Swap its
// blocks' bytes go to the host pool and SwapIn brings them back; when the
// host pool cannot hold them (or there is no Storage), Swap falls back to
// Recompute and an event says so.
func (m *Manager) Preempt(id SeqID, mode PreemptMode) (PreemptResult, error) {
	s, err := m.get(id, "preempt")
	if err != nil {
		return PreemptResult{}, err
	}
	if mode > Swap {
		return PreemptResult{}, fmt.Errorf("kvcache: preempt: unknown mode %d", mode)
	}
	reason := ""
	if mode == Swap {
		used := s.blocks
		if m.p.contiguous {
			used = s.blocks[:m.BlocksFor(len(s.tokens))]
		}
		need := int64(len(used)) * int64(m.cfg.BlockBytes)
		switch {
		case m.st == nil:
			reason = "swap needs a Storage; none was given"
		case m.hostB+need > m.cfg.HostBudget:
			reason = fmt.Sprintf("host pool full: swapping needs %d bytes, %d of %d are free", need, m.cfg.HostBudget-m.hostB, m.cfg.HostBudget)
		default:
			r, ok := m.swapOut(s, used)
			if ok {
				return r, nil
			}
			reason = fmt.Sprintf("host pool full: swapping needs %d bytes, %d of %d are free", r.Bytes, m.cfg.HostBudget-m.hostB, m.cfg.HostBudget)
		}
		m.c.swapFallbacks++
	}
	toks := slices.Clone(s.tokens)
	blocks := s.blocks
	m.releaseAll(s)
	delete(m.seqs, id)
	m.c.preemptRecompute++
	r := "recompute"
	if reason != "" {
		r = "swap fell back to recompute: " + reason
	}
	m.emit(EventPreempt, id, blocks, len(toks), 0, r)
	return PreemptResult{Mode: Recompute, Tokens: toks, Reason: reason}, nil
}

// swapOut saves s's used blocks to the host pool and frees them. It returns
// ok false, changing nothing, when the saved bytes exceed the host budget.
func (m *Manager) swapOut(s *sequence, used []int) (PreemptResult, bool) {
	var bytes int64
	saved := make([]*hostBlock, len(used))
	for i, b := range used {
		blk := &m.p.blocks[b]
		hb := &hostBlock{seq: s.id, data: m.st.Save(b, nil), filled: blk.filled, depth: i, since: m.step}
		if blk.hashed {
			hb.hashed, hb.hash, hb.parent, hb.tokens = true, blk.hash, blk.parent, slices.Clone(blk.tokens)
		}
		saved[i] = hb
		bytes += int64(len(hb.data))
	}
	if m.hostB+bytes > m.cfg.HostBudget {
		return PreemptResult{Bytes: bytes}, false
	}
	for _, hb := range saved {
		m.nextHo++
		m.host[m.nextHo] = hb
		s.host = append(s.host, m.nextHo)
	}
	m.hostB += bytes
	dev := slices.Clone(used)
	m.releaseAll(s)
	s.swapped = true
	m.nSwapped++
	m.c.preemptSwap++
	m.c.swapOutBytes += bytes
	m.emit(EventPreempt, s.id, dev, len(s.tokens), bytes, "swap")
	m.emit(EventSwapOut, s.id, dev, len(s.tokens), bytes, fmt.Sprintf("%d blocks to the host pool", len(dev)))
	return PreemptResult{Mode: Swap, Bytes: bytes}, true
}

// SwapIn brings a swapped-out sequence's blocks back to the device. In paged
// mode a block whose hash is still cached is reused instead of loaded. On
// error nothing changes (a *NoSpaceError means: free something and retry).
func (m *Manager) SwapIn(id SeqID) error {
	s, ok := m.seqs[id]
	if !ok {
		return fmt.Errorf("kvcache: swap in: unknown sequence %d", id)
	}
	if !s.swapped {
		return fmt.Errorf("kvcache: swap in: sequence %d is not swapped out", id)
	}
	if m.st == nil {
		return fmt.Errorf("swap in of sequence %d: %w", id, ErrNoStorage)
	}
	var loaded int64
	var got []int
	if m.p.contiguous {
		n := m.BlocksFor(s.limit)
		start, ok := m.p.takeRun(n, id, m.step)
		if !ok {
			return &NoSpaceError{Op: "swap in", Seq: id, Need: n, Available: m.p.nFree, LargestRun: m.p.largestRun()}
		}
		for i := range n {
			got = append(got, start+i)
		}
		for i, h := range s.host {
			if err := m.st.Load(got[i], m.host[h].data); err != nil {
				m.p.releaseRun(start, n, id, m.step)
				return fmt.Errorf("kvcache: swap in of sequence %d, block %d: %w", id, i, err)
			}
			loaded += int64(len(m.host[h].data))
		}
		s.blocks = got
		m.fill(s, 0, len(s.blocks))
	} else {
		reuse := make([]int, len(s.host))
		need, cachedReuse := 0, 0
		for i, h := range s.host {
			reuse[i] = -1
			hb := m.host[h]
			if hb.hashed {
				if b, ok, _ := m.p.lookup(hb.hash, hb.parent, hb.tokens); ok && !slices.Contains(reuse[:i], b) {
					reuse[i] = b
					if m.p.blocks[b].ref == 0 {
						cachedReuse++
					}
					continue
				}
			}
			need++
		}
		if avail := m.p.available() - cachedReuse; need > avail {
			return &NoSpaceError{Op: "swap in", Seq: id, Need: need, Available: avail}
		}
		// Hold the reused blocks first, so taking new ones cannot evict them.
		var hit []int
		got = make([]int, len(s.host))
		for i, b := range reuse {
			if b >= 0 {
				m.p.retain(b, id, m.step)
				got[i] = b
				hit = append(hit, b)
			}
		}
		for i, h := range s.host {
			if reuse[i] >= 0 {
				continue
			}
			b := m.takeBlocks(id, 1)[0]
			got[i] = b
			hb := m.host[h]
			if err := m.st.Load(b, hb.data); err != nil {
				serial := m.nextSerial()
				for j, g := range got {
					if reuse[j] >= 0 || j <= i {
						m.p.release(g, id, m.step, serial)
					}
				}
				return fmt.Errorf("kvcache: swap in of sequence %d, block %d: %w", id, i, err)
			}
			loaded += int64(len(hb.data))
		}
		s.blocks = got
		m.fill(s, 0, len(s.blocks))
		for i, h := range s.host {
			if hb := m.host[h]; reuse[i] < 0 && hb.hashed {
				m.p.publish(got[i], hb.hash, hb.parent, hb.tokens, hb.depth)
			}
		}
		if len(hit) > 0 {
			m.emit(EventCacheHit, id, hit, len(hit)*m.cfg.BlockSize, 0, "swap in found blocks still cached")
		}
	}
	m.dropHost(s)
	s.swapped = false
	m.nSwapped--
	m.c.swapInBytes += loaded
	m.emit(EventSwapIn, id, slices.Clone(got), len(s.tokens), loaded, fmt.Sprintf("%d blocks back on the device", len(got)))
	return nil
}

// dropHost frees s's host blocks.
func (m *Manager) dropHost(s *sequence) {
	for _, h := range s.host {
		m.hostB -= int64(len(m.host[h].data))
		delete(m.host, h)
	}
	s.host = nil
}
