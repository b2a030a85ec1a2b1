// This file holds the Inspector: the heatmap, legend, details, gauges,
// history and event log laid out together.

package inspector

import (
	"fmt"
	"image/color"
	"slices"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine/kvcache"
)

// swatch is a small colour square followed by a caption.
func swatch(c color.Color, label string) fyne.CanvasObject {
	r := canvas.NewRectangle(c)
	r.SetMinSize(fyne.NewSize(12, 12))
	r.StrokeColor = color.RGBA{0x80, 0x80, 0x80, 0xff}
	r.StrokeWidth = 1
	t := canvas.NewText(label, theme.Color(theme.ColorNameForeground))
	t.TextSize = theme.CaptionTextSize()
	return container.NewHBox(container.NewCenter(r), t)
}

// twoLines is the height of a label of two lines of text.
func twoLines() float32 { return widget.NewLabel("1\n2").MinSize().Height }

// Inspector is the whole cache inspector as one widget: a colour-mode
// choice, the heatmap with its legend and the hovered block's details or
// the selected sequence's block table, the gauges, the history chart and
// the event log. Feed it with Update.
type Inspector struct {
	widget.BaseWidget

	Heatmap *Heatmap       // the block grid
	Gauges  *Gauges        // the figures
	History *History       // usage and fragmentation over time
	Log     *EventLog      // the events in words
	Modes   *widget.Select // the colour mode

	caption *widget.Label
	legend  *fyne.Container
	details *widget.Label
	// windowLine says which positions and blocks of the selected sequence
	// the model's sliding-window layers attend; hidden without a window.
	windowLine *widget.Label
	window     Window

	name     func(kvcache.SeqID) string
	group    func(kvcache.SeqID) int64
	snap     *kvcache.Snapshot
	hover    string
	legendOf []LegendEntry
	root     fyne.CanvasObject
}

// New returns an inspector showing an empty cache.
func New() *Inspector {
	in := &Inspector{
		Heatmap: NewHeatmap(),
		Gauges:  NewGauges(),
		History: NewHistory(),
		Log:     NewEventLog(),
		caption: widget.NewLabel(""),
		legend:  container.NewHBox(),
		details: widget.NewLabel("Hover a block for its details; tap one to draw its sequence's block table."),
		// The line under the details, shown while a selected sequence
		// of a model with sliding-window layers has tokens.
		windowLine: widget.NewLabel(""),
	}
	// The lines around the heatmap wrap, never cut ("in prefi…"): at
	// 1024×700 a block's details take two lines.
	in.windowLine.Wrapping = fyne.TextWrapWord
	in.windowLine.Hide()
	in.caption.Wrapping = fyne.TextWrapWord
	in.caption.Importance = widget.LowImportance
	in.details.Wrapping = fyne.TextWrapWord
	names := make([]string, 0, len(Modes()))
	for _, m := range Modes() {
		names = append(names, m.String())
	}
	in.Modes = widget.NewSelect(names, func(s string) {
		if m, err := ParseMode(s); err == nil {
			in.SetMode(m)
		}
	})
	in.Heatmap.OnHover = func(d string) {
		in.hover = d
		in.showDetails()
	}
	in.Heatmap.OnSelect = func(kvcache.SeqID, bool) {
		in.showLegend()
		in.showDetails()
	}

	top := container.NewBorder(nil, nil, widget.NewLabel("Colour by"), nil, in.Modes)
	// The details take two lines, the most a hovered block's need at
	// 1024×700; a long block table scrolls in them, whole.
	details := container.NewVScroll(container.NewVBox(in.details, in.windowLine))
	details.SetMinSize(fyne.NewSize(0, twoLines()))
	heat := container.NewBorder(container.NewVBox(top, in.caption), container.NewVBox(container.NewHScroll(in.legend), details), nil, nil, in.Heatmap)
	lower := container.NewHSplit(in.History, in.Log)
	lower.Offset = 0.45
	bottom := container.NewBorder(in.Gauges, nil, nil, nil, lower)
	split := container.NewVSplit(heat, bottom)
	split.Offset = 0.55
	in.root = split
	in.Modes.SetSelected(ByOwner.String())
	in.ExtendBaseWidget(in)
	return in
}

// SetNames sets how sequences are named (such as "conversation 3") and
// grouped for owner colours (all samples of a conversation share one); nil
// uses the sequence id for both.
func (in *Inspector) SetNames(name func(kvcache.SeqID) string, group func(kvcache.SeqID) int64) {
	in.name, in.group = name, group
	in.Heatmap.Name = name
	in.Heatmap.SetGroup(group)
	in.showLegend()
}

// SetMode changes the heatmap's colour mode, its legend and caption.
func (in *Inspector) SetMode(m Mode) {
	in.Heatmap.SetMode(m)
	if in.Modes.Selected != m.String() {
		in.Modes.SetSelected(m.String())
	}
	in.caption.SetText(Caption(m))
	in.showLegend()
}

// Select draws seq's block table on the heatmap (ok true), or clears it.
func (in *Inspector) Select(seq kvcache.SeqID, ok bool) {
	in.Heatmap.Select(seq, ok)
	in.showLegend()
	in.showDetails()
}

// SetWindow sets the loaded model's sliding window (WindowOf its
// configuration; the zero Window for none). While a sequence is selected
// its block table then marks the blocks its windowed layers still attend,
// and a line under the details says which positions those are.
func (in *Inspector) SetWindow(w Window) {
	in.window = w
	in.Heatmap.SetWindow(w.Size)
	in.showLegend()
	in.showDetails()
}

// Update shows a new snapshot: the events that happened since the last one
// (dropped counts those the log lost), described with Describe, and the
// engine's tokens/s.
func (in *Inspector) Update(s *kvcache.Snapshot, events []kvcache.Event, dropped uint64, tokensPerSec float64) {
	lines := make([]string, 0, len(events))
	for _, e := range events {
		lines = append(lines, Describe(e, in.snap, in.name))
	}
	in.ShowLines(s, lines, dropped, tokensPerSec)
}

// ShowLines is Update for events already in words: it logs lines (after a note
// when dropped events were lost) and shows the snapshot s (nil keeps the
// last one).
func (in *Inspector) ShowLines(s *kvcache.Snapshot, lines []string, dropped uint64, tokensPerSec float64) {
	if dropped > 0 {
		lines = append([]string{fmt.Sprintf("… %d events not shown: the inspector fell behind the engine", dropped)}, lines...)
	}
	in.Log.Add(lines...)
	if s == nil {
		return
	}
	in.snap = s
	in.Heatmap.SetSnapshot(s)
	in.Gauges.Update(s.Metrics, s.Allocator, tokensPerSec)
	in.History.Add(SampleOf(s.Metrics))
	in.showLegend()
	in.showDetails()
}

// Snapshot returns the snapshot shown.
func (in *Inspector) Snapshot() *kvcache.Snapshot { return in.snap }

// showLegend rebuilds the legend when it changed.
func (in *Inspector) showLegend() {
	entries := Legend(in.Heatmap.Mode(), in.snap, in.group, in.name)
	if _, ok := in.Heatmap.Selected(); ok && in.window.Size > 0 {
		entries = append(entries, LegendEntry{WindowColor, "bar: in the sliding window"})
	}
	if slices.Equal(entries, in.legendOf) {
		return
	}
	in.legendOf = entries
	objs := make([]fyne.CanvasObject, len(entries))
	for i, e := range entries {
		objs[i] = swatch(e.Color, e.Label)
	}
	in.legend.Objects = objs
	in.legend.Refresh()
}

// showDetails shows the hovered block, else the selected block table.
func (in *Inspector) showDetails() {
	text := in.hover
	if text == "" {
		if seq, ok := in.Heatmap.Selected(); ok {
			n := fmt.Sprintf("sequence %d", seq)
			if in.name != nil {
				n = in.name(seq)
			}
			text = n + ": " + BlockTable(in.snap, seq)
			if BlockTable(in.snap, seq) == "" {
				text = n + " holds no block now"
			}
		}
	}
	if text == "" {
		text = "Hover a block for its details; tap one to draw its sequence's block table."
	}
	in.details.SetText(text)
	line := ""
	if seq, ok := in.Heatmap.Selected(); ok {
		line = WindowLine(in.snap, seq, in.window)
	}
	if line != in.windowLine.Text {
		in.windowLine.SetText(line)
	}
	if (line != "") != in.windowLine.Visible() {
		if line != "" {
			in.windowLine.Show()
		} else {
			in.windowLine.Hide()
		}
	}
}

// WindowDetails returns the line on the sliding window of the selected
// sequence, or "" when none is shown.
func (in *Inspector) WindowDetails() string {
	if !in.windowLine.Visible() {
		return ""
	}
	return in.windowLine.Text
}

// Details returns the line under the heatmap: the hovered block's details
// or the selected sequence's block table.
func (in *Inspector) Details() string { return in.details.Text }

// CreateRenderer returns the inspector's renderer.
func (in *Inspector) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(in.root) }
