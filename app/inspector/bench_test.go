package inspector

import (
	"image"
	"math/rand/v2"
	"testing"

	"kvscope/engine/kvcache"
)

// bigSnapshot makes a realistic pool of 16,384 blocks of 16 tokens: about
// 70 % used by 300 sequences of random lengths (some forked), 15 % cached
// by sequences that finished, the rest free. The manager keeps
// bookkeeping only (no tensors), as the waste benchmark does.
func bigSnapshot(tb testing.TB) *kvcache.Snapshot {
	const blocks, bs = 16384, 16
	m, err := kvcache.New(kvcache.Config{BlockSize: bs, BlockBytes: 1024, Budget: blocks * 1024,
		KPrecision: "int4", VPrecision: "int8"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	id := kvcache.SeqID(1)
	for m.FreeBlocks() > blocks*15/100 {
		n := 50 + r.IntN(1500)
		toks := make([]int32, n)
		for i := range toks {
			toks[i] = int32(r.IntN(32000))
		}
		if _, err := m.Allocate(id, toks, kvcache.SeqOptions{}); err != nil {
			break
		}
		m.Commit(id, n)
		if r.IntN(4) == 0 {
			m.Free(id)
		}
		m.Tick()
		id++
	}
	s := m.Snapshot()
	if len(s.Blocks) != blocks || s.Metrics.CachedBlocks == 0 || s.Metrics.UsedBlocks == 0 {
		tb.Fatalf("snapshot: %d blocks, %d used, %d cached", len(s.Blocks), s.Metrics.UsedBlocks, s.Metrics.CachedBlocks)
	}
	return s
}

// BenchmarkRender16K times one full heatmap redraw of 16,384 blocks at
// 1100×700 pixels (the heatmap's size in a 1280×800 window on a 2× screen),
// in each mode. Redraws per second are 1e9 / ns/op; it must stay above 30
// (`make bench` runs it; a test would gate on the machine's load).
func BenchmarkRender16K(b *testing.B) {
	s := bigSnapshot(b)
	dst := image.NewRGBA(image.Rect(0, 0, 1100, 700))
	for _, mode := range Modes() {
		b.Run(mode.String(), func(b *testing.B) {
			v := View{Mode: mode, Selecting: true, Selected: s.Seqs[len(s.Seqs)/2].ID, Hovering: true, HoverCell: 77}
			for b.Loop() {
				Render(dst, s, v)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "redraws/s")
		})
	}
}
