// This file holds the heatmap widget: the raster of blocks, hover and
// selection.

package inspector

import (
	"fmt"
	"image"
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// Heatmap is a widget that draws every block of a snapshot's pool into one
// raster image (see Render). Hovering a block reports its details through
// OnHover; tapping a used block selects its first owner and draws that
// sequence's block table.
type Heatmap struct {
	widget.BaseWidget

	// OnHover is called with a block's description when the pointer moves
	// onto a block, and with "" when it leaves the blocks.
	OnHover func(details string)
	// OnSelect is called when a tap selects a sequence (ok true) or clears
	// the selection (ok false).
	OnSelect func(seq kvcache.SeqID, ok bool)
	// Name names a sequence in details (such as "conversation 3"); nil
	// writes "sequence N".
	Name func(kvcache.SeqID) string

	mu     sync.Mutex // guards the fields below: the raster draws on the render thread
	snap   *kvcache.Snapshot
	view   View
	img    *image.RGBA
	grid   Grid
	raster *canvas.Raster
	frames int
}

// NewHeatmap returns an empty heatmap in owner mode.
func NewHeatmap() *Heatmap {
	h := &Heatmap{}
	h.raster = canvas.NewRaster(h.generate)
	h.raster.ScaleMode = canvas.ImageScalePixels
	h.ExtendBaseWidget(h)
	return h
}

// generate is the raster's generator: it renders the current snapshot at
// the raster's pixel size into a reused image.
func (h *Heatmap) generate(w, ht int) image.Image {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.img == nil || h.img.Bounds().Dx() != w || h.img.Bounds().Dy() != ht {
		h.img = image.NewRGBA(image.Rect(0, 0, w, ht))
	}
	h.grid = Render(h.img, h.snap, h.view)
	h.frames++
	return h.img
}

// Frames returns how many times the heatmap has been drawn.
func (h *Heatmap) Frames() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.frames
}

// SetSnapshot shows s and redraws.
func (h *Heatmap) SetSnapshot(s *kvcache.Snapshot) {
	h.mu.Lock()
	h.snap = s
	h.mu.Unlock()
	h.raster.Refresh()
}

// Snapshot returns the snapshot shown.
func (h *Heatmap) Snapshot() *kvcache.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap
}

// SetMode changes the colour mode and redraws.
func (h *Heatmap) SetMode(m Mode) {
	h.mu.Lock()
	h.view.Mode = m
	h.mu.Unlock()
	h.raster.Refresh()
}

// Mode returns the colour mode.
func (h *Heatmap) Mode() Mode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view.Mode
}

// SetGroup sets how sequences map to owner colours (nil: by sequence id).
func (h *Heatmap) SetGroup(group func(kvcache.SeqID) int64) {
	h.mu.Lock()
	h.view.Group = group
	h.mu.Unlock()
	h.raster.Refresh()
}

// Select draws seq's block table (ok true) or clears the selection.
func (h *Heatmap) Select(seq kvcache.SeqID, ok bool) {
	h.mu.Lock()
	h.view.Selected, h.view.Selecting = seq, ok
	h.mu.Unlock()
	h.raster.Refresh()
}

// SetWindow sets the sliding window of the model's windowed layers, in
// positions (0: none), whose blocks the selected sequence's table marks.
func (h *Heatmap) SetWindow(size int) {
	h.mu.Lock()
	h.view.Window = max(size, 0)
	h.mu.Unlock()
	h.raster.Refresh()
}

// Selected returns the selected sequence, if any.
func (h *Heatmap) Selected() (kvcache.SeqID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view.Selected, h.view.Selecting
}

// Grid returns the grid of the last drawing.
func (h *Heatmap) Grid() Grid {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grid
}

// cellAt converts a position in the widget to the cell under it, using the
// last drawing's grid (in pixels) and the widget's size (in Fyne units).
func (h *Heatmap) cellAt(pos fyne.Position) int {
	size := h.Size()
	h.mu.Lock()
	defer h.mu.Unlock()
	if size.Width <= 0 || size.Height <= 0 || h.grid.Width == 0 {
		return -1
	}
	x := int(pos.X * float32(h.grid.Width) / size.Width)
	y := int(pos.Y * float32(h.grid.Height) / size.Height)
	return h.grid.CellAt(x, y)
}

// blockAt returns the block under pos and its description.
func (h *Heatmap) blockAt(pos fyne.Position) (cell int, bi *kvcache.BlockInfo, details string) {
	cell = h.cellAt(pos)
	h.mu.Lock()
	s, g := h.snap, h.grid
	h.mu.Unlock()
	if cell < 0 || s == nil {
		return -1, nil, ""
	}
	idx, host, ok := g.Block(cell)
	switch {
	case !ok:
		return -1, nil, ""
	case host && idx < len(s.Host):
		bi = &s.Host[idx]
	case !host && idx < len(s.Blocks):
		bi = &s.Blocks[idx]
	default:
		return -1, nil, ""
	}
	return cell, bi, DescribeBlock(s, bi, h.Name)
}

// MouseIn is called when the pointer enters the heatmap.
func (h *Heatmap) MouseIn(e *desktop.MouseEvent) { h.MouseMoved(e) }

// MouseMoved outlines the block under the pointer and reports its details.
func (h *Heatmap) MouseMoved(e *desktop.MouseEvent) {
	cell, _, details := h.blockAt(e.Position)
	h.mu.Lock()
	changed := h.view.Hovering != (cell >= 0) || (cell >= 0 && h.view.HoverCell != cell)
	h.view.HoverCell, h.view.Hovering = cell, cell >= 0
	h.mu.Unlock()
	if changed {
		h.raster.Refresh()
		if h.OnHover != nil {
			h.OnHover(details)
		}
	}
}

// MouseOut clears the hover outline.
func (h *Heatmap) MouseOut() {
	h.mu.Lock()
	was := h.view.Hovering
	h.view.Hovering = false
	h.mu.Unlock()
	if was {
		h.raster.Refresh()
		if h.OnHover != nil {
			h.OnHover("")
		}
	}
}

// Tapped selects the first owner of the tapped block, or clears the
// selection when the block has no owner.
func (h *Heatmap) Tapped(e *fyne.PointEvent) {
	_, bi, _ := h.blockAt(e.Position)
	if bi == nil || len(bi.Owners) == 0 {
		h.Select(0, false)
		if h.OnSelect != nil {
			h.OnSelect(0, false)
		}
		return
	}
	seq := bi.Owners[0]
	for _, o := range bi.Owners {
		seq = min(seq, o)
	}
	h.Select(seq, true)
	if h.OnSelect != nil {
		h.OnSelect(seq, true)
	}
}

// MinSize keeps the heatmap usable, and leaves the gauges and the history
// their room in a 1024×700 window.
func (h *Heatmap) MinSize() fyne.Size { return fyne.NewSize(240, 100) }

// CreateRenderer returns the heatmap's renderer: one raster.
func (h *Heatmap) CreateRenderer() fyne.WidgetRenderer {
	return widget.NewSimpleRenderer(h.raster)
}

// DescribeBlock says in one line what a block holds, for hover details.
func DescribeBlock(s *kvcache.Snapshot, bi *kvcache.BlockInfo, name func(kvcache.SeqID) string) string {
	if name == nil {
		name = func(id kvcache.SeqID) string { return fmt.Sprintf("sequence %d", id) }
	}
	var b strings.Builder
	if bi.Location == kvcache.Host {
		fmt.Fprintf(&b, "host block %d (swapped out)", bi.ID)
	} else {
		fmt.Fprintf(&b, "block %d: %s", bi.ID, bi.State)
	}
	if bi.State == kvcache.BlockFree {
		return b.String()
	}
	if len(bi.Owners) > 0 {
		names := make([]string, len(bi.Owners))
		for i, o := range bi.Owners {
			names[i] = name(o)
		}
		fmt.Fprintf(&b, ", held by %s", strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "; %d/%d slots; K %s, V %s; ref %d", bi.Filled, s.BlockSize, bi.KPrecision, bi.VPrecision, bi.Ref)
	if bi.Hashed {
		fmt.Fprintf(&b, "; in prefix cache (hash %x…, %d hits)", bi.Hash[:4], bi.Hits)
	}
	if age := s.Step - bi.LastAccess; age == 0 {
		b.WriteString("; used this step")
	} else {
		fmt.Fprintf(&b, "; idle %s", engine.Count(int(age), "step"))
	}
	return b.String()
}

// BlockTable says in words how seq's logical blocks map to physical ones,
// such as "logical → physical: 0→4 1→9 2→10", or "" when s has no seq.
func BlockTable(s *kvcache.Snapshot, seq kvcache.SeqID) string {
	if s == nil {
		return ""
	}
	for _, q := range s.Seqs {
		if q.ID != seq {
			continue
		}
		var b strings.Builder
		ids, where := q.Blocks, "device"
		if q.Swapped {
			ids, where = q.HostBlocks, "host"
		}
		fmt.Fprintf(&b, "%s in %d %s %s; logical → physical:", engine.Count(q.Len, "token"), len(ids), where, engine.Plural(len(ids), "block"))
		for i, id := range ids {
			if i == 64 {
				fmt.Fprintf(&b, " … (%d more)", len(ids)-64)
				break
			}
			fmt.Fprintf(&b, " %d→%d", i, id)
		}
		return b.String()
	}
	return ""
}
