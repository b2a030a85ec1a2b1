package kvcache

import (
	"fmt"
	"slices"
)

// Overflow reports what an overflow policy did to a sequence and what the
// engine must do about it. The contract rests on one rule: a token's RoPE
// position is its index in Manager.Tokens, always.
//
// RollingWindow: tokens [DroppedFrom, DroppedTo) were removed, whole blocks
// of them, right after the sink blocks. The tokens now at indices
// [RotateFrom, RotateTo) kept their K/V but moved Shift positions down, so
// the engine must rotate their keys by -Shift positions (RoPE composes:
// rotating by the angle of -Shift re-positions a key) in every layer before
// the next attention. Their blocks are private to the sequence (shared ones
// were copied, Copied counts them) and no longer in the prefix cache, since
// their K/V now depend on a history nobody else has.
//
// TruncateMiddle: tokens [DroppedFrom, DroppedTo) were removed (indices
// counted before removal, new tokens included). Nothing needs rotating; the
// result's Start (or AllocResult.Computed) says from where the engine must
// recompute every token, which gives exact K/V for the shortened text.
type Overflow struct {
	Policy                 OverflowPolicy // the policy that acted
	DroppedFrom, DroppedTo int            // token indices removed, before removal
	Shift                  int            // RollingWindow: positions kept tokens moved down
	RotateFrom, RotateTo   int            // RollingWindow: indices, after removal, of keys to rotate by -Shift
	Copied                 int            // blocks copied to make the rotated blocks private
}

func (m *Manager) sinkBlocks(sinks int) int { return sinkBlocks(sinks, m.cfg.BlockSize) }

func sinkBlocks(sinks, blockSize int) int { return (sinks + blockSize - 1) / blockSize }

// DefaultSinks is the number of attention-sink tokens when Config.Sinks
// and SeqOptions.Sinks are 0.
const DefaultSinks = 4

// MinLimit is the shortest context limit under which policy pol can work
// with the given sink tokens (0: DefaultSinks) and block size: a rolling
// window needs its sink blocks and two more, truncation its head twice over
// and two tokens. Stop works with any limit.
func MinLimit(pol OverflowPolicy, sinks, blockSize int) int {
	if sinks == 0 {
		sinks = DefaultSinks
	}
	switch pol {
	case RollingWindow:
		return (sinkBlocks(sinks, blockSize) + 2) * blockSize
	case TruncateMiddle:
		return 2*sinks + 2
	}
	return 1
}

// CheckLimit refuses a context limit too short for its overflow policy
// (see MinLimit); a limit of 0 (none) always passes. The manager checks
// every sequence with it, and the engine checks settings and requests with
// it before anything runs.
func CheckLimit(limit int, pol OverflowPolicy, sinks, blockSize int) error {
	if sinks == 0 {
		sinks = DefaultSinks
	}
	if limit == 0 || limit >= MinLimit(pol, sinks, blockSize) {
		return nil
	}
	if pol == RollingWindow {
		return fmt.Errorf("kvcache: a rolling window with %d sink tokens and blocks of %d tokens needs a context limit of at least %d tokens, got %d",
			sinks, blockSize, MinLimit(pol, sinks, blockSize), limit)
	}
	return fmt.Errorf("kvcache: truncating the middle while keeping %d head tokens needs a context limit of at least %d tokens, got %d",
		sinks, MinLimit(pol, sinks, blockSize), limit)
}

// roll makes room for n more tokens in s by dropping whole blocks after the
// sink blocks (StreamingLLM). On error nothing changes.
func (m *Manager) roll(s *sequence, n int) (*Overflow, error) {
	bs := m.cfg.BlockSize
	sb := m.sinkBlocks(s.sinks)
	over := len(s.tokens) + n - s.limit
	d := (over + bs - 1) / bs
	if sb+d > len(s.tokens)/bs {
		return nil, &ContextLimitError{Seq: s.id, Limit: s.limit, Len: len(s.tokens), Adding: n, Policy: RollingWindow,
			Detail: fmt.Sprintf("the rolling window drops whole blocks between the %d sink tokens and the newest block; appending %d tokens at once needs %d such blocks, the sequence has %d",
				sb*bs, n, d, len(s.tokens)/bs-sb)}
	}
	lo, hi := sb, sb+d // logical blocks dropped
	newLen := len(s.tokens) - d*bs
	ov := &Overflow{Policy: RollingWindow, DroppedFrom: lo * bs, DroppedTo: hi * bs, Shift: d * bs, RotateFrom: lo * bs}
	if m.p.contiguous {
		used := m.BlocksFor(len(s.tokens))
		if hi < used && m.st == nil {
			return nil, fmt.Errorf("rolling window of sequence %d moves blocks: %w", s.id, ErrNoStorage)
		}
		for i := hi; i < used; i++ {
			m.st.Copy(s.blocks[i-d], s.blocks[i])
			ov.Copied++
		}
		for i := used - d; i < used; i++ {
			m.resetBlock(s.blocks[i]) // now past the end: written afresh later
		}
		m.c.shiftCopies += int64(ov.Copied)
	} else {
		freed, cows := 0, 0
		for _, b := range s.blocks[lo:hi] {
			if m.p.blocks[b].ref == 1 {
				freed++
			}
		}
		for _, b := range s.blocks[hi:] {
			if m.p.blocks[b].ref > 1 {
				cows++
			}
		}
		fresh := m.BlocksFor(newLen+n) - (len(s.blocks) - d)
		if need, avail := cows+fresh, m.p.available()+freed; need > avail {
			return nil, &NoSpaceError{Op: "append", Seq: s.id, Need: need, Available: avail}
		}
		if cows > 0 && m.st == nil {
			return nil, fmt.Errorf("rolling window of sequence %d copies shared blocks: %w", s.id, ErrNoStorage)
		}
		dropped := slices.Clone(s.blocks[lo:hi])
		serial := m.nextSerial()
		for i := hi - 1; i >= lo; i-- {
			m.p.release(s.blocks[i], s.id, m.step, serial)
		}
		s.blocks = slices.Delete(s.blocks, lo, hi)
		for i := lo; i < len(s.blocks); i++ {
			if m.p.blocks[s.blocks[i]].ref > 1 {
				m.cow(s, i, "rolling window re-positions the keys of a shared block")
				ov.Copied++
			} else {
				m.p.unpublish(s.blocks[i])
			}
		}
		m.emit(EventFree, s.id, dropped, d*bs, 0, "rolling window dropped middle blocks")
	}
	s.tokens = slices.Delete(s.tokens, lo*bs, hi*bs)
	s.hashes = s.hashes[:min(len(s.hashes), sb)]
	s.published = min(s.published, sb)
	s.noCache = true
	switch {
	case s.computed >= hi*bs:
		s.computed -= d * bs
	case s.computed > lo*bs:
		s.computed = lo * bs
	}
	if m.p.contiguous {
		m.fill(s, 0, m.BlocksFor(len(s.tokens)+d*bs))
	}
	ov.RotateTo = max(s.computed, ov.RotateFrom)
	m.c.overflows++
	m.emit(EventOverflow, s.id, nil, d*bs, 0,
		fmt.Sprintf("rolling window: dropped tokens %d to %d; keys %d to %d move %d positions down", lo*bs, hi*bs-1, ov.RotateFrom, ov.RotateTo-1, d*bs))
	return ov, nil
}

// truncate applies TruncateMiddle to s while appending tokens: it keeps the
// first s.sinks tokens and the most recent ones, half the limit in all, and
// recomputes everything after the head's whole blocks.
func (m *Manager) truncate(s *sequence, tokens []int32) (AppendResult, error) {
	bs := m.cfg.BlockSize
	all := slices.Concat(s.tokens, tokens)
	head := s.sinks
	target := max(s.limit/2, head+len(tokens))
	if target > s.limit {
		return AppendResult{}, &ContextLimitError{Seq: s.id, Limit: s.limit, Len: len(s.tokens), Adding: len(tokens), Policy: TruncateMiddle,
			Detail: fmt.Sprintf("keeping %d head tokens plus the %d new ones exceeds the limit", head, len(tokens))}
	}
	from, to := head, len(all)-(target-head)
	list := slices.Concat(all[:from], all[to:])
	keep := min(head, s.computed) / bs // whole blocks of the head, already computed, stay
	if !m.p.contiguous {
		freed := 0
		for _, b := range s.blocks[keep:] {
			if m.p.blocks[b].ref == 1 {
				freed++
			}
		}
		if need, avail := m.BlocksFor(len(list))-keep, m.p.available()+freed; need > avail {
			return AppendResult{}, &NoSpaceError{Op: "append", Seq: s.id, Need: need, Available: avail}
		}
		dropped := slices.Clone(s.blocks[keep:])
		serial := m.nextSerial()
		for i := len(s.blocks) - 1; i >= keep; i-- {
			m.p.release(s.blocks[i], s.id, m.step, serial)
		}
		s.blocks = s.blocks[:keep]
		s.published = min(s.published, keep)
		s.tokens = list
		m.emit(EventFree, s.id, dropped, 0, 0, "truncate middle: recomputing the kept tail")
		hits, err := m.place(s, keep, "truncate middle")
		if err != nil { // cannot happen: space was checked with the freed blocks
			return AppendResult{}, err
		}
		m.c.prefixQueries += int64(len(list) - keep*bs)
		m.c.prefixHits += int64(hits * bs)
	} else {
		s.tokens = list
		for _, b := range s.blocks[keep:] {
			m.resetBlock(b) // rewritten from scratch by the recomputation
		}
		m.fill(s, keep, m.BlocksFor(len(all)))
		s.computed = keep * bs
	}
	m.c.overflows++
	ov := &Overflow{Policy: TruncateMiddle, DroppedFrom: from, DroppedTo: to}
	m.emit(EventOverflow, s.id, nil, to-from, 0,
		fmt.Sprintf("truncate middle: dropped tokens %d to %d; recompute from %d", from, to-1, s.computed))
	return AppendResult{Start: s.computed, Overflow: ov}, nil
}
