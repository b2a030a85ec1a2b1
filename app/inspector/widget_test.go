package inspector

import (
	"fmt"
	"image"
	"image/color"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/engine/kvcache"
)

// heatmapOrigin returns where the heatmap sits on its canvas.
func heatmapOrigin(h *Heatmap) fyne.Position {
	return fyne.CurrentApp().Driver().AbsolutePositionForObject(h)
}

// cellPos returns the canvas position of the middle of cell i.
func cellPos(h *Heatmap, i int) fyne.Position {
	g := h.Grid()
	c := g.Center(i)
	size := h.Size()
	o := heatmapOrigin(h)
	return fyne.NewPos(o.X+(float32(c.X)+0.5)*size.Width/float32(g.Width), o.Y+(float32(c.Y)+0.5)*size.Height/float32(g.Height))
}

func TestInspectorHoverTapAndUpdate(t *testing.T) {
	test.NewTempApp(t)
	in := New()
	in.SetNames(func(id kvcache.SeqID) string { return fmt.Sprintf("conversation %d", id) }, nil)
	w := test.NewTempWindow(t, in)
	w.Resize(fyne.NewSize(700, 700))

	m, st := buildState(t)
	evs, cursor, _ := m.Events().Since(0, 0)
	in.Update(m.Snapshot(), evs, 0, 5)
	img := w.Canvas().Capture() // draws the heatmap, which lays out its grid
	if in.Heatmap.Frames() == 0 || in.Heatmap.Grid().Device != 16 {
		t.Fatalf("heatmap not drawn: %d frames, grid %+v", in.Heatmap.Frames(), in.Heatmap.Grid())
	}

	// The captured window shows block 3 in conversation 2's colour.
	p := cellPos(in.Heatmap, 3)
	if got := rgbaAt(img, p); got != OwnerColor(2) {
		t.Errorf("window pixel of block 3: %v, want %v", got, OwnerColor(2))
	}

	test.MoveMouse(w.Canvas(), cellPos(in.Heatmap, 3))
	if d := in.Details(); !strings.Contains(d, "block 3: used, held by conversation 2; 3/4 slots; K int8, V int4; ref 1") {
		t.Errorf("hover details %q do not describe block 3", d)
	}
	test.MoveMouse(w.Canvas(), fyne.NewPos(1, 1)) // off the heatmap
	if d := in.Details(); strings.Contains(d, "block 3") {
		t.Errorf("details still %q after the pointer left", d)
	}

	test.TapCanvas(w.Canvas(), cellPos(in.Heatmap, 3))
	if seq, ok := in.Heatmap.Selected(); !ok || seq != 2 {
		t.Errorf("tapping block 3 selected %d, %v; want conversation 2", seq, ok)
	}
	if d := in.Details(); !strings.Contains(d, "conversation 2: 11 tokens in 3 device blocks; logical → physical: 0→0 1→1 2→3") {
		t.Errorf("details %q do not show conversation 2's block table", d)
	}
	test.TapCanvas(w.Canvas(), cellPos(in.Heatmap, 9)) // a free block
	if _, ok := in.Heatmap.Selected(); ok {
		t.Error("tapping a free block kept the selection")
	}

	in.SetMode(ByRefCount)
	if in.Modes.Selected != "ref count" {
		t.Errorf("mode menu shows %q", in.Modes.Selected)
	}
	img = w.Canvas().Capture()
	if got := rgbaAt(img, cellPos(in.Heatmap, 0)); got != RefColor(2) {
		t.Errorf("ref-count mode: shared block 0 is %v, want %v", got, RefColor(2))
	}

	// The next update logs the eviction and moves the gauges and history.
	m.Tick()
	if _, err := m.Allocate(4, seqTokens(900, 44), kvcache.SeqOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, m, st, 4, 0)
	evs, _, _ = m.Events().Since(cursor, 0)
	in.Update(m.Snapshot(), evs, 3, 7.5)
	lines := strings.Join(in.Log.Lines(), "\n")
	for _, want := range []string{"block 5 evicted (LRU, idle 2 steps) to make room for conversation 4", "3 events not shown"} {
		if !strings.Contains(lines, want) {
			t.Errorf("event log lacks %q:\n%s", want, lines)
		}
	}
	if got := in.Gauges.Value("used blocks"); got != "15 of 16 · 93.8 %" {
		t.Errorf("used blocks gauge %q, want 15 of 16 · 93.8 %%", got)
	}
	if got := in.Gauges.Value("evictions"); got != "1" {
		t.Errorf("evictions gauge %q, want 1", got)
	}
	if got := in.Gauges.Value("tokens/s, last 2 s"); got != "7.5" {
		t.Errorf("tokens/s gauge %q, want 7.5", got)
	}
	if n := len(in.History.Samples()); n != 2 {
		t.Errorf("history holds %d samples, want 2", n)
	}
}

// rgbaAt reads the captured window's pixel at a canvas position.
func rgbaAt(img image.Image, p fyne.Position) color.RGBA {
	r, g, b, a := img.At(int(p.X), int(p.Y)).RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}
