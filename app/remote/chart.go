package remote

import (
	"image"
	"image/color"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
)

// chart is a titled line chart of one figure over the last samples.
type chart struct {
	title  *widget.Label
	raster *canvas.Raster
	values []float64
	max    float64 // the y axis' top; 0: the values' maximum
	color  color.RGBA
	root   fyne.CanvasObject
}

func newChart(max float64, c color.RGBA) *chart {
	ch := &chart{title: widget.NewLabel(""), max: max, color: c}
	ch.title.Truncation = fyne.TextTruncateEllipsis
	ch.raster = canvas.NewRaster(func(w, h int) image.Image {
		img := image.NewRGBA(image.Rect(0, 0, max1(w), max1(h)))
		RenderChart(img, ch.values, ch.max, ch.color)
		return img
	})
	ch.raster.SetMinSize(fyne.NewSize(160, 48))
	ch.root = container.NewBorder(ch.title, nil, nil, nil, ch.raster)
	return ch
}

func max1(n int) int { return max(n, 1) }

// set shows values under title.
func (ch *chart) set(title string, values []float64) {
	ch.title.SetText(title)
	ch.values = values
	ch.raster.Refresh()
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
	if top <= 0 {
		for _, v := range values {
			top = max(top, v)
		}
		if top <= 0 {
			top = 1
		}
	}
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
