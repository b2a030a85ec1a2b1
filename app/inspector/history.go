// This file holds the inspector's usage and fragmentation history chart.

package inspector

import (
	"image"
	"image/color"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine/kvcache"
)

// Sample is one point of the history chart, all in percent.
type Sample struct {
	Step     int64   // the cache step it was taken at
	Usage    float64 // used blocks over all blocks
	Internal float64 // internal fragmentation
	External float64 // external fragmentation
	HitRate  float64 // prefix-cache hit rate
}

// SampleOf takes the history's figures from a cache's metrics.
func SampleOf(m kvcache.Metrics) Sample {
	return Sample{Step: m.Step, Usage: m.UsagePercent, Internal: m.InternalFragmentation,
		External: m.ExternalFragmentation, HitRate: 100 * m.PrefixHitRate}
}

// The colours of the history's series.
var (
	UsageColor    = color.RGBA{0x4e, 0x9b, 0xf7, 0xff}
	InternalColor = color.RGBA{0xf2, 0x8e, 0x2b, 0xff}
	ExternalColor = color.RGBA{0xe1, 0x47, 0x59, 0xff}
	HitRateColor  = color.RGBA{0x6b, 0xe5, 0x8f, 0xff}
	gridColor     = color.RGBA{0x30, 0x34, 0x3e, 0xff}
)

// RenderHistory draws samples (oldest first) as four lines over 0–100 %,
// the newest at the right edge, one sample every step pixels (at least 1),
// over horizontal guides at 25, 50 and 75 %. Samples older than fit are
// not drawn.
func RenderHistory(dst *image.RGBA, samples []Sample, step int) {
	fillAll(dst, Background)
	b := dst.Bounds()
	w, h := b.Dx(), b.Dy()
	if w < 2 || h < 2 {
		return
	}
	step = max(step, 1)
	for _, p := range []float64{25, 50, 75} {
		y := b.Min.Y + yOf(p, h)
		fillRect(dst, image.Rect(b.Min.X, y, b.Max.X, y+1), gridColor)
	}
	if n := (w-1)/step + 1; len(samples) > n {
		samples = samples[len(samples)-n:]
	}
	x0 := b.Max.X - 1 - (len(samples)-1)*step
	series := []struct {
		c   color.RGBA
		get func(Sample) float64
	}{
		{HitRateColor, func(s Sample) float64 { return s.HitRate }},
		{ExternalColor, func(s Sample) float64 { return s.External }},
		{InternalColor, func(s Sample) float64 { return s.Internal }},
		{UsageColor, func(s Sample) float64 { return s.Usage }},
	}
	thick := max(1, h/100)
	for _, sr := range series {
		var prev image.Point
		for i, s := range samples {
			p := image.Pt(x0+i*step, b.Min.Y+yOf(sr.get(s), h))
			if i == 0 {
				prev = p
			}
			for t := range thick {
				Line(dst, prev.Sub(image.Pt(0, t)), p.Sub(image.Pt(0, t)), sr.c)
			}
			prev = p
		}
	}
}

// yOf maps a percentage to a row of an h-pixel chart (100 % at the top).
func yOf(p float64, h int) int {
	p = min(100, max(0, p))
	return int(float64(h-1)*(1-p/100) + 0.5)
}

// History is a widget charting the last Capacity samples of usage,
// fragmentation and prefix hit rate, with its legend.
type History struct {
	widget.BaseWidget

	// Capacity is how many samples it keeps; 0 means 600.
	Capacity int

	mu      sync.Mutex
	samples []Sample
	img     *image.RGBA
	raster  *canvas.Raster
	box     *fyne.Container
}

// NewHistory returns an empty history chart.
func NewHistory() *History {
	h := &History{}
	h.raster = canvas.NewRaster(func(w, ht int) image.Image {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.img == nil || h.img.Bounds().Dx() != w || h.img.Bounds().Dy() != ht {
			h.img = image.NewRGBA(image.Rect(0, 0, w, ht))
		}
		RenderHistory(h.img, h.samples, max(1, w/200))
		return h.img
	})
	h.raster.ScaleMode = canvas.ImageScalePixels
	h.raster.SetMinSize(fyne.NewSize(180, 90))
	// Two by two: in one row the legend would be wider than the chart
	// gets at 1024×700, and take the event log's room.
	legend := container.NewGridWithColumns(2,
		swatch(UsageColor, "usage"), swatch(InternalColor, "internal frag."),
		swatch(ExternalColor, "external frag."), swatch(HitRateColor, "prefix hits"),
	)
	// The y axis: percent, at the top, middle guide and bottom (x is
	// steps, the newest at the right edge).
	tick := func(s string) *canvas.Text {
		t := canvas.NewText(s, theme.Color(theme.ColorNameForeground))
		t.TextSize = theme.CaptionTextSize()
		t.Alignment = fyne.TextAlignTrailing
		return t
	}
	yAxis := container.NewGridWithRows(3, container.NewVBox(tick("100 %")), container.NewCenter(tick("50 %")),
		container.NewVBox(layout.NewSpacer(), tick("0 %")))
	h.box = container.NewBorder(nil, legend, yAxis, nil, h.raster)
	h.ExtendBaseWidget(h)
	return h
}

// Add appends a sample and redraws. A sample whose step is not after the
// last one replaces it (the cache did not move on).
func (h *History) Add(s Sample) {
	h.mu.Lock()
	c := h.Capacity
	if c <= 0 {
		c = 600
	}
	if n := len(h.samples); n > 0 && s.Step <= h.samples[n-1].Step {
		h.samples[n-1] = s
	} else {
		h.samples = append(h.samples, s)
	}
	if len(h.samples) > c {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-c:]...)
	}
	h.mu.Unlock()
	h.raster.Refresh()
}

// Samples returns the kept samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...)
}

// Clear forgets every sample.
func (h *History) Clear() {
	h.mu.Lock()
	h.samples = nil
	h.mu.Unlock()
	h.raster.Refresh()
}

// CreateRenderer returns the chart's renderer.
func (h *History) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(h.box) }
