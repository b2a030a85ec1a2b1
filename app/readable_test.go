package app

import (
	"fmt"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
	"kvscope/app/store"
	"kvscope/app/uithread"
)

// cutOff lists what in o's tree is drawn smaller than it needs: an object
// whose size is under its MinSize, a label whose text is shown with an
// ellipsis, a text drawn narrower than its words. Scrolled content and
// list rows (the event log's, one line an event) are not looked into: they
// scroll; rectangles have nothing to read.
func cutOff(o fyne.CanvasObject) []string {
	var out []string
	var walk func(o fyne.CanvasObject, path string)
	walk = func(o fyne.CanvasObject, path string) {
		if o == nil || !o.Visible() {
			return
		}
		name := fmt.Sprintf("%T", o)
		switch x := o.(type) {
		case *widget.Label:
			name = fmt.Sprintf("label %q", x.Text)
		case *canvas.Text:
			name = fmt.Sprintf("text %q", x.Text)
			if strings.HasSuffix(x.Text, "…") {
				out = append(out, path+" > "+name+": cut off with an ellipsis")
			}
		case *canvas.Rectangle, *canvas.Line, *canvas.Circle:
			return
		}
		path += " > " + name
		if min, size := o.MinSize(), o.Size(); min.Width > size.Width+0.5 || min.Height > size.Height+0.5 {
			out = append(out, fmt.Sprintf("%s: %.0f×%.0f, needs %.0f×%.0f", path, size.Width, size.Height, min.Width, min.Height))
		}
		switch x := o.(type) {
		case *container.Scroll, *widget.List:
		case *fyne.Container:
			for _, k := range x.Objects {
				walk(k, path)
			}
		case fyne.Widget:
			for _, k := range test.WidgetRenderer(x).Objects() {
				walk(k, path)
			}
		}
	}
	walk(o, "")
	return out
}

// At 1024×700 the inspector's gauges, history and the hovered block's
// details are whole in every colour mode: nothing is drawn smaller than it
// needs, no label ends in an ellipsis, and the details need no scrolling.
func TestInspectorReadableAt1024x700(t *testing.T) {
	a, w := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	size := fyne.NewSize(1024, 700)
	uithread.Locked(func() {
		w.Resize(size)
		a.tabs.Select(a.tabInspector)
		a.chat.Update(a.chat.Selected(), func(c *store.Conversation) {
			c.Title = "A long conversation title, as Title makes"
			c.Sampling.MaxTokens = 40
		})
		test.Type(chatComposer(t, a), "Once upon a time")
		test.Tap(chatSend(t, a))
	})
	uithread.WaitFor(t, "the reply", func() bool { return !a.chat.Running(a.chat.Selected()) })
	uithread.WaitFor(t, "the inspector to show its blocks", func() bool {
		s := a.insp.Snapshot()
		return s != nil && s.Metrics.CachedBlocks+s.Metrics.UsedBlocks > 0
	})
	uithread.Locked(func() {
		// Hover the first block, as the pointer does, on the heatmap as
		// drawn.
		w.Canvas().Capture()
		pos := fyne.CurrentApp().Driver().AbsolutePositionForObject(a.insp.Heatmap)
		for d := float32(2); d < 40 && !strings.HasPrefix(a.insp.Details(), "block"); d += 2 {
			test.MoveMouse(w.Canvas(), pos.AddXY(d, d))
		}
		if !strings.HasPrefix(a.insp.Details(), "block") {
			t.Fatalf("hovering the heatmap's corner shows %q, want a block's details", a.insp.Details())
		}
		t.Logf("hovered: %s", a.insp.Details())
		for _, m := range inspector.Modes() {
			a.insp.SetMode(m)
			// Lay the window out again, as the driver does when a
			// label's lines change.
			w.Resize(size.AddWidthHeight(1, 0))
			w.Resize(size)
			if got := a.insp.Size(); got.Width < 400 || got.Height < 500 {
				t.Fatalf("the inspector gets %v of the 1024×700 window", got)
			}
			for _, c := range cutOff(a.insp) {
				t.Errorf("colour by %s: %s", m, c)
			}
			if need, got := detailsFit(t, a); need > got+0.5 {
				t.Errorf("colour by %s: the details need %.0f px, and show %.0f without scrolling", m, need, got)
			}
		}
	})
}

// detailsFit returns the height the inspector's details label needs and
// the height of the scroll that shows it.
func detailsFit(t *testing.T, a *App) (need, shown float32) {
	t.Helper()
	text := a.insp.Details()
	found := false
	visit(a.insp, func(o fyne.CanvasObject) bool {
		sc, ok := o.(*container.Scroll)
		if !ok {
			return false
		}
		visit(sc.Content, func(o fyne.CanvasObject) bool {
			if l, ok := o.(*widget.Label); ok && l.Text == text {
				need, shown, found = l.MinSize().Height, sc.Size().Height, true
			}
			return found
		})
		return found
	})
	if !found {
		t.Fatalf("no scroll shows the details %q", text)
	}
	return need, shown
}
