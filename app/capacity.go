// This file holds the Controls tab's capacity view: how many sequences of a
// chosen length fit at each K/V precision and block size.

package app

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// CapacityBlockSizes are the capacity view's columns, in tokens.
var CapacityBlockSizes = []int{4, 8, 16, 32, 64, 128, 256}

// capacityView is the Controls tab's capacity view: the trade-off between
// sequence length and how many sequences the memory sustains. For the
// loaded model and the budget, it shows how many sequences of a chosen
// length fit at once at each K/V precision (K and V alike) and block size
// (engine.Capacity), marks the settings in force and how many sequences
// run on them now, and follows the block-size and budget sliders as they
// move.
type capacityView struct {
	length    *widget.Slider
	lengthLab *widget.Label
	cells     map[capacityKey]*widget.Label
	note      *widget.Label
	grid      *fyne.Container // the table of sequences that fit
	root      fyne.CanvasObject

	m       *model.Model  // the loaded model (nil: none)
	cfg     engine.Config // the settings drawn (the sliders' while one moves)
	running int           // sequences running now
}

// capacityKey names a cell.
type capacityKey struct {
	p  kvstore.Precision
	bs int
}

func newCapacityView() *capacityView {
	v := &capacityView{cells: map[capacityKey]*widget.Label{}}
	v.length = widget.NewSlider(16, 2048)
	v.length.Step = 16
	v.length.SetValue(256)
	v.lengthLab = widget.NewLabel("")
	v.length.OnChanged = func(float64) { v.draw() }
	v.note = widget.NewLabel("")
	v.note.Wrapping = fyne.TextWrapWord
	grid := container.NewGridWithColumns(len(CapacityBlockSizes) + 1)
	grid.Add(widget.NewLabelWithStyle("K/V", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
	for _, bs := range CapacityBlockSizes {
		grid.Add(widget.NewLabelWithStyle(fmt.Sprint(bs), fyne.TextAlignTrailing, fyne.TextStyle{Bold: true}))
	}
	for _, p := range kvstore.Precisions() {
		grid.Add(widget.NewLabelWithStyle(p.String(), fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
		for _, bs := range CapacityBlockSizes {
			l := widget.NewLabel("")
			l.Alignment = fyne.TextAlignTrailing
			v.cells[capacityKey{p, bs}] = l
			grid.Add(l)
		}
	}
	title := widget.NewLabelWithStyle("Capacity: sequences that fit at once", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	cols := widget.NewLabel("Columns: block size in tokens; rows: K and V precision; cells: sequences of the chosen length that fit.")
	cols.Wrapping = fyne.TextWrapWord
	v.grid = grid
	v.root = container.NewVBox(widget.NewSeparator(), title,
		container.NewBorder(nil, nil, widget.NewLabel("Sequence length"), v.lengthLab, v.length), cols, grid, v.note)
	return v
}

// seqLen is the sequence length chosen, in tokens.
func (v *capacityView) seqLen() int { return int(v.length.Value) }

// show draws the view for model m under cfg with running sequences now
// (UI goroutine).
func (v *capacityView) show(m *model.Model, cfg engine.Config, running int) {
	v.m, v.cfg, v.running = m, cfg, running
	v.draw()
}

// draw fills the cells.
func (v *capacityView) draw() {
	n := v.seqLen()
	v.lengthLab.SetText(fmt.Sprintf("%d tokens", n))
	if v.m == nil {
		for _, l := range v.cells {
			l.SetText("–")
		}
		v.note.SetText("Open a model to see how many sequences its cache holds.")
		return
	}
	cur := v.cfg.Cache
	marked := false
	for k, l := range v.cells {
		cfg := v.cfg
		cfg.Cache.K, cfg.Cache.V, cfg.Cache.BlockSize = k.p, k.p, k.bs
		f, err := engine.Capacity(v.m, cfg, n)
		text := "–" // settings the engine would refuse
		if err == nil {
			text = fmt.Sprint(f.Seqs)
		}
		l.TextStyle = fyne.TextStyle{}
		if k.p == cur.K && k.p == cur.V && k.bs == cur.BlockSize {
			text = "▶ " + text
			l.TextStyle.Bold = true
			marked = true
		}
		l.SetText(text)
	}
	fit, err := engine.Capacity(v.m, v.cfg, n)
	var line string
	switch {
	case err != nil:
		line = "The settings in force hold no sequence: " + err.Error() + "."
	default:
		line = fmt.Sprintf("In force (▶): %d %s of %d tokens fit in %d blocks of %d (%d %s each, %s); %d %s now. The scheduler runs at most %d at once.",
			fit.Seqs, plural(fit.Seqs, "sequence", "sequences"), n, fit.Blocks, cur.BlockSize, fit.PerSeq, plural(fit.PerSeq, "block", "blocks"),
			cur.Allocator, v.running, plural(v.running, "runs", "run"), v.cfg.Sched.MaxSeqs)
	}
	if !marked {
		line += fmt.Sprintf(" No cell is the settings in force (K %s / V %s, block size %d).", cur.K, cur.V, cur.BlockSize)
	}
	v.note.SetText(line)
}
