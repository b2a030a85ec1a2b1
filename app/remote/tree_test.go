package remote

import (
	"image"
	"kvscope/vllm/vllmtest"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/test"

	"kvscope/app/uithread"
	"kvscope/internal/testshared"
	"kvscope/vllm/kvevents"
	"kvscope/vllm/kvsub"
	"kvscope/vllm/prefixcache"
)

// watched starts a vLLM panel on a real in-process publisher, its
// initial batches replayed, and returns both.
func watched(t *testing.T) (*vllmPanel, *vllmtest.Publisher) {
	p, pub, _ := watchedIn(t, "")
	return p, pub
}

// watchedIn is watched with the publisher's metrics at metricsURL, and
// the window.
func watchedIn(t *testing.T, metricsURL string) (*vllmPanel, *vllmtest.Publisher, fyne.Window) {
	t.Helper()
	test.NewTempApp(t)
	pub := vllmtest.NewPublisher(t)
	w := test.NewWindow(nil)
	t.Cleanup(w.Close)
	p := newVLLMPanel(w)
	t.Cleanup(p.close)
	uithread.Locked(func() {
		if err := p.AddSource(kvsub.Source{Name: "vllm-0", Endpoint: pub.PubEndpoint, Replay: pub.ReplayEndpoint}, metricsURL); err != nil {
			t.Fatal(err)
		}
		w.SetContent(p.root)
		w.Resize(fyne.NewSize(1000, 640))
	})
	return p, pub, w
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func nearCell(a, b Cell) bool {
	return near(a.X0, b.X0) && near(a.X1, b.X1) && near(a.Y0, b.Y0) && near(a.Y1, b.Y1)
}

// cellOf returns the cell of the node whose hash is h.
func cellOf(t *testing.T, v *TreeView, h uint64) (Cell, prefixcache.Node) {
	t.Helper()
	for i, n := range v.Tree().Nodes {
		if x, _ := n.Hash.Uint64(); x == h {
			return v.Cells()[i], n
		}
	}
	t.Fatalf("no node for hash %d in %d nodes", h, len(v.Tree().Nodes))
	return Cell{}, prefixcache.Node{}
}

// Three prompts share a two-block prefix (1, 2); two of them share a
// third block (4). The tree is one trunk: 1 as tall as the view, 2 as
// tall as its five blocks, 4 (three blocks) above 3 (one), 5 and 6 in 4's
// span. Evicting 5 and 6 marks their places in red and shrinks the tree.
func TestTreeShapeFromPublisher(t *testing.T) {
	p, pub := watched(t)
	pub.Publish(stored([]uint64{1, 2, 3}, nil, 4))
	pub.Publish(stored([]uint64{4, 5}, uint64(2), 4), stored([]uint64{6}, uint64(4), 4))
	uithread.WaitFor(t, "the tree of 6 blocks", func() bool { return p.tree.Tree().Blocks == 6 })

	var c5, c6 Cell
	uithread.Locked(func() {
		v := p.tree
		tr := v.Tree()
		if len(tr.Roots) != 1 || tr.Tokens != 24 {
			t.Fatalf("roots %v, tokens %d", tr.Roots, tr.Tokens)
		}
		for _, w := range []struct {
			h    uint64
			cell Cell
			size int
		}{
			{1, Cell{0, 0, 0.25, 1}, 6},
			{2, Cell{0.25, 0, 0.5, 5.0 / 6}, 5},
			{4, Cell{0.5, 0, 0.75, 0.5}, 3},
			{3, Cell{0.5, 0.5, 0.75, 0.5 + 1.0/6}, 1},
			{5, Cell{0.75, 0, 1, 1.0 / 6}, 1},
			{6, Cell{0.75, 1.0 / 6, 1, 2.0 / 6}, 1},
		} {
			c, n := cellOf(t, v, w.h)
			if !nearCell(c, w.cell) || n.Size != w.size {
				t.Errorf("block %d: cell %+v size %d, want %+v size %d", w.h, c, n.Size, w.cell, w.size)
			}
		}
		c5, _ = cellOf(t, v, 5)
		c6, _ = cellOf(t, v, 6)
		if len(v.Marks()) != 0 {
			t.Errorf("marks before any eviction: %v", v.Marks())
		}
	})

	pub.WaitSubscribed()
	pub.Publish(vllmtest.Removed(5, 6), vllmtest.Removed(99)) // 99 was never cached: nothing to mark
	uithread.WaitFor(t, "the tree of 4 blocks", func() bool { return p.tree.Tree().Blocks == 4 })
	uithread.Locked(func() {
		v := p.tree
		marks := v.Marks()
		if len(marks) != 2 || !nearCell(marks[0].Cell, c5) || !nearCell(marks[1].Cell, c6) {
			t.Errorf("marks %+v, want the cells of 5 %+v and 6 %+v", marks, c5, c6)
		}
		// Two columns fewer are left; 3 and 4, one block each, share 2's
		// span, 3 first (equal sizes go in key order).
		if c, n := cellOf(t, v, 4); n.Size != 1 || !nearCell(c, Cell{2.0 / 3, 0.25, 1, 0.5}) {
			t.Errorf("block 4 after the evictions: %+v size %d", c, n.Size)
		}
		// The mark is drawn red where block 5 was.
		img := image.NewRGBA(image.Rect(0, 0, 400, 240))
		RenderTree(img, v.Tree(), v.Cells(), -1, marks)
		r := c5.Rect(400, 240)
		px := img.RGBAAt((r.Min.X+r.Max.X)/2, (r.Min.Y+r.Max.Y)/2)
		if px.R < 0xa0 || px.G > 0x60 {
			t.Errorf("pixel in 5's old place %v, want red", px)
		}
	})

	// The marks fade.
	uithread.Locked(func() {
		v := p.tree
		later := time.Now().Add(MarkFade)
		v.now = func() time.Time { return later }
		if m := v.Marks(); len(m) != 0 {
			t.Errorf("marks after %v: %v", MarkFade, m)
		}
		v.now = time.Now
	})
}

// Tapping a block selects its chain, whose tokens show as ids and, with
// the demo model's tokenizer open, as its text.
func TestTreeSelectDecodes(t *testing.T) {
	p, pub := watched(t)
	pub.Publish(stored([]uint64{1, 2, 3}, nil, 4))
	uithread.WaitFor(t, "the tree of 3 blocks", func() bool { return p.tree.Tree().Blocks == 3 })
	var want []int
	uithread.Locked(func() {
		v := p.tree
		c, _ := cellOf(t, v, 3)
		s := v.Size()
		v.Tapped(&fyne.PointEvent{Position: fyne.NewPos(float32(c.X0+c.X1)/2*s.Width, float32(c.Y0+c.Y1)/2*s.Height)})
		if i := v.Selected(); i < 0 || v.Tree().Nodes[i].Depth != 2 {
			t.Fatalf("selected %d", i)
		}
		ids := v.Tree().ChainTokens(v.Selected())
		if len(ids) != 12 {
			t.Fatalf("chain tokens %v", ids)
		}
		for _, id := range ids {
			want = append(want, int(id))
		}
		if !strings.HasPrefix(p.text.Text, "Chain of 3 blocks, 12 tokens: 264 265 266 267 268") {
			t.Errorf("chain text %q", p.text.Text)
		}
		if d := v.Describe(v.Selected()); !strings.Contains(d, "block 3 of its chain, 4 tokens") {
			t.Errorf("description %q", d)
		}
	})
	tok, err := LoadTokenizer(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		p.SetTokenizer(tok, "stories260K.gguf")
		text := tok.Decode(want)
		if text == "" || p.text.Text != "Chain of 3 blocks, 12 tokens: “"+text+"”" {
			t.Errorf("decoded chain %q, want %q", p.text.Text, text)
		}
	})
	// Evicting the selected block ends the selection.
	pub.WaitSubscribed()
	pub.Publish(vllmtest.Removed(3))
	uithread.WaitFor(t, "the selection to go", func() bool { return p.tree.Selected() < 0 && p.text.Text == "" })
}

// A cleared cache marks every block that was drawn.
func TestTreeClearedMarksAll(t *testing.T) {
	test.NewTempApp(t)
	v := NewTreeView()
	c := prefixcache.New(prefixcache.Options{})
	b, err := kvevents.DecodeBatch(mustPack(t, []any{1.0, []any{stored([]uint64{1, 2}, nil, 4), stored([]uint64{3}, uint64(1), 4)}, 0}))
	if err != nil {
		t.Fatal(err)
	}
	c.Apply(b)
	v.SetTree(c.Tree(), nil)
	if len(v.Cells()) != 3 {
		t.Fatalf("cells %v", v.Cells())
	}
	b2, _ := kvevents.DecodeBatch(mustPack(t, []any{2.0, []any{[]any{"AllBlocksCleared"}}, 0}))
	c.Apply(b2)
	evs, _ := c.EvictionsSince(0)
	v.SetTree(c.Tree(), evs)
	if len(v.Tree().Nodes) != 0 || len(v.Marks()) != 3 {
		t.Errorf("nodes %d, marks %d", len(v.Tree().Nodes), len(v.Marks()))
	}
}

// With KVSCOPE_REMOTE_SCREENSHOT set to a folder, the vLLM view is drawn
// headless on a published cache and saved there as remote-tree.png (the
// README's picture: go test -run TestRemoteScreenshot ./app/remote with
// KVSCOPE_REMOTE_SCREENSHOT=$PWD/assets).
func TestRemoteScreenshot(t *testing.T) {
	dir := os.Getenv("KVSCOPE_REMOTE_SCREENSHOT")
	if dir == "" {
		t.Skip("set KVSCOPE_REMOTE_SCREENSHOT to a folder to draw the tree view's picture there")
	}
	p, pub, w := watchedIn(t, countingMetrics(t))
	screenshotLoad(t, p, pub)
	var img image.Image
	uithread.Locked(func() {
		// Twice: a word-wrapped label's height follows its width, which
		// the first layout sets.
		size := w.Canvas().Size()
		w.Resize(size.AddWidthHeight(1, 0))
		w.Resize(size)
		img = w.Canvas().Capture()
	})
	savePNG(t, filepath.Join(dir, "remote-tree.png"), img)
}

// Hit counts, where a source reports them, are written on the blocks big
// enough to hold them and drawn as a light top edge.
func TestTreeHitLabels(t *testing.T) {
	test.NewTempApp(t)
	v := NewTreeView()
	w := test.NewWindow(v)
	defer w.Close()
	w.Resize(fyne.NewSize(600, 400))
	c := prefixcache.New(prefixcache.Options{})
	b, err := kvevents.DecodeBatch(mustPack(t, []any{1.0, []any{stored([]uint64{1, 2}, nil, 4), stored([]uint64{3}, uint64(1), 4)}, 0}))
	if err != nil {
		t.Fatal(err)
	}
	c.Apply(b)
	if !c.AddHits(prefixcache.Key{Group: -1, Hash: kvevents.IntHash(1)}, 7) {
		t.Fatal("block 1 is not cached")
	}
	v.SetTree(c.Tree(), nil)
	var texts []string
	for _, o := range test.LaidOutObjects(v) {
		if tx, ok := o.(*canvas.Text); ok && tx.Visible() {
			texts = append(texts, tx.Text)
		}
	}
	if !slices.Equal(texts, []string{"7 hits"}) {
		t.Errorf("labels %q, want one saying 7 hits", texts)
	}
	if d := v.Describe(0); !strings.Contains(d, "7 hits") || !strings.Contains(d, "2 blocks (8 tokens) hang on it in 2 branches") {
		t.Errorf("root described as %q", d)
	}
	img := image.NewRGBA(image.Rect(0, 0, 300, 200))
	RenderTree(img, v.Tree(), v.Cells(), -1, nil)
	if px := img.RGBAAt(40, 0); px != hitColor {
		t.Errorf("top edge of the hit block %v, want %v", px, hitColor)
	}
}
