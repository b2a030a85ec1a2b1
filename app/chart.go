// This file holds the line chart of a lesson (time per token against
// position) and RenderSeries, which draws it.

package app

import (
	"fmt"
	"image"
	"image/color"
	"kvscope/app/inspector"
	"math"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
)

// Series is one line of a chart: Y values at x = 0, 1, 2….
type Series struct {
	Name  string
	Color color.RGBA
	Y     []float64
}

var (
	chartBG   = color.RGBA{0x16, 0x18, 0x1d, 0xff}
	chartGrid = color.RGBA{0x30, 0x34, 0x3e, 0xff}
)

// RenderSeries draws series as lines over dst: x from 0 to the longest
// series' last index across the width, y from 0 to the largest value (at
// least yMax) up the height, over guides at quarters. It returns the y
// value of the top edge.
func RenderSeries(dst *image.RGBA, series []Series, yMax float64) float64 {
	b := dst.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			dst.SetRGBA(x, y, chartBG)
		}
	}
	w, h := b.Dx(), b.Dy()
	if w < 2 || h < 2 {
		return yMax
	}
	n := 0
	for _, s := range series {
		n = max(n, len(s.Y))
		for _, v := range s.Y {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				yMax = max(yMax, v)
			}
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	for q := 1; q < 4; q++ {
		y := b.Min.Y + h*q/4
		for x := b.Min.X; x < b.Max.X; x++ {
			dst.SetRGBA(x, y, chartGrid)
		}
	}
	px := func(i int, v float64) image.Point {
		x := 0
		if n > 1 {
			x = i * (w - 1) / (n - 1)
		}
		y := int(float64(h-1)*(1-min(max(v, 0), yMax)/yMax) + 0.5)
		return image.Pt(b.Min.X+x, b.Min.Y+y)
	}
	for _, s := range series {
		for i := range s.Y {
			p := px(i, s.Y[i])
			q := p
			if i > 0 {
				q = px(i-1, s.Y[i-1])
			}
			inspector.Line(dst, q, p, s.Color)
			inspector.Line(dst, q.Add(image.Pt(0, 1)), p.Add(image.Pt(0, 1)), s.Color)
		}
	}
	return yMax
}

// chart is a widget drawing Series with a title and a legend.
type chart struct {
	widget.BaseWidget
	mu     sync.Mutex
	series []Series
	img    *image.RGBA
	raster *canvas.Raster
	top    *widget.Label
	legend *fyne.Container
	box    *fyne.Container
	unit   string
	// The axes: the y value of the top edge and of the middle guide, 0 at
	// the bottom, and what x counts.
	yTop, yMid *canvas.Text
}

func newChart(title, unit string) *chart {
	c := &chart{unit: unit, top: widget.NewLabel(title)}
	c.top.Importance = widget.LowImportance
	c.top.Wrapping = fyne.TextWrapWord
	c.raster = canvas.NewRaster(func(w, h int) image.Image {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.img == nil || c.img.Bounds().Dx() != w || c.img.Bounds().Dy() != h {
			c.img = image.NewRGBA(image.Rect(0, 0, w, h))
		}
		RenderSeries(c.img, c.series, 0)
		return c.img
	})
	c.raster.SetMinSize(fyne.NewSize(200, 110))
	c.legend = container.NewHBox()
	axisText := func(s string) *canvas.Text {
		t := canvas.NewText(s, theme.Color(theme.ColorNameForeground))
		t.TextSize = theme.CaptionTextSize()
		t.Alignment = fyne.TextAlignTrailing
		return t
	}
	c.yTop, c.yMid = axisText("1 "+unit), axisText("0.5 "+unit)
	yAxis := container.NewGridWithRows(3, container.NewVBox(c.yTop), container.NewCenter(c.yMid),
		container.NewVBox(layout.NewSpacer(), axisText("0 "+unit)))
	xAxis := axisText("token position →")
	c.box = container.NewBorder(c.top, container.NewVBox(xAxis, c.legend), yAxis, nil, c.raster)
	c.ExtendBaseWidget(c)
	return c
}

// set shows new series, with the y axis's values.
func (c *chart) set(series []Series) {
	c.mu.Lock()
	c.series = series
	c.mu.Unlock()
	top := seriesMax(series)
	c.yTop.Text, c.yMid.Text = axisValue(top, c.unit), axisValue(top/2, c.unit)
	c.yTop.Refresh()
	c.yMid.Refresh()
	c.legend.Objects = nil
	for _, s := range series {
		r := canvas.NewRectangle(s.Color)
		r.SetMinSize(fyne.NewSize(12, 12))
		t := canvas.NewText(s.Name, theme.Color(theme.ColorNameForeground))
		t.TextSize = theme.CaptionTextSize()
		c.legend.Add(container.NewHBox(container.NewCenter(r), t))
	}
	c.legend.Refresh()
	c.raster.Refresh()
}

// CreateRenderer returns the chart's renderer.
func (c *chart) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(c.box) }

// seriesMax is the top edge's y value as RenderSeries draws series: their
// largest finite value, or 1.
func seriesMax(series []Series) float64 {
	top := 0.0
	for _, s := range series {
		for _, v := range s.Y {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = max(top, v)
			}
		}
	}
	if top <= 0 {
		return 1
	}
	return top
}

// axisValue writes an axis value with its unit.
func axisValue(v float64, unit string) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.2g %s", v, unit)
}
