package inspector

import (
	"image"
	"image/color"
	"testing"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
)

// newCache makes a manager over a real, tiny K/V store: one layer, one KV
// head of 2 dims, blocks of 4 tokens, K int8 and V int4 (so that precision
// mode has two colours and a key residual to show).
func newCache(t testing.TB, blocks int, hostBudget int64) (*kvcache.Manager, *kvstore.Store) {
	t.Helper()
	sc := kvstore.Config{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: 4, Blocks: blocks, K: kvstore.Int8, V: kvstore.Int4}
	st, err := kvstore.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	bb := kvstore.BlockBytes(sc)
	m, err := kvcache.New(kvcache.Config{BlockSize: 4, BlockBytes: bb, Budget: int64(blocks * bb), HostBudget: hostBudget,
		KPrecision: "int8", VPrecision: "int4"}, st)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// write plays the model: it writes K/V for sequence id's tokens [from, Len)
// and commits them.
func write(t testing.TB, m *kvcache.Manager, st *kvstore.Store, id kvcache.SeqID, from int) {
	t.Helper()
	toks := m.Tokens(id)
	table := m.BlockTable(id)
	for i := from; i < len(toks); i++ {
		st.Write(0, table[i/4], i%4, []float32{float32(toks[i]), float32(i)}, []float32{-float32(toks[i]), 1})
	}
	if err := m.Commit(id, len(toks)); err != nil {
		t.Fatal(err)
	}
}

func seqTokens(base, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(base + i)
	}
	return out
}

// buildState makes this pool of 16 blocks of 4 tokens:
//
//	block 0, 1: sequence 1's and 2's shared prompt (full, ref 2)
//	block 2:    sequence 1's last block, 2 of 4 slots (ref 1)
//	block 3:    sequence 2's copy of block 2 plus one token, 3 of 4 (ref 1)
//	block 4, 5: sequence 3's blocks, freed: cached, released at step 2
//	block 6–15: free
func buildState(t testing.TB) (*kvcache.Manager, *kvstore.Store) {
	m, st := newCache(t, 16, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Allocate(1, seqTokens(100, 10), kvcache.SeqOptions{})
	must(err)
	write(t, m, st, 1, 0)
	must(m.Fork(1, 2))
	m.Tick()
	_, err = m.Append(2, []int32{7})
	must(err)
	write(t, m, st, 2, 10)
	m.Tick()
	_, err = m.Allocate(3, seqTokens(500, 8), kvcache.SeqOptions{})
	must(err)
	write(t, m, st, 3, 0)
	must(m.Free(3))
	m.Tick()
	must(m.Check())
	return m, st
}

// cellColor reads the colour at the middle of cell i's upper or lower half.
func cellColor(img *image.RGBA, g Grid, i int, lower bool) color.RGBA {
	r := g.Rect(i)
	y := r.Min.Y + r.Dy()/4
	if lower {
		y = r.Max.Y - 1 - r.Dy()/4
	}
	return img.RGBAAt((r.Min.X+r.Max.X)/2, y)
}

func TestBuildStateIsWhatTheTestsExpect(t *testing.T) {
	m, _ := buildState(t)
	s := m.Snapshot()
	want := []struct {
		state  kvcache.BlockState
		ref    int
		filled int
	}{
		{kvcache.BlockUsed, 2, 4}, {kvcache.BlockUsed, 2, 4}, {kvcache.BlockUsed, 1, 2}, {kvcache.BlockUsed, 1, 3},
		{kvcache.BlockCached, 0, 4}, {kvcache.BlockCached, 0, 4}, {kvcache.BlockFree, 0, 0},
	}
	for id, w := range want {
		b := s.Blocks[id]
		if b.State != w.state || b.Ref != w.ref || b.Filled != w.filled {
			t.Errorf("block %d: %s ref %d filled %d, want %s ref %d filled %d", id, b.State, b.Ref, b.Filled, w.state, w.ref, w.filled)
		}
	}
	if got := m.BlockTable(2); len(got) != 3 || got[2] != 3 {
		t.Errorf("sequence 2's block table is %v, want [0 1 3]", got)
	}
}

func TestRenderColoursPerMode(t *testing.T) {
	m, _ := buildState(t)
	s := m.Snapshot()
	victim1 := lerp(VictimColor, VictimLastColor, 1.0/7)
	type probe struct {
		block int
		lower bool // the cell's lower half (V in precision mode)
		want  color.RGBA
	}
	tests := []struct {
		mode   Mode
		probes []probe
	}{
		{ByOwner, []probe{
			{0, false, OwnerColor(1)}, {1, false, OwnerColor(1)}, {2, false, OwnerColor(1)},
			{3, false, OwnerColor(2)}, {4, false, CachedColor}, {5, false, CachedColor}, {6, false, FreeColor}, {15, false, FreeColor},
		}},
		{ByFill, []probe{
			{0, false, FillColor(4, 4)}, {2, false, FillColor(2, 4)}, {3, false, FillColor(3, 4)},
			{4, false, CachedColor}, {9, false, FreeColor},
		}},
		{ByPrecision, []probe{
			{0, false, PrecisionColor("int8")}, {0, true, PrecisionColor("int4")},
			{2, false, ResidualColor}, {2, true, PrecisionColor("int4")},
			{4, false, dim(PrecisionColor("int8"))}, {4, true, dim(PrecisionColor("int4"))},
			{7, false, FreeColor}, {7, true, FreeColor},
		}},
		{ByRefCount, []probe{
			{0, false, RefColor(2)}, {1, false, RefColor(2)}, {2, false, RefColor(1)}, {3, false, RefColor(1)},
			{4, false, CachedColor}, {8, false, FreeColor},
		}},
		{ByRecency, []probe{
			// Blocks 4 and 5 were released together: the chain's tail (5) goes first.
			{5, false, VictimColor}, {4, false, victim1}, {10, false, FreeColor},
		}},
		{ByLocation, []probe{
			{0, false, DeviceColor}, {3, false, DeviceColor}, {4, false, CachedColor}, {6, false, FreeColor},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			img, g := Image(s, View{Mode: tc.mode}, 200, 120)
			if g.Device != 16 || g.Cell < 8 {
				t.Fatalf("grid %+v: want 16 device cells of at least 8 pixels", g)
			}
			for _, p := range tc.probes {
				if got := cellColor(img, g, g.DeviceCell(p.block), p.lower); got != p.want {
					t.Errorf("block %d (lower half %v): colour %v, want %v", p.block, p.lower, got, p.want)
				}
			}
		})
	}
}

func TestRenderRecencyUsedBlocksByAge(t *testing.T) {
	m, st := buildState(t)
	// Touch sequence 2 now: its last block (3) is the most recent.
	if _, err := m.Append(2, []int32{8}); err != nil {
		t.Fatal(err)
	}
	write(t, m, st, 2, 11)
	s := m.Snapshot()
	img, g := Image(s, View{Mode: ByRecency}, 200, 120)
	if got := cellColor(img, g, 3, false); got != hotColor {
		t.Errorf("block written this step: %v, want the hot colour %v", got, hotColor)
	}
	if got := cellColor(img, g, 0, false); got == hotColor || got == FreeColor {
		t.Errorf("block idle since step 0 has colour %v, want a cooler colour", got)
	}
}

func TestRenderSharedBlocksOutlinedInOwnerMode(t *testing.T) {
	m, _ := buildState(t)
	img, g := Image(m.Snapshot(), View{Mode: ByOwner}, 200, 120)
	for _, tc := range []struct {
		block int
		want  color.RGBA
	}{{0, MarkColor}, {1, MarkColor}, {2, OwnerColor(1)}, {3, OwnerColor(2)}} {
		r := g.Rect(tc.block)
		if got := img.RGBAAt(r.Min.X, r.Min.Y); got != tc.want {
			t.Errorf("block %d's corner: %v, want %v", tc.block, got, tc.want)
		}
	}
}

func TestRenderSelectionDimsOthersAndDrawsTheBlockTable(t *testing.T) {
	m, _ := buildState(t)
	img, g := Image(m.Snapshot(), View{Mode: ByOwner, Selected: 2, Selecting: true}, 200, 120)
	corner := func(i int) color.RGBA { r := g.Rect(i); return img.RGBAAt(r.Min.X+2, r.Min.Y+2) }
	if got := corner(3); got != OwnerColor(2) {
		t.Errorf("selected sequence's block 3: %v, want %v", got, OwnerColor(2))
	}
	if got := corner(2); got != dim(OwnerColor(1)) {
		t.Errorf("other sequence's block 2: %v, want dimmed %v", got, dim(OwnerColor(1)))
	}
	if got := corner(4); got != dim(CachedColor) {
		t.Errorf("cached block 4: %v, want dimmed %v", got, dim(CachedColor))
	}
	// The block table 0 → 1 → 3 is a path through the cells' centres.
	for _, b := range []int{0, 1, 3} {
		c := g.Center(b)
		if got := img.RGBAAt(c.X, c.Y); got != MarkColor {
			t.Errorf("centre of block %d on the path: %v, want %v", b, got, MarkColor)
		}
	}
	// The first logical block is outlined.
	r := g.Rect(0)
	if got := img.RGBAAt(r.Min.X, r.Max.Y-1); got != MarkColor {
		t.Errorf("first block's outline: %v, want %v", got, MarkColor)
	}
}

func TestRenderHostBlocks(t *testing.T) {
	m, st := newCache(t, 8, 1<<20)
	if _, err := m.Allocate(1, seqTokens(1, 6), kvcache.SeqOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, m, st, 1, 0)
	if _, err := m.Allocate(2, seqTokens(50, 3), kvcache.SeqOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, m, st, 2, 0)
	if r, err := m.Preempt(1, kvcache.Swap); err != nil || r.Mode != kvcache.Swap {
		t.Fatalf("preempt by swap: %+v, %v", r, err)
	}
	s := m.Snapshot()
	if len(s.Host) != 2 {
		t.Fatalf("host pool holds %d blocks, want 2", len(s.Host))
	}
	img, g := Image(s, View{Mode: ByLocation}, 200, 120)
	if g.HostStart%g.Cols != 0 || g.HostStart < g.Device {
		t.Errorf("host blocks start at cell %d, want the first cell of a row after the %d device cells (%d columns)", g.HostStart, g.Device, g.Cols)
	}
	for i := range s.Host {
		if got := cellColor(img, g, g.HostCell(i), false); got != HostColor {
			t.Errorf("host block %d: %v, want %v", i, got, HostColor)
		}
	}
	if got := cellColor(img, g, 2, false); got != DeviceColor {
		t.Errorf("sequence 2's device block 2: %v, want %v", got, DeviceColor)
	}
	// Selecting the swapped sequence keeps its host cells bright.
	img, g = Image(s, View{Mode: ByLocation, Selected: 1, Selecting: true}, 200, 120)
	r := g.Rect(g.HostCell(1))
	if got := img.RGBAAt(r.Max.X-2, r.Max.Y-2); got != HostColor {
		t.Errorf("selected swapped sequence's host block: %v, want %v", got, HostColor)
	}
	if idx, host, ok := g.Block(g.HostCell(1)); !ok || !host || idx != 1 {
		t.Errorf("Block(host cell 1) = %d, %v, %v; want 1, true, true", idx, host, ok)
	}
}

func TestRenderNilAndTinyImages(t *testing.T) {
	img, g := Image(nil, View{}, 10, 10)
	if got := img.RGBAAt(5, 5); got != Background || g.Cols != 0 {
		t.Errorf("nil snapshot: pixel %v grid %+v, want background and no cells", got, g)
	}
	m, _ := buildState(t)
	for _, size := range [][2]int{{0, 0}, {1, 1}, {3, 2}, {1, 100}} {
		img, g := Image(m.Snapshot(), View{Mode: ByFill, Hovering: true, HoverCell: 5, Selecting: true, Selected: 1}, size[0], size[1])
		if img.Bounds().Dx() != size[0] {
			t.Errorf("size %v: image %v", size, img.Bounds())
		}
		_ = g
	}
}

func TestNewGrid(t *testing.T) {
	tests := []struct {
		device, host, w, h int
	}{
		{16, 0, 200, 120}, {16384, 0, 1100, 700}, {16384, 0, 800, 500}, {1000, 37, 640, 300},
		{7, 3, 50, 50}, {1, 0, 300, 10}, {5000, 0, 100, 40}, // the last does not fit: clipped
	}
	for _, tc := range tests {
		g := NewGrid(tc.device, tc.host, tc.w, tc.h)
		fits := tc.device+tc.host <= tc.w*tc.h
		visible := 0
		for i := 0; i < g.Cells(); i++ {
			if _, _, ok := g.Block(i); ok && g.Visible(i) {
				visible++
				c := g.Center(i)
				if got := g.CellAt(c.X, c.Y); got != i {
					t.Errorf("%+v: CellAt(centre of %d) = %d", tc, i, got)
				}
			}
		}
		if fits && visible != tc.device+tc.host {
			t.Errorf("%+v: grid %+v shows %d of %d blocks", tc, g, visible, tc.device+tc.host)
		}
		if fits && g.Rows*g.Cell > tc.h {
			t.Errorf("%+v: %d rows of %d pixels overflow %d", tc, g.Rows, g.Cell, tc.h)
		}
		if next := NewGrid(tc.device, tc.host, tc.w, tc.h); fits && g.Cell > 1 {
			// A bigger cell must not fit, or the grid wastes room.
			bigger := next
			bigger.Cell++
			cols := tc.w / bigger.Cell
			if cols > 0 {
				cells := tc.device
				if tc.host > 0 {
					cells = (tc.device+cols-1)/cols*cols + tc.host
				}
				if (cells+cols-1)/cols*bigger.Cell <= tc.h {
					t.Errorf("%+v: cells of %d pixels, but %d would fit", tc, g.Cell, bigger.Cell)
				}
			}
		}
	}
	if got := NewGrid(16, 0, 200, 120).CellAt(-1, 3); got != -1 {
		t.Errorf("CellAt outside = %d, want -1", got)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes() {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
		if len(Legend(m, nil, nil, nil)) == 0 || Caption(m) == "" {
			t.Errorf("mode %s has no legend or caption", m)
		}
	}
	if _, err := ParseMode("rainbow"); err == nil {
		t.Error("ParseMode(rainbow) gave no error")
	}
}
