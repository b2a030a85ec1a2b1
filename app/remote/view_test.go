package remote

import (
	"kvscope/vllm/vllmtest"
	"runtime"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/internal/layoutcheck"
	"kvscope/app/uithread"
	"kvscope/vllm/kvsub"
)

// Close ends every goroutine the view started: the sources' subscribers
// and metrics polls, the refresh loop and a remote kvscope's feed. A view
// that watches nothing starts none.
func TestViewCloseStopsGoroutines(t *testing.T) {
	test.NewTempApp(t)
	pub := vllmtest.NewPublisher(t)
	met := countingMetrics(t)
	earlier := goroutineIDs() // other tests' goroutines, if any are still ending
	viewGoroutines := func() []string { return viewGoroutines(earlier) }
	w := test.NewWindow(nil)
	defer w.Close()
	v := New(w)
	if g := viewGoroutines(); len(g) > 0 {
		t.Errorf("an idle view runs %d goroutines:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	uithread.Locked(func() {
		w.SetContent(v)
		if err := v.vllm.AddSource(kvsub.Source{Endpoint: pub.PubEndpoint, Replay: pub.ReplayEndpoint}, met); err != nil {
			t.Fatal(err)
		}
		if err := v.vllm.AddSource(kvsub.Source{Endpoint: pub.PubEndpoint}, ""); err == nil {
			t.Error("the same endpoint was taken twice")
		}
		if err := v.srv.Connect("http://127.0.0.1:1", ""); err != nil {
			t.Fatal(err)
		}
	})
	pub.Publish(stored([]uint64{1}, nil, 4))
	uithread.WaitFor(t, "the block", func() bool { return v.vllm.tree.Tree().Blocks == 1 })
	if len(viewGoroutines()) == 0 {
		t.Fatal("a watching view runs no goroutine of its own: the test cannot see them stop")
	}
	v.Close()
	var left []string
	uithread.WaitFor(t, "the view's goroutines to end", func() bool {
		left = viewGoroutines()
		return len(left) == 0
	})
}

// goroutineIDs returns the ids of the goroutines running now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range stacks() {
		ids[strings.Fields(g)[1]] = true
	}
	return ids
}

// stacks returns every goroutine's stack, one string each ("goroutine N
// [state]:" first).
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// viewGoroutines returns the stacks of the goroutines running the view's
// code (packages remote and kvsub), leaving out the test's own and those
// in earlier.
func viewGoroutines(earlier map[string]bool) []string {
	var out []string
	for _, g := range stacks() {
		if earlier[strings.Fields(g)[1]] || strings.Contains(g, "testing.tRunner") {
			continue
		}
		if strings.Contains(g, "kvscope/app/remote.") || strings.Contains(g, "kvscope/vllm/kvsub.") {
			out = append(out, g)
		}
	}
	return out
}

// The Remote tab needs no more room than an inspector does: its pages
// scroll in a small window and fill a large one.
func TestViewNeedsLittleRoom(t *testing.T) {
	test.NewTempApp(t)
	w := test.NewWindow(nil)
	defer w.Close()
	v := New(w)
	w.SetContent(v)
	w.Resize(fyne.NewSize(1000, 700))
	if m, im := v.MinSize(), inspector.New().MinSize(); m.Width > im.Width || m.Height > im.Height {
		t.Errorf("the view needs %v, an inspector %v", m, im)
	}
	if s := v.vllm.root.Size(); s.Width < 900 || s.Height < 600 {
		t.Errorf("the vLLM page is %v in a 1000×700 window", s)
	}
}

// The vLLM page is readable at the size of its picture (1000×640) and at
// the Remote tab's share of a 1024×700 window: no label is cut off or
// drawn smaller than it needs, the Stop button sits beside its
// instance's text (not over it), counts take their plural forms ("1
// instance"), and every chart gives its axis values.
func TestVLLMPageReadable(t *testing.T) {
	p, pub, w := watchedIn(t, countingMetrics(t))
	system := []uint64{1, 2, 3, 4, 5, 6}
	pub.Publish(stored(system, nil, 16))
	pub.Publish(stored([]uint64{7, 8}, uint64(6), 16))
	pub.Publish(stored([]uint64{9}, uint64(6), 16))
	uithread.WaitFor(t, "the published cache", func() bool { return p.tree.Tree().Blocks == 9 })
	uithread.WaitFor(t, "three metrics samples", func() bool { return len(p.reqs.values) >= 3 && strings.HasPrefix(p.total.Text, "Total") })
	for _, size := range []fyne.Size{fyne.NewSize(1000, 640), fyne.NewSize(540, 610)} {
		uithread.Locked(func() {
			w.Resize(size.AddWidthHeight(1, 0))
			w.Resize(size)
			w.Canvas().Capture()
			for _, c := range layoutcheck.Labels(layoutcheck.CutOff(p.root)) {
				t.Errorf("at %v: %s", size, c)
			}
			for _, c := range layoutcheck.Labels(layoutcheck.CutOff(p.left)) { // it scrolls: look in
				t.Errorf("at %v: the left panel%s", size, c)
			}
			if !strings.HasPrefix(p.total.Text, "Total, 1 instance\n") || strings.Contains(p.total.Text, " 1 instances") {
				t.Errorf("the total reads %q", p.total.Text)
			}
			row := p.sources[0].row
			box := p.rows.Objects[0].(*fyne.Container)
			var stop fyne.CanvasObject
			for _, o := range box.Objects {
				if o != row {
					stop = o
				}
			}
			d := fyne.CurrentApp().Driver()
			if rx, sx := d.AbsolutePositionForObject(row).X+row.Size().Width, d.AbsolutePositionForObject(stop).X; sx < rx-0.5 {
				t.Errorf("at %v: the Stop button starts at x %.0f, over its row's text, which ends at %.0f", size, sx, rx)
			}
			for _, ch := range []*chart{p.usage, p.hits, p.reqs, p.pre} {
				if ch.yTop.Text == "" || ch.yBot.Text == "" || !strings.HasPrefix(ch.xFrom.Text, "−") || ch.xTo.Text != "now" {
					t.Errorf("the chart %q has axes %q to %q, %q to %q", ch.title.Text, ch.yBot.Text, ch.yTop.Text, ch.xFrom.Text, ch.xTo.Text)
				}
			}
			if p.usage.yTop.Text != "100%" || p.usage.yBot.Text != "0%" {
				t.Errorf("the usage chart's axis runs from %q to %q", p.usage.yBot.Text, p.usage.yTop.Text)
			}
		})
	}
}
