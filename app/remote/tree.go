// This file holds the TreeView widget: the prefix-cache tree drawn, hovered
// and selected.

package remote

import (
	"fmt"
	"image"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/vllm/prefixcache"
)

// MarkFade is how long an eviction stays marked on the tree view.
const MarkFade = 4 * time.Second

// maxHitLabels bounds the hit counts written on the tree at once.
const maxHitLabels = 64

// TreeView draws a prefix cache as a forest of block-hash chains
// (LayoutTree, RenderTree): shared prefixes as trunks, each node as tall as
// the blocks hanging on it, evictions marked in red where the block was as
// they happen, hit counts written on blocks where a source reports them.
// Hovering a block describes it; tapping one selects the chain that ends
// there. Call its methods on the UI goroutine.
type TreeView struct {
	widget.BaseWidget

	// OnHover gets the hovered block's description ("" when the pointer
	// leaves).
	OnHover func(string)
	// OnSelect gets the selected node's index in Tree().Nodes, -1 when the
	// selection goes (the block was evicted, or a tap on the background).
	OnSelect func(int)

	tree     prefixcache.Tree
	cells    []Cell
	byKey    map[prefixcache.Key]Cell
	marks    []timedMark
	selected int
	selKey   prefixcache.Key
	now      func() time.Time
	raster   *canvas.Raster
	frames   int
}

type timedMark struct {
	Cell
	at time.Time
}

// NewTreeView returns an empty tree view.
func NewTreeView() *TreeView {
	v := &TreeView{selected: -1, now: time.Now, byKey: map[prefixcache.Key]Cell{}}
	v.raster = canvas.NewRaster(v.generate)
	v.ExtendBaseWidget(v)
	return v
}

func (v *TreeView) generate(w, h int) image.Image {
	v.frames++
	img := image.NewRGBA(image.Rect(0, 0, max(w, 1), max(h, 1)))
	RenderTree(img, v.tree, v.cells, v.selected, v.Marks())
	return img
}

// SetTree shows a new snapshot of the cache, marking where the blocks of
// evicted (the evictions since the last call) were drawn.
func (v *TreeView) SetTree(t prefixcache.Tree, evicted []prefixcache.Eviction) {
	now := v.now()
	for _, e := range evicted {
		switch {
		case e.Cleared:
			for _, c := range v.byKey {
				v.marks = append(v.marks, timedMark{c, now})
			}
		case e.Known:
			if c, ok := v.byKey[e.Key]; ok {
				v.marks = append(v.marks, timedMark{c, now})
			}
		}
	}
	kept := v.marks[:0]
	for _, m := range v.marks {
		if now.Sub(m.at) < MarkFade {
			kept = append(kept, m)
		}
	}
	v.marks = kept
	v.tree = t
	v.cells = LayoutTree(t)
	clear(v.byKey)
	sel := -1
	for i, n := range t.Nodes {
		v.byKey[n.Key] = v.cells[i]
		if v.selected >= 0 && n.Key == v.selKey {
			sel = i
		}
	}
	lost := v.selected >= 0 && sel < 0
	v.selected = sel
	v.Refresh()
	if lost && v.OnSelect != nil {
		v.OnSelect(-1)
	}
}

// Tree returns the tree shown.
func (v *TreeView) Tree() prefixcache.Tree { return v.tree }

// Cells returns the nodes' places, as LayoutTree gives them.
func (v *TreeView) Cells() []Cell { return v.cells }

// Marks returns the evictions still marked, with their age.
func (v *TreeView) Marks() []Mark {
	now := v.now()
	var out []Mark
	for _, m := range v.marks {
		if age := now.Sub(m.at); age < MarkFade {
			out = append(out, Mark{m.Cell, float64(age) / float64(MarkFade)})
		}
	}
	return out
}

// Selected returns the selected node's index, -1 for none.
func (v *TreeView) Selected() int { return v.selected }

// Select selects node i (-1: none) and tells OnSelect.
func (v *TreeView) Select(i int) {
	if i < 0 || i >= len(v.tree.Nodes) {
		i = -1
	} else {
		v.selKey = v.tree.Nodes[i].Key
	}
	v.selected = i
	v.Refresh()
	if v.OnSelect != nil {
		v.OnSelect(i)
	}
}

// NodeAt returns the node drawn at pos, -1 for none.
func (v *TreeView) NodeAt(pos fyne.Position) int {
	s := v.Size()
	if s.Width <= 0 || s.Height <= 0 {
		return -1
	}
	x, y := float64(pos.X/s.Width), float64(pos.Y/s.Height)
	// Within a column the cells are in depth-first order; a linear scan
	// is fast enough for the thousands of blocks a view shows.
	for i, c := range v.cells {
		if c.Contains(x, y) {
			return i
		}
	}
	return -1
}

// Describe says what node i is: its hash, place, tokens, subtree, hits
// and media.
func (v *TreeView) Describe(i int) string {
	if i < 0 || i >= len(v.tree.Nodes) {
		return ""
	}
	n := v.tree.Nodes[i]
	var b strings.Builder
	fmt.Fprintf(&b, "block %s: block %d of its chain, %d tokens", n.Hash.Short(), n.Depth+1, len(n.Tokens))
	if n.Size > 1 {
		fmt.Fprintf(&b, "; %d blocks (%d tokens) hang on it", n.Size-1, n.SubtreeTokens-len(n.Tokens))
	}
	if len(n.Children) > 1 {
		fmt.Fprintf(&b, " in %d branches", len(n.Children))
	}
	if n.Hits > 0 {
		fmt.Fprintf(&b, "; %d hits", n.Hits)
	}
	if n.Stores > 1 {
		fmt.Fprintf(&b, "; stored %d times", n.Stores)
	}
	if len(n.Media) > 0 && !(len(n.Media) == 1 && n.Media[0] == "") {
		fmt.Fprintf(&b, "; on %s", strings.Join(n.Media, ", "))
	}
	if n.Orphan {
		b.WriteString("; its parent is not cached")
	}
	return b.String()
}

// MouseIn describes the hovered block.
func (v *TreeView) MouseIn(e *desktop.MouseEvent) { v.MouseMoved(e) }

// MouseMoved describes the hovered block.
func (v *TreeView) MouseMoved(e *desktop.MouseEvent) {
	if v.OnHover != nil {
		v.OnHover(v.Describe(v.NodeAt(e.Position)))
	}
}

// MouseOut clears the description.
func (v *TreeView) MouseOut() {
	if v.OnHover != nil {
		v.OnHover("")
	}
}

// Tapped selects the tapped block's chain.
func (v *TreeView) Tapped(e *fyne.PointEvent) { v.Select(v.NodeAt(e.Position)) }

// MinSize is small: the view takes the room it is given.
func (v *TreeView) MinSize() fyne.Size { return fyne.NewSize(240, 160) }

// CreateRenderer draws the raster and the hit counts over it.
func (v *TreeView) CreateRenderer() fyne.WidgetRenderer {
	return &treeRenderer{v: v}
}

type treeRenderer struct {
	v      *TreeView
	labels []*canvas.Text
	size   fyne.Size
}

func (r *treeRenderer) Layout(s fyne.Size) {
	r.size = s
	r.v.raster.Resize(s)
	r.place()
}

func (r *treeRenderer) MinSize() fyne.Size { return r.v.MinSize() }

func (r *treeRenderer) Refresh() {
	r.place()
	r.v.raster.Refresh()
}

// place writes hit counts on the blocks big enough to hold them.
func (r *treeRenderer) place() {
	n := 0
	s := r.size
	for i, node := range r.v.tree.Nodes {
		if n == maxHitLabels || node.Hits == 0 || i >= len(r.v.cells) {
			continue
		}
		c := r.v.cells[i]
		w, h := float32(c.X1-c.X0)*s.Width, float32(c.Y1-c.Y0)*s.Height
		text := fmt.Sprintf("%d hits", node.Hits)
		if w < 44 || h < 16 {
			continue
		}
		if n == len(r.labels) {
			t := canvas.NewText("", theme.Color(theme.ColorNameForeground))
			t.TextSize = theme.CaptionTextSize()
			r.labels = append(r.labels, t)
		}
		t := r.labels[n]
		t.Text = text
		t.Move(fyne.NewPos(float32(c.X0)*s.Width+3, float32(c.Y0)*s.Height+2))
		t.Resize(t.MinSize())
		t.Show()
		t.Refresh()
		n++
	}
	for _, t := range r.labels[n:] {
		t.Hide()
	}
}

func (r *treeRenderer) Objects() []fyne.CanvasObject {
	objs := []fyne.CanvasObject{r.v.raster}
	for _, t := range r.labels {
		objs = append(objs, t)
	}
	return objs
}

func (r *treeRenderer) Destroy() {}
