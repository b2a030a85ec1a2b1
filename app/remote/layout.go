// This file holds the prefix-cache tree's layout as an icicle of cells.

package remote

import (
	"image"
	"image/color"
	"math"

	"kvscope/vllm/prefixcache"
)

// Cell is one node's place in the tree view, as fractions of the view's
// width and height (0..1): X0 ≤ x < X1, Y0 ≤ y < Y1.
type Cell struct{ X0, Y0, X1, Y1 float64 }

// Rect is the cell in pixels in a w×h image (at least one pixel each way).
func (c Cell) Rect(w, h int) image.Rectangle {
	x0, y0 := int(math.Floor(c.X0*float64(w))), int(math.Floor(c.Y0*float64(h)))
	x1, y1 := int(math.Floor(c.X1*float64(w))), int(math.Floor(c.Y1*float64(h)))
	x1, y1 = max(x1, x0+1), max(y1, y0+1)
	return image.Rect(x0, y0, min(x1, w), min(y1, h))
}

// Contains reports whether the point (x, y), in fractions, is in the cell.
func (c Cell) Contains(x, y float64) bool { return x >= c.X0 && x < c.X1 && y >= c.Y0 && y < c.Y1 }

// LayoutTree places a tree's nodes as an icicle, left to right: one column
// per depth (a chain's first block at the left), each node as tall as the
// blocks of its subtree (its Size) over all the blocks, and its children
// stacked inside its span, largest first. A prefix that many prompts share
// is therefore a tall trunk with its branches beside it, and a node's
// height says how many cached blocks hang on it. cells[i] is Nodes[i]'s.
func LayoutTree(t prefixcache.Tree) []Cell {
	cells := make([]Cell, len(t.Nodes))
	if len(t.Nodes) == 0 {
		return cells
	}
	depth := 0
	total := 0
	for _, i := range t.Roots {
		total += t.Nodes[i].Size
	}
	for _, n := range t.Nodes {
		depth = max(depth, n.Depth)
	}
	cols := float64(depth + 1)
	// cursor[i] is where node i's next child goes; Nodes is in depth-first
	// order with children in Children's order, so one pass places all.
	cursor := make([]float64, len(t.Nodes))
	rootY := 0.0
	for i, n := range t.Nodes {
		var y0, h float64
		if n.Up < 0 {
			y0, h = rootY, float64(n.Size)/float64(total)
			rootY += h
		} else {
			p := cells[n.Up]
			ph := p.Y1 - p.Y0
			y0, h = cursor[n.Up], ph*float64(n.Size)/float64(t.Nodes[n.Up].Size)
			cursor[n.Up] += h
		}
		cells[i] = Cell{X0: float64(n.Depth) / cols, X1: float64(n.Depth+1) / cols, Y0: y0, Y1: y0 + h}
		cursor[i] = y0
	}
	return cells
}

// The tree view's colours.
var (
	treeBackground = color.RGBA{0x1b, 0x1d, 0x23, 0xff}
	chainColor     = color.RGBA{0x2a, 0x9d, 0x8f, 0xff} // a block with one child or none
	trunkColor     = color.RGBA{0xe9, 0xa8, 0x3b, 0xff} // a block that several chains share
	orphanColor    = color.RGBA{0xd6, 0x4f, 0xd6, 0xff} // left edge: the parent is not cached
	hitColor       = color.RGBA{0xf4, 0xf1, 0xde, 0xff} // top edge: the block was hit
	selectColor    = color.RGBA{0xff, 0xff, 0xff, 0xff}
	evictColor     = color.RGBA{0xe6, 0x39, 0x46, 0xff}
)

// Mark is an eviction drawn where the block was, fading with Age (0: new,
// 1: gone).
type Mark struct {
	Cell
	Age float64
}

// RenderTree draws the laid-out tree into dst: each node a box (amber
// where several chains branch from it, teal elsewhere, brighter the more
// blocks hang on it), a magenta left edge on a root whose parent is not
// cached, a light top edge on a block with hits, the chain to the selected
// node (-1: none) outlined, and the marks of recent evictions in red.
func RenderTree(dst *image.RGBA, t prefixcache.Tree, cells []Cell, selected int, marks []Mark) {
	b := dst.Bounds()
	w, h := b.Dx(), b.Dy()
	fill(dst, b, treeBackground)
	if len(t.Nodes) == 0 {
		for _, m := range marks {
			drawMark(dst, m, w, h)
		}
		return
	}
	maxSize := 1
	for _, i := range t.Roots {
		maxSize = max(maxSize, t.Nodes[i].Size)
	}
	for i, n := range t.Nodes {
		r := cells[i].Rect(w, h).Add(b.Min)
		inner := r
		if r.Dx() >= 3 {
			inner.Max.X--
		}
		if r.Dy() >= 3 {
			inner.Max.Y--
		}
		c := chainColor
		if len(n.Children) > 1 {
			c = trunkColor
		}
		// Brighter with the subtree's share of the largest tree.
		f := 0.45 + 0.55*math.Sqrt(float64(n.Size)/float64(maxSize))
		fill(dst, inner, scale(c, f))
		if n.Orphan {
			fill(dst, image.Rect(inner.Min.X, inner.Min.Y, inner.Min.X+min(2, inner.Dx()), inner.Max.Y), orphanColor)
		}
		if n.Hits > 0 {
			fill(dst, image.Rect(inner.Min.X, inner.Min.Y, inner.Max.X, inner.Min.Y+min(2, inner.Dy())), hitColor)
		}
	}
	if selected >= 0 && selected < len(t.Nodes) {
		for _, i := range t.Chain(selected) {
			outlineRect(dst, cells[i].Rect(w, h).Add(b.Min), selectColor)
		}
	}
	for _, m := range marks {
		drawMark(dst, m, w, h)
	}
}

func drawMark(dst *image.RGBA, m Mark, w, h int) {
	if m.Age >= 1 {
		return
	}
	r := m.Cell.Rect(w, h).Add(dst.Bounds().Min)
	a := 1 - m.Age
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if !(image.Point{x, y}.In(dst.Bounds())) {
				continue
			}
			dst.SetRGBA(x, y, mix(dst.RGBAAt(x, y), evictColor, a))
		}
	}
	outlineRect(dst, r, mix(treeBackground, evictColor, a))
}

func fill(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(dst.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := dst.Pix[dst.PixOffset(r.Min.X, y):dst.PixOffset(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			row[i], row[i+1], row[i+2], row[i+3] = c.R, c.G, c.B, c.A
		}
	}
}

func outlineRect(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	fill(dst, image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1), c)
	fill(dst, image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), c)
	fill(dst, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y), c)
	fill(dst, image.Rect(r.Max.X-1, r.Min.Y, r.Max.X, r.Max.Y), c)
}

func scale(c color.RGBA, f float64) color.RGBA {
	return color.RGBA{uint8(float64(c.R) * f), uint8(float64(c.G) * f), uint8(float64(c.B) * f), c.A}
}

func mix(a, b color.RGBA, t float64) color.RGBA {
	l := func(x, y uint8) uint8 { return uint8(float64(x) + (float64(y)-float64(x))*t) }
	return color.RGBA{l(a.R, b.R), l(a.G, b.G), l(a.B, b.B), 0xff}
}
