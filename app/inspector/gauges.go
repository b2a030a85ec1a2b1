// This file holds the inspector's gauges.

package inspector

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// Gauge is one figure of the gauges panel.
type Gauge struct {
	Name  string  // such as "usage"
	Value string  // formatted, such as "37.5 %"
	Bar   float64 // 0…1 for a bar, or -1 for none
}

// GaugeValues formats the cache's metrics, and the engine's generation
// speed, as the gauges panel shows them: twelve, four rows of three, each
// value short enough for its tile in a 1024×700 window (the used blocks
// carry the usage in percent; the free ones, those cached for prefix reuse
// besides). Memory sizes use go-humanize's
// IEC units. alloc is the allocator in force: the paged one has no
// external fragmentation by construction, and says so.
func GaugeValues(m kvcache.Metrics, alloc kvcache.Allocator, tokensPerSec float64) []Gauge {
	bb := uint64(max(m.BlockBytes, 0))
	frac := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return min(1, max(0, a/b))
	}
	ext := fmt.Sprintf("%.1f %%", m.ExternalFragmentation)
	if alloc == kvcache.Paged {
		ext = "0 % (paged)"
	}
	pre := fmt.Sprint(m.Preemptions)
	if m.Preemptions > 0 {
		pre = fmt.Sprintf("%d (%d recomp., %d swap)", m.Preemptions, m.RecomputePreemptions, m.SwapPreemptions)
	}
	host := "empty"
	if m.HostBlocks > 0 || m.HostBudget > 0 {
		host = fmt.Sprintf("%s of %s", humanize.IBytes(uint64(max(m.HostBytes, 0))), humanize.IBytes(uint64(max(m.HostBudget, 0))))
	}
	return []Gauge{
		{"used blocks", fmt.Sprintf("%d of %d · %.1f %%", m.UsedBlocks, m.TotalBlocks, m.UsagePercent), frac(float64(m.UsedBlocks), float64(m.TotalBlocks))},
		{"free blocks", fmt.Sprintf("%d + %d cached", m.FreeBlocks, m.CachedBlocks), -1},
		{"memory used", fmt.Sprintf("%s of %s", humanize.IBytes(uint64(m.UsedBlocks)*bb), humanize.IBytes(uint64(m.TotalBlocks)*bb)), -1},
		{"per token", fmt.Sprintf("%s (block %s)", humanize.IBytes(uint64(m.BytesPerToken+0.5)), humanize.IBytes(bb)), -1},
		{"internal frag.", fmt.Sprintf("%.1f %% slots empty", m.InternalFragmentation), frac(m.InternalFragmentation, 100)},
		{"external frag.", ext, frac(m.ExternalFragmentation, 100)},
		{"prefix hit rate", fmt.Sprintf("%.1f %% (%d/%d tok)", 100*m.PrefixHitRate, m.PrefixHitTokens, m.PrefixQueryTokens), frac(m.PrefixHitRate, 1)},
		{"evictions", fmt.Sprint(m.Evictions), -1},
		{"preemptions", pre, -1},
		{"host swap pool", host, -1},
		{"copy-on-write", fmt.Sprint(m.CoWCopies), -1},
		{fmt.Sprintf("tokens/s, last %g s", engine.RateWindow.Seconds()), fmt.Sprintf("%.1f", tokensPerSec), -1},
	}
}

// Gauges is a widget showing GaugeValues as compact tiles, three a row,
// with a thin bar under the figures that are fractions.
type Gauges struct {
	widget.BaseWidget

	tiles []*gaugeTile
	box   *fyne.Container
}

// NewGauges returns the panel showing an empty cache.
func NewGauges() *Gauges {
	g := &Gauges{}
	grid := container.NewGridWithColumns(3)
	for _, r := range GaugeValues(kvcache.Metrics{}, kvcache.Paged, 0) {
		t := newGaugeTile(r)
		g.tiles = append(g.tiles, t)
		grid.Add(t)
	}
	g.box = grid
	g.ExtendBaseWidget(g)
	return g
}

// Update shows new metrics, the allocator in force and the speed.
func (g *Gauges) Update(m kvcache.Metrics, alloc kvcache.Allocator, tokensPerSec float64) {
	for i, r := range GaugeValues(m, alloc, tokensPerSec) {
		g.tiles[i].set(r)
	}
}

// Value returns the text shown for the gauge called name, or "".
func (g *Gauges) Value(name string) string {
	for _, t := range g.tiles {
		if t.g.Name == name {
			return t.g.Value
		}
	}
	return ""
}

// CreateRenderer returns the panel's renderer.
func (g *Gauges) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(g.box) }

// gaugeTile draws one gauge: its name small, its value, and its bar.
type gaugeTile struct {
	widget.BaseWidget
	g           Gauge
	name, value *canvas.Text
	track, fill *canvas.Rectangle
}

func newGaugeTile(g Gauge) *gaugeTile {
	t := &gaugeTile{
		name:  canvas.NewText(g.Name, theme.Color(theme.ColorNamePlaceHolder)),
		value: canvas.NewText(g.Value, theme.Color(theme.ColorNameForeground)),
		track: canvas.NewRectangle(theme.Color(theme.ColorNameInputBorder)),
		fill:  canvas.NewRectangle(theme.Color(theme.ColorNamePrimary)),
	}
	t.name.TextSize = theme.CaptionTextSize()
	t.value.TextStyle.Bold = true
	t.value.TextSize = theme.TextSize()
	t.ExtendBaseWidget(t)
	t.set(g)
	return t
}

func (t *gaugeTile) set(g Gauge) {
	t.g = g
	t.value.Text = g.Value
	t.Refresh()
}

// CreateRenderer lays the tile out.
func (t *gaugeTile) CreateRenderer() fyne.WidgetRenderer { return &tileRenderer{t} }

type tileRenderer struct{ t *gaugeTile }

// Layout places the name, the value and the bar.
func (r *tileRenderer) Layout(size fyne.Size) {
	t := r.t
	nameH := t.name.MinSize().Height
	t.name.Move(fyne.NewPos(2, 0))
	t.name.Resize(fyne.NewSize(size.Width-4, nameH))
	valH := t.value.MinSize().Height
	t.value.Move(fyne.NewPos(2, nameH-2))
	t.value.Resize(fyne.NewSize(size.Width-4, valH))
	y := nameH - 2 + valH
	t.track.Move(fyne.NewPos(2, y))
	t.track.Resize(fyne.NewSize(size.Width-8, 3))
	t.fill.Move(fyne.NewPos(2, y))
	t.fill.Resize(fyne.NewSize(float32(max(t.g.Bar, 0))*(size.Width-8), 3))
}

// MinSize fits the name and the value, whole.
func (r *tileRenderer) MinSize() fyne.Size {
	t := r.t
	w := max(t.name.MinSize().Width, t.value.MinSize().Width, 60)
	return fyne.NewSize(w+4, t.name.MinSize().Height+t.value.MinSize().Height+4)
}

// Refresh follows the theme and the gauge.
func (r *tileRenderer) Refresh() {
	t := r.t
	t.name.Color = theme.Color(theme.ColorNamePlaceHolder)
	t.value.Color = theme.Color(theme.ColorNameForeground)
	t.track.FillColor = theme.Color(theme.ColorNameInputBorder)
	t.fill.FillColor = theme.Color(theme.ColorNamePrimary)
	t.track.Hidden, t.fill.Hidden = t.g.Bar < 0, t.g.Bar < 0
	r.Layout(t.Size())
	canvas.Refresh(t)
}

// Objects returns what the tile draws.
func (r *tileRenderer) Objects() []fyne.CanvasObject {
	return []fyne.CanvasObject{r.t.name, r.t.value, r.t.track, r.t.fill}
}

// Destroy has nothing to release.
func (r *tileRenderer) Destroy() {}

// humanizeBytes formats n bytes in IEC units, as the gauges do.
func humanizeBytes(n int) string { return humanize.IBytes(uint64(max(n, 0))) }
