package app

import (
	"fmt"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
	"kvscope/app/internal/layoutcheck"
	"kvscope/app/store"
	"kvscope/app/uithread"
)

// cutOff lists what in o's tree is drawn smaller than it needs (see
// layoutcheck.CutOff).
func cutOff(o fyne.CanvasObject) []string { return layoutcheck.CutOff(o) }

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

// At 1024×700 the Controls tab is whole: scrolled to its end, the capacity
// view's table is in sight in full and at least 200 px tall, and no label
// anywhere in the tab is cut off or drawn over.
func TestControlsReadableAt1024x700(t *testing.T) {
	a, w := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	size := fyne.NewSize(1024, 700)
	uithread.Locked(func() {
		w.Resize(size)
		a.tabs.Select(a.tabControls)
		w.Resize(size.AddWidthHeight(1, 0))
		w.Resize(size)
		sc, ok := a.controls.root.(*container.Scroll)
		if !ok {
			t.Fatalf("the Controls tab is a %T, not a scroll", a.controls.root)
		}
		sc.ScrollToBottom()
		w.Canvas().Capture()
		d := fyne.CurrentApp().Driver()
		grid := a.controls.capacity.grid
		top := d.AbsolutePositionForObject(grid).Y
		bottom := top + grid.Size().Height
		scTop := d.AbsolutePositionForObject(sc).Y
		scBottom := scTop + sc.Size().Height
		t.Logf("the capacity table: %.0f–%.0f px; the tab's scroll %.0f–%.0f px; the window %.0f px tall", top, bottom, scTop, scBottom, w.Canvas().Size().Height)
		if grid.Size().Height < 200 {
			t.Errorf("the capacity table is %.0f px tall, want at least 200", grid.Size().Height)
		}
		if top < scTop-0.5 || bottom > scBottom+0.5 || scBottom > w.Canvas().Size().Height+0.5 {
			t.Errorf("scrolled to its end, the Controls tab shows %.0f–%.0f px of the window (%.0f tall); the capacity table is at %.0f–%.0f", scTop, scBottom, w.Canvas().Size().Height, top, bottom)
		}
		for _, c := range layoutcheck.Labels(cutOff(sc.Content)) {
			t.Error(c)
		}
		for _, c := range layoutcheck.Labels(cutOff(w.Content())) {
			if !strings.Contains(c, fmt.Sprintf("label %q", a.status.Text)) { // the status line is one line by design
				t.Error(c)
			}
		}
	})
}

// On the demo model the chat pane says once that its conversations are
// plain completion: in the mode bar, not again in the note above it.
func TestOnePlainCompletionNote(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		var said []string
		visit(a.chat, func(o fyne.CanvasObject) bool {
			if l, ok := o.(*widget.Label); ok && l.Visible() && strings.Contains(strings.ToLower(l.Text), "plain completion") {
				said = append(said, l.Text)
			}
			return false
		})
		if len(said) != 1 {
			t.Errorf("the chat pane says plain completion %d times: %q", len(said), said)
		}
	})
}
