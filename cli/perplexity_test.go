package cli

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

// TestNLLSum checks the accumulation against log-softmax in float64, and
// that its buffer stays one vocabulary long however many positions it
// scores.
func TestNLLSum(t *testing.T) {
	for _, tc := range []struct {
		name   string
		logits []float32
		next   int
	}{
		{"uniform", []float32{0, 0, 0, 0}, 2},
		{"peaked", []float32{10, -10, 0, 3}, 0},
		{"unlikely", []float32{10, -10, 0, 3}, 1},
		{"large", []float32{1000, 999, 998}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s nllSum
			for range 1000 {
				s.add(tc.logits, tc.next)
			}
			var z float64
			for _, l := range tc.logits {
				z += math.Exp(float64(l - tc.logits[0]))
			}
			want := math.Exp(math.Log(z) - float64(tc.logits[tc.next]-tc.logits[0]))
			if got := s.perplexity(); math.Abs(got-want) > 1e-4*want {
				t.Errorf("perplexity %g, want %g", got, want)
			}
			if s.n != 1000 || cap(s.lp) != len(tc.logits) {
				t.Errorf("%d positions scored in a buffer of %d floats; want 1000 in %d", s.n, cap(s.lp), len(tc.logits))
			}
		})
	}
}

// TestPerplexityMemoryFlat scores the same 1024 tokens of a model with a
// 16384-token vocabulary in windows of 256 and of 1024: holding a window's
// logits would take 64 MiB more at 1024 than at 256, so the peak live heap
// of the two must differ by much less.
func TestPerplexityMemoryFlat(t *testing.T) {
	shape := synth.Shape{Name: "wide vocabulary", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFDim: 32, Vocab: 16384, Context: 1024, Type: quant.Q8_0}
	f, err := synth.Open(shape, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, shape.Context)
	for i := range ids {
		ids[i] = 3 + (i*104729)%(shape.Vocab-3)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	peak := func(window int) uint64 {
		cfg := engine.DefaultConfig()
		cfg.Context = window
		runtime.GC()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var most uint64
		wg.Go(func() {
			s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			for {
				metrics.Read(s)
				most = max(most, s[0].Value.Uint64())
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
		ppl, n, _, err := perplexity(m, ids, cfg)
		close(stop)
		wg.Wait()
		if err != nil || n != len(ids)-len(ids)/window || math.IsNaN(ppl) {
			t.Fatalf("window %d: perplexity %g over %d tokens, %v", window, ppl, n, err)
		}
		return most
	}
	small, large := peak(256), peak(1024)
	held := uint64(1024-256) * uint64(shape.Vocab) * 4
	t.Logf("peak live heap: %.1f MiB in windows of 256, %.1f MiB in windows of 1024 (holding the logits would add %.0f MiB)",
		float64(small)/(1<<20), float64(large)/(1<<20), float64(held)/(1<<20))
	if large > small+held/4 {
		t.Errorf("the peak live heap grows by %d bytes with the window; holding the logits would grow it by %d", large-small, held)
	}
}
