package model

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/backend/native"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

// TestUseContext moves a small random model onto a backend with progress
// and a cancel: progress rises to the total bytes of the matrices; a
// cancel at the first report stops the move with context.Canceled, the
// model keeps its old backend and computes the same logits, and (on the
// native backend) the packed copies made before the cancel are unmapped
// once collected.
func TestUseContext(t *testing.T) {
	backends := []struct {
		name string
		be   func(t *testing.T) backend.Backend
	}{
		{"go", func(*testing.T) backend.Backend { return backend.Go() }},
		{"native", func(t *testing.T) backend.Backend {
			lib, err := native.Load("")
			if err != nil {
				t.Skipf("the native library is not built (make native): %v", err)
			}
			return native.NewBackend(lib)
		}},
	}
	s := synth.Small
	s.Type = quant.Q8_0 // a type the native backend packs
	for _, tc := range backends {
		t.Run(tc.name, func(t *testing.T) {
			f, err := synth.Open(s, 3)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(f)
			if err != nil {
				t.Fatal(err)
			}
			before := useLogits(t, m)
			mapped := native.MappedBytes()

			// A whole move: progress rises to the total.
			var seen []int64
			var total int64
			if err := m.UseContext(context.Background(), tc.be(t), func(done, tot int64) {
				seen = append(seen, done)
				total = tot
			}); err != nil {
				t.Fatal(err)
			}
			if want := 2 + 7*s.Layers; len(seen) != want {
				t.Errorf("%d progress reports, want one a matrix (%d)", len(seen), want)
			}
			for i := 1; i < len(seen); i++ {
				if seen[i] <= seen[i-1] {
					t.Fatalf("progress went from %d to %d", seen[i-1], seen[i])
				}
			}
			if total != m.weightBytes() || len(seen) == 0 || seen[len(seen)-1] != total {
				t.Errorf("progress ended at %v of %d, want the %d bytes of the matrices", seen[len(seen)-1:], total, m.weightBytes())
			}
			if m.Backend() == backend.Go() && tc.name != "go" {
				t.Fatal("the model is not on the new backend")
			}
			m.Use(nil)

			// A cancelled move, after its first matrix.
			ctx, cancel := context.WithCancel(context.Background())
			calls := 0
			err = m.UseContext(ctx, tc.be(t), func(done, tot int64) {
				calls++
				cancel()
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled move: got %v, want context.Canceled", err)
			}
			if calls != 1 {
				t.Errorf("%d matrices moved after the cancel, want 1 before it and none after", calls)
			}
			if tc.name == "native" && native.MappedBytes() <= mapped {
				t.Error("the packed copy of the first matrix is not mapped")
			}
			if got := useLogits(t, m); !slices.Equal(got, before) {
				t.Error("after the cancelled move the model computes other logits")
			}
			// The packed copies of both moves are unreachable now (the
			// first's since Use(nil)): the collector unmaps them, a
			// cleanup running after a collection.
			for i := 0; native.MappedBytes() > mapped && i < 200; i++ {
				runtime.GC()
				runtime.Gosched()
			}
			if got := native.MappedBytes(); got > mapped {
				t.Errorf("after the cancelled move %d bytes stay mapped, %d before the moves", got, mapped)
			}
		})
	}
}

// useLogits is the model's logits for four tokens from position 0.
func useLogits(t *testing.T, m *Model) []float32 {
	t.Helper()
	kv, err := m.NewCache(m.CacheConfig(16, 1, kvstore.F32, kvstore.F32))
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	for i := range 4 {
		b.Add(5+i, i, []int{0}, i == 3)
	}
	out, err := m.Forward(kv, &b)
	if err != nil {
		t.Fatal(err)
	}
	return out[len(out)-1]
}
