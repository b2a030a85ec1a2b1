package inspector

import (
	"context"
	"image"
	"strconv"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// gemma3Engine runs the shared gemma3 parity model (sliding window 8 on
// layers 0–4 and 6 of 7) in 4-token blocks, paused, with one request
// stepped until its sequence holds at least n tokens. It returns the
// engine, the model and the sequence.
func gemma3Engine(t *testing.T, n int) (*engine.Engine, *model.Model, kvcache.SeqID) {
	t.Helper()
	path := testshared.Path(t, "models/parity/parity-gemma3-F32.gguf")
	m, err := model.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.Cache.BlockSize = 4
	cfg.Context = 128
	cfg.Sched.MaxSeqs = 2
	e, err := engine.New(m, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := e.Submit(ctx, engine.Request{Prompt: "the old lighthouse keeper counted ships", MaxTokens: 100, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range st.C {
		}
	}()
	for range 200 {
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
		if s := e.Snapshot().Cache; len(s.Seqs) == 1 && s.Seqs[0].Len >= n {
			return e, m, s.Seqs[0].ID
		}
	}
	t.Fatalf("the sequence did not reach %d tokens in 200 steps", n)
	return nil, nil, 0
}

func TestWindowOf(t *testing.T) {
	if w := WindowOf(&model.Config{Arch: "llama", Layers: 4}); w != (Window{}) {
		t.Errorf("a llama model has window %+v, want none", w)
	}
	// Gemma 3's default period 6: layer l is local iff l%6 < 5.
	c := model.Config{Arch: "gemma3", Layers: 26, Window: 512, WindowPeriod: 6}
	if w := WindowOf(&c); w != (Window{Size: 512, Local: 22, Layers: 26}) {
		t.Errorf("gemma3 26 layers: %+v, want 22 of 26 local with window 512", w)
	}
}

func TestWindowSpanAndLine(t *testing.T) {
	m, st := buildState(t) // sequence 2: 11 tokens in 4-token blocks 0, 1, 3
	write(t, m, st, 2, 0)
	s := m.Snapshot()
	w := Window{Size: 6, Local: 5, Layers: 6}
	sp, ok := WindowSpan(s, 2, w.Size)
	if !ok || sp.First != 5 || sp.Last != 10 || sp.FromBlock != 1 || sp.ToBlock != 2 {
		t.Fatalf("span of 11 tokens under a window of 6: %+v, %v; want positions 5–10 in logical blocks 1–2", sp, ok)
	}
	if sp.InWindow(0) || !sp.InWindow(1) || !sp.InWindow(2) {
		t.Errorf("InWindow: %v %v %v, want false true true", sp.InWindow(0), sp.InWindow(1), sp.InWindow(2))
	}
	want := "sliding-window layers (5 of 6, window 6 positions): only the last 6, positions 5–10, in logical blocks 1–2 (marked); the 1 global layer attends all 11, so the cache keeps every block"
	if got := WindowLine(s, 2, w); got != want {
		t.Errorf("window line\n%q\nwant\n%q", got, want)
	}
	if got := WindowLine(s, 2, Window{Size: 16, Local: 5, Layers: 6}); !strings.Contains(got, "still all 11 positions, in logical blocks 0–2") {
		t.Errorf("a window longer than the sequence: %q", got)
	}
	for _, c := range []struct {
		seq kvcache.SeqID
		w   Window
	}{{2, Window{}}, {99, w}} {
		if got := WindowLine(s, c.seq, c.w); got != "" {
			t.Errorf("sequence %d, window %+v: %q, want no line", c.seq, c.w, got)
		}
	}
}

// The gemma3 model's sequence, selected in the inspector: its last 8
// positions' blocks carry the window bar and the line names them; its
// older blocks are still in the table (and drawn) but without the bar; a
// model without a window shows neither.
func TestInspectorShowsSlidingWindow(t *testing.T) {
	e, m, seq := gemma3Engine(t, 22)
	s := e.Snapshot().Cache
	var q kvcache.SeqInfo
	for _, x := range s.Seqs {
		if x.ID == seq {
			q = x
		}
	}
	if want := (q.Len + 3) / 4; len(q.Blocks) != want {
		t.Fatalf("%d tokens in %d blocks, want all %d kept", q.Len, len(q.Blocks), want)
	}
	w := WindowOf(&m.Config)
	if w != (Window{Size: 8, Local: 6, Layers: 7}) {
		t.Fatalf("the parity gemma3 model's window: %+v, want 8 positions on 6 of 7 layers", w)
	}

	test.NewTempApp(t)
	in := New()
	win := test.NewTempWindow(t, in)
	win.Resize(fyne.NewSize(700, 700))
	in.SetWindow(w)
	in.Update(s, nil, 0, 0)
	win.Canvas().Capture() // lays out the grid
	if in.WindowDetails() != "" {
		t.Errorf("a window line %q with nothing selected", in.WindowDetails())
	}
	test.TapCanvas(win.Canvas(), cellPos(in.Heatmap, q.Blocks[0]))
	if got, ok := in.Heatmap.Selected(); !ok || got != seq {
		t.Fatalf("tapping the sequence's first block selected %d, %v", got, ok)
	}
	first, last := q.Len-8, q.Len-1
	line := in.WindowDetails()
	for _, want := range []string{
		"sliding-window layers (6 of 7, window 8 positions)",
		"positions " + strconv.Itoa(first) + "–" + strconv.Itoa(last),
		"logical blocks " + strconv.Itoa(first/4) + "–" + strconv.Itoa(last/4),
		"the 1 global layer attends all " + strconv.Itoa(q.Len),
	} {
		if !strings.Contains(line, want) {
			t.Errorf("window line %q lacks %q", line, want)
		}
	}
	if !strings.Contains(in.Details(), "logical → physical") {
		t.Errorf("details %q lost the block table", in.Details())
	}
	if len(in.legendOf) == 0 || in.legendOf[len(in.legendOf)-1].Color != WindowColor {
		t.Errorf("legend %+v has no window entry", in.legendOf)
	}

	img := win.Canvas().Capture()
	if c := in.Heatmap.Grid().Cell; c < 12 {
		t.Fatalf("cells of %d pixels are too small to read a bar from", c)
	}
	for i, id := range q.Blocks {
		got := rgbaAt(img, barPos(in.Heatmap, id))
		inside := i >= first/4 && i <= last/4
		if inside && got != WindowColor {
			t.Errorf("logical block %d (block %d) holds a position in the window but its bar pixel is %v, want %v", i, id, got, WindowColor)
		}
		if !inside && got != OwnerColor(int64(seq)) {
			t.Errorf("logical block %d (block %d) is outside the window but its bar pixel is %v, want the owner colour %v", i, id, got, OwnerColor(int64(seq)))
		}
	}

	// A model without sliding-window layers: no bar, no line.
	in.SetWindow(Window{})
	if in.WindowDetails() != "" {
		t.Errorf("window line %q without a window", in.WindowDetails())
	}
	img = win.Canvas().Capture()
	if got := rgbaAt(img, barPos(in.Heatmap, q.Blocks[len(q.Blocks)-1])); got == WindowColor {
		t.Error("the last block still has the window bar without a window")
	}
}

// barPos returns the canvas position of the middle of the window bar's
// left half in cell i: off the block-table path's lines and outline.
func barPos(h *Heatmap, i int) fyne.Position {
	g := h.Grid()
	r := g.Rect(i)
	bar := windowBar(r)
	p := image.Pt(r.Min.X+r.Dx()/4, (bar.Min.Y+bar.Max.Y)/2)
	size := h.Size()
	o := heatmapOrigin(h)
	return fyne.NewPos(o.X+(float32(p.X)+0.5)*size.Width/float32(g.Width), o.Y+(float32(p.Y)+0.5)*size.Height/float32(g.Height))
}
