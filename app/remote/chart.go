// This file holds the Remote tab's small line charts of one metric over
// time, with their axis values.

package remote

import (
	"fmt"
	"image"
	"image/color"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
)

// chart is a titled line chart of one figure over the last samples, with
// the y axis's top and bottom values at its left and the time it spans
// under it.
type chart struct {
	title      *widget.Label
	raster     *canvas.Raster
	values     []float64
	max        float64 // the y axis' top; 0: the values' maximum
	axis       func(float64) string
	color      color.RGBA
	yTop, yBot *canvas.Text
	xFrom, xTo *canvas.Text
	root       fyne.CanvasObject
}

// percentAxis writes a share (0–1) as an axis value; countAxis a count.
func percentAxis(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }
func countAxis(v float64) string   { return fmt.Sprintf("%.0f", v) }

// SampleEvery is how often the metrics the charts draw are scraped (one
// sample a second): the x axis's span is the samples' count times it.
const SampleEvery = time.Second

func newChart(max float64, axis func(float64) string, c color.RGBA) *chart {
	ch := &chart{title: widget.NewLabel(""), max: max, axis: axis, color: c}
	ch.title.Wrapping = fyne.TextWrapWord
	ch.raster = canvas.NewRaster(func(w, h int) image.Image {
		img := image.NewRGBA(image.Rect(0, 0, max1(w), max1(h)))
		RenderChart(img, ch.values, ch.max, ch.color)
		return img
	})
	ch.raster.SetMinSize(fyne.NewSize(120, 48))
	small := func(align fyne.TextAlign) *canvas.Text {
		t := canvas.NewText("", theme.Color(theme.ColorNameForeground))
		t.TextSize = theme.CaptionTextSize()
		t.Alignment = align
		return t
	}
	ch.yTop, ch.yBot = small(fyne.TextAlignTrailing), small(fyne.TextAlignTrailing)
	ch.xFrom, ch.xTo = small(fyne.TextAlignLeading), small(fyne.TextAlignTrailing)
	yAxis := container.NewBorder(ch.yTop, ch.yBot, nil, nil)
	xAxis := container.NewBorder(nil, nil, ch.xFrom, ch.xTo)
	ch.root = container.NewBorder(ch.title, xAxis, yAxis, nil, ch.raster)
	ch.axes()
	return ch
}

func max1(n int) int { return max(n, 1) }

// set shows values under title.
func (ch *chart) set(title string, values []float64) {
	ch.title.SetText(title)
	ch.values = values
	ch.axes()
	ch.raster.Refresh()
}

// axes writes the axis values: the top as RenderChart draws it, 0, and
// the time the samples span.
func (ch *chart) axes() {
	ch.yTop.Text, ch.yBot.Text = ch.axis(chartTop(ch.values, ch.max)), ch.axis(0)
	ch.xFrom.Text, ch.xTo.Text = "", "now"
	if n := len(ch.values); n > 1 {
		ch.xFrom.Text = fmt.Sprintf("−%v", time.Duration(n-1)*SampleEvery)
	}
	for _, t := range []*canvas.Text{ch.yTop, ch.yBot, ch.xFrom, ch.xTo} {
		t.Refresh()
	}
}

// chartTop is the y value of a chart's top edge: top, or where top is 0
// the values' largest (1 when none is positive).
func chartTop(values []float64, top float64) float64 {
	if top > 0 {
		return top
	}
	for _, v := range values {
		top = max(top, v)
	}
	if top <= 0 {
		top = 1
	}
	return top
}

// RenderChart draws values (oldest first) as a line from left to right
// over the whole of dst, 0 at the bottom and top (0: the largest value) at
// the top.
func RenderChart(dst *image.RGBA, values []float64, top float64, c color.RGBA) {
	b := dst.Bounds()
	fill(dst, b, treeBackground)
	fill(dst, image.Rect(b.Min.X, b.Max.Y-1, b.Max.X, b.Max.Y), color.RGBA{0x55, 0x58, 0x60, 0xff})
	if len(values) == 0 {
		return
	}
	top = chartTop(values, top)
	w, h := b.Dx(), b.Dy()
	y := func(v float64) int {
		f := min(max(v/top, 0), 1)
		return b.Max.Y - 1 - int(f*float64(h-1))
	}
	prev := image.Point{}
	for i, v := range values {
		x := b.Min.X
		if len(values) > 1 {
			x += i * (w - 1) / (len(values) - 1)
		}
		p := image.Point{x, y(v)}
		if i > 0 {
			inspector.Line(dst, prev, p, c)
		} else {
			fill(dst, image.Rect(p.X, p.Y, p.X+1, p.Y+1), c)
		}
		prev = p
	}
}
