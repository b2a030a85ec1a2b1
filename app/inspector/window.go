// This file holds the sliding window of a model's local layers: which
// blocks of a selected sequence it covers, and the line that says so.

package inspector

import (
	"fmt"
	"image/color"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
)

// Window is a model's sliding-window attention, as the block-table view
// shows it: Local of the model's Layers layers attend only the latest Size
// positions (the newest token's own and the Size-1 before it), the others
// attend all of them. The zero value is a model without sliding-window
// layers. The cache still keeps every block of a sequence, because a block
// spans all layers and the global layers read the whole history.
type Window struct {
	Size   int // positions a sliding-window layer attends; 0: no window
	Local  int // layers with the window
	Layers int // all layers
}

// WindowOf returns the sliding window of a model's configuration (gemma3's
// local layers), or the zero Window when it has none.
func WindowOf(c *model.Config) Window {
	if c == nil || c.Window <= 0 {
		return Window{}
	}
	w := Window{Size: c.Window, Layers: c.Layers}
	for l := range c.Layers {
		if c.Local(l) {
			w.Local++
		}
	}
	if w.Local == 0 {
		return Window{}
	}
	return w
}

// WindowColor is the bar under each block of the selected sequence that
// its sliding-window layers still attend.
var WindowColor = color.RGBA{0x00, 0xe5, 0xff, 0xff}

// Span is the part of a sequence that sliding-window layers attend:
// positions First…Last, in logical blocks FromBlock…ToBlock of its block
// table. Len is the sequence's length, BlockSize the cache's.
type Span struct {
	First, Last          int
	FromBlock, ToBlock   int
	Len, BlockSize, Size int
}

// WindowSpan returns the span of seq in s that a window of size positions
// still attends: the last size positions of its tokens. ok is false when
// size is 0, s holds no seq, or seq has no token.
func WindowSpan(s *kvcache.Snapshot, seq kvcache.SeqID, size int) (sp Span, ok bool) {
	if s == nil || size <= 0 || s.BlockSize <= 0 {
		return sp, false
	}
	for _, q := range s.Seqs {
		if q.ID != seq {
			continue
		}
		if q.Len == 0 {
			return sp, false
		}
		sp = Span{First: max(0, q.Len-size), Last: q.Len - 1, Len: q.Len, BlockSize: s.BlockSize, Size: size}
		sp.FromBlock, sp.ToBlock = sp.First/s.BlockSize, sp.Last/s.BlockSize
		return sp, true
	}
	return sp, false
}

// InWindow reports whether logical block i of the sequence is in the span.
func (sp Span) InWindow(i int) bool { return i >= sp.FromBlock && i <= sp.ToBlock }

// WindowLine says in one line which positions and blocks of seq the
// sliding-window layers of w still attend, such as "sliding-window layers
// (6 of 7): the last 8 positions, 92–99, in logical blocks 23–24 (marked);
// the global layer attends all 100, so the cache keeps every block". It is
// "" when w has no window or s has no token of seq.
func WindowLine(s *kvcache.Snapshot, seq kvcache.SeqID, w Window) string {
	sp, ok := WindowSpan(s, seq, w.Size)
	if !ok {
		return ""
	}
	head := fmt.Sprintf("sliding-window layers (%d of %d, window %s)", w.Local, w.Layers, engine.Count(w.Size, "position"))
	global := w.Layers - w.Local
	if sp.First == 0 {
		return fmt.Sprintf("%s: still all %s, in %s", head, engine.Count(sp.Len, "position"), blockRange(sp))
	}
	g := fmt.Sprintf("the %s attends", engine.Count(global, "global layer"))
	if global != 1 {
		g = fmt.Sprintf("the %s attend", engine.Count(global, "global layer"))
	}
	return fmt.Sprintf("%s: only the last %d, positions %d–%d, in %s (marked); %s all %d, so the cache keeps every block",
		head, sp.Last-sp.First+1, sp.First, sp.Last, blockRange(sp), g, sp.Len)
}

// blockRange names the span's logical blocks.
func blockRange(sp Span) string {
	if sp.FromBlock == sp.ToBlock {
		return fmt.Sprintf("logical block %d", sp.FromBlock)
	}
	return fmt.Sprintf("logical blocks %d–%d", sp.FromBlock, sp.ToBlock)
}
