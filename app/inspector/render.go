// This file holds the heatmap's grid of cells and its rendering of a
// snapshot into pixels.

package inspector

import (
	"image"
	"image/color"
	"math"
	"slices"

	"kvscope/engine/kvcache"
)

// Grid places a pool's blocks on a raster: device blocks first, by id, row
// by row, then (from the start of a new row) the host swap pool's blocks.
// Every cell is a square of Cell pixels, Gap of which separate it from the
// next.
type Grid struct {
	Width, Height int // the raster, in pixels
	Cols, Rows    int // cells across and down
	Cell          int // pixels from one cell to the next
	Gap           int // pixels between cells
	Device        int // device blocks: cells 0 … Device-1
	Host          int // host blocks: cells HostStart … HostStart+Host-1
	HostStart     int // cell of the first host block
}

// NewGrid fits device+host blocks into a w×h raster with the largest square
// cells that fit. When even one-pixel cells cannot hold every block, the
// cells that fall outside the raster are not drawn (Visible says so).
func NewGrid(device, host, w, h int) Grid {
	g := Grid{Width: max(w, 0), Height: max(h, 0), Device: max(device, 0), Host: max(host, 0)}
	n := g.Device + g.Host
	if n == 0 || g.Width == 0 || g.Height == 0 {
		return g
	}
	cells := func(cols int) int {
		if g.Host == 0 {
			return g.Device
		}
		return (g.Device+cols-1)/cols*cols + g.Host
	}
	c := max(1, int(math.Sqrt(float64(g.Width)*float64(g.Height)/float64(n))))
	for ; c > 1; c-- {
		cols := g.Width / c
		if cols == 0 {
			continue
		}
		if (cells(cols)+cols-1)/cols*c <= g.Height {
			break
		}
	}
	g.Cell = c
	g.Cols = max(1, g.Width/c)
	total := cells(g.Cols)
	g.Rows = (total + g.Cols - 1) / g.Cols
	g.HostStart = total - g.Host
	switch {
	case c >= 12:
		g.Gap = 2
	case c >= 4:
		g.Gap = 1
	}
	return g
}

// Cells returns the number of cells, including the empty ones that start
// the host rows.
func (g Grid) Cells() int { return g.HostStart + g.Host }

// Rect returns the pixels cell i paints (without its gap).
func (g Grid) Rect(i int) image.Rectangle {
	if g.Cols == 0 {
		return image.Rectangle{}
	}
	x, y := i%g.Cols*g.Cell, i/g.Cols*g.Cell
	return image.Rect(x, y, x+g.Cell-g.Gap, y+g.Cell-g.Gap)
}

// Visible reports whether cell i lies inside the raster.
func (g Grid) Visible(i int) bool {
	r := g.Rect(i)
	return !r.Empty() && r.Max.X <= g.Width && r.Max.Y <= g.Height
}

// Center returns the middle pixel of cell i.
func (g Grid) Center(i int) image.Point {
	r := g.Rect(i)
	return image.Pt((r.Min.X+r.Max.X-1)/2, (r.Min.Y+r.Max.Y-1)/2)
}

// CellAt returns the cell under pixel (x, y), gaps included, or -1.
func (g Grid) CellAt(x, y int) int {
	if g.Cols == 0 || x < 0 || y < 0 || x >= g.Cols*g.Cell || y >= g.Height {
		return -1
	}
	i := y/g.Cell*g.Cols + x/g.Cell
	if i >= g.Cells() {
		return -1
	}
	return i
}

// Block returns what cell i shows: a device block id (host false), a host
// block index into Snapshot.Host (host true), or ok false for no block.
func (g Grid) Block(i int) (index int, host, ok bool) {
	switch {
	case i >= 0 && i < g.Device:
		return i, false, true
	case i >= g.HostStart && i < g.HostStart+g.Host:
		return i - g.HostStart, true, true
	}
	return 0, false, false
}

// DeviceCell returns the cell of device block id.
func (g Grid) DeviceCell(id int) int { return id }

// HostCell returns the cell of the host block at index i of Snapshot.Host.
func (g Grid) HostCell(i int) int { return g.HostStart + i }

// View says how to draw a snapshot.
type View struct {
	Mode Mode
	// Selected, when Selecting, is the sequence whose blocks stay bright
	// and whose block table is drawn as a path through its blocks in
	// logical order.
	Selected  kvcache.SeqID
	Selecting bool
	// HoverCell, when Hovering, is the cell to outline.
	HoverCell int
	Hovering  bool
	// Group maps a sequence to its owner group (its conversation) for
	// owner mode; nil colours by sequence id.
	Group func(kvcache.SeqID) int64
	// Victims is how many of the next eviction victims recency mode marks
	// in red; 0 means 8.
	Victims int
	// Window, when above 0, is the sliding window of the model's windowed
	// layers, in positions: the selected sequence's blocks that hold its
	// last Window positions get a WindowColor bar along their bottom.
	Window int
}

// paint is what one cell gets: an upper and a lower colour (the same but in
// precision mode), and an outline.
type paint struct {
	top, bottom color.RGBA
	outline     bool
}

// Image renders s into a new w×h image; see Render.
func Image(s *kvcache.Snapshot, v View, w, h int) (*image.RGBA, Grid) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	return img, Render(img, s, v)
}

// Render draws every block of s into dst, one cell per block, coloured by
// v.Mode, and returns the grid it used (for hit tests). It touches only dst;
// the snapshot is read, never changed. A nil snapshot draws an empty pool.
func Render(dst *image.RGBA, s *kvcache.Snapshot, v View) Grid {
	b := dst.Bounds()
	var nDev, nHost int
	if s != nil {
		nDev, nHost = len(s.Blocks), len(s.Host)
	}
	g := NewGrid(nDev, nHost, b.Dx(), b.Dy())
	fillAll(dst, Background)
	if s == nil || g.Cols == 0 {
		return g
	}

	paints := cellPaints(s, v, g)
	var sel map[int]bool // cells of the selected sequence
	var path []int       // its cells in logical order
	var windowed []int   // of them, those its sliding-window layers attend
	if v.Selecting {
		sel = map[int]bool{}
		span, hasWindow := WindowSpan(s, v.Selected, v.Window)
		add := func(logical, cell int) {
			path = append(path, cell)
			if hasWindow && span.InWindow(logical) {
				windowed = append(windowed, cell)
			}
		}
		for _, q := range s.Seqs {
			if q.ID != v.Selected {
				continue
			}
			for i, id := range q.Blocks {
				add(i, g.DeviceCell(id))
			}
			for i, hid := range q.HostBlocks {
				if h, ok := slices.BinarySearchFunc(s.Host, hid, func(bi kvcache.BlockInfo, id int) int { return bi.ID - id }); ok {
					add(i, g.HostCell(h))
				}
			}
		}
		for _, c := range path {
			sel[c] = true
		}
	}

	origin := b.Min
	for c, p := range paints {
		if !g.Visible(c) {
			continue
		}
		if v.Selecting && !sel[c] {
			p.top, p.bottom = dim(p.top), dim(p.bottom)
			p.outline = false
		}
		r := g.Rect(c).Add(origin)
		if p.top == p.bottom {
			fillRect(dst, r, p.top)
		} else {
			mid := r.Min.Y + (r.Dy()+1)/2
			fillRect(dst, image.Rect(r.Min.X, r.Min.Y, r.Max.X, mid), p.top)
			fillRect(dst, image.Rect(r.Min.X, mid, r.Max.X, r.Max.Y), p.bottom)
		}
		if p.outline && r.Dx() >= 5 {
			outline(dst, r, MarkColor)
		}
	}

	for _, c := range windowed {
		if g.Visible(c) {
			fillRect(dst, windowBar(g.Rect(c)).Add(origin), WindowColor)
		}
	}
	for i := 1; i < len(path); i++ {
		if g.Visible(path[i-1]) && g.Visible(path[i]) {
			Line(dst, g.Center(path[i-1]).Add(origin), g.Center(path[i]).Add(origin), MarkColor)
		}
	}
	if len(path) > 0 && g.Visible(path[0]) {
		outline(dst, g.Rect(path[0]).Add(origin), MarkColor)
	}
	if v.Hovering && g.Visible(v.HoverCell) {
		r := g.Rect(v.HoverCell).Add(origin).Inset(-min(g.Gap, 1))
		outline(dst, r.Intersect(b), MarkColor)
	}
	return g
}

// windowBar is the part of a cell's rectangle r that the sliding-window
// marker paints: its lowest quarter (at least one pixel row).
func windowBar(r image.Rectangle) image.Rectangle {
	return image.Rect(r.Min.X, r.Max.Y-max(1, r.Dy()/4), r.Max.X, r.Max.Y)
}

// cellPaints decides every cell's colours: the pure colour logic of Render.
// Cells that start the host rows stay background.
func cellPaints(s *kvcache.Snapshot, v View, g Grid) []paint {
	out := make([]paint, g.Cells())
	for i := range out {
		out[i] = paint{top: Background, bottom: Background}
	}
	var maxAge int64
	if v.Mode == ByRecency {
		for i := range s.Blocks {
			if s.Blocks[i].State != kvcache.BlockFree {
				maxAge = max(maxAge, s.Step-s.Blocks[i].LastAccess)
			}
		}
		for i := range s.Host {
			maxAge = max(maxAge, s.Step-s.Host[i].LastAccess)
		}
	}
	victims := v.Victims
	if victims <= 0 {
		victims = 8
	}
	for i := range s.Blocks {
		out[g.DeviceCell(i)] = blockPaint(&s.Blocks[i], s, v, victims, maxAge)
	}
	for i := range s.Host {
		out[g.HostCell(i)] = blockPaint(&s.Host[i], s, v, victims, maxAge)
	}
	return out
}

// blockPaint colours one block under v.Mode. rank is its place in the
// eviction order (-1 when not evictable).
func blockPaint(bi *kvcache.BlockInfo, s *kvcache.Snapshot, v View, victims int, maxAge int64) paint {
	flat := func(c color.RGBA) paint { return paint{top: c, bottom: c} }
	if bi.State == kvcache.BlockFree {
		return flat(FreeColor)
	}
	cached := bi.State == kvcache.BlockCached
	switch v.Mode {
	case ByOwner:
		if len(bi.Owners) == 0 {
			return flat(CachedColor)
		}
		p := flat(OwnerColor(group(v, slices.Min(bi.Owners))))
		p.outline = bi.Ref > 1
		return p
	case ByFill:
		if cached {
			return flat(CachedColor)
		}
		return flat(FillColor(bi.Filled, s.BlockSize))
	case ByPrecision:
		k, vv := precisionPaint(bi, s.BlockSize)
		if cached {
			k, vv = dim(k), dim(vv)
		}
		return paint{top: k, bottom: vv}
	case ByRefCount:
		return flat(RefColor(bi.Ref))
	case ByRecency:
		t := ageFraction(s.Step-bi.LastAccess, maxAge)
		if !cached {
			return flat(lerp(hotColor, coldColor, t))
		}
		if rank := bi.EvictRank; bi.Location == kvcache.Device && rank >= 0 && rank < victims {
			return flat(lerp(VictimColor, VictimLastColor, float64(rank)/float64(max(1, victims-1))))
		}
		return flat(lerp(cachedHot, cachedCold, t))
	case ByLocation:
		switch {
		case bi.Location == kvcache.Host:
			return flat(HostColor)
		case cached:
			return flat(CachedColor)
		}
		return flat(DeviceColor)
	}
	return flat(FreeColor)
}

// group returns seq's owner group under v.
func group(v View, seq kvcache.SeqID) int64 {
	if v.Group != nil {
		return v.Group(seq)
	}
	return int64(seq)
}

// precisionPaint returns the colours of a block's K and V precisions. Keys
// at int8 or int4 in a block that is not full are (partly) still the f16
// residual.
func precisionPaint(bi *kvcache.BlockInfo, blockSize int) (k, v color.RGBA) {
	k, v = PrecisionColor(bi.KPrecision), PrecisionColor(bi.VPrecision)
	if (bi.KPrecision == "int8" || bi.KPrecision == "int4") && bi.State == kvcache.BlockUsed && bi.Filled < blockSize {
		k = ResidualColor
	}
	return k, v
}

// ageFraction maps an age in steps to 0…1 on a log scale, so that the
// difference between 1 and 10 steps shows as well as between 100 and 1000.
func ageFraction(age, maxAge int64) float64 {
	if maxAge <= 0 || age <= 0 {
		return 0
	}
	return math.Log1p(float64(age)) / math.Log1p(float64(maxAge))
}
