package kvcache

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestWasteBenchmark replays the ShareGPT-like and Alpaca-like workloads:
// paged waste at block size 16 stays within 4% on ShareGPT-like lengths,
// contiguous reservation wastes far more, and short requests raise paged
// waste.
func TestWasteBenchmark(t *testing.T) {
	const budget = 64 * 1024 // token slots
	share, err := WasteTable(ShareGPTLike, budget)
	if err != nil {
		t.Fatal(err)
	}
	alpaca, err := WasteTable(AlpacaLike, budget)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteWasteTable(&out, append(share, alpaca...))
	t.Logf("budget %d tokens\n%s", budget, out.String())

	for _, w := range []struct {
		rows    []WasteReport
		in, out float64
	}{{share, 161, 338}, {alpaca, 19, 58}} {
		r := w.rows[0]
		if math.Abs(r.MeanInput-w.in)/w.in > 0.1 || math.Abs(r.MeanOutput-w.out)/w.out > 0.1 {
			t.Errorf("%s: mean lengths %.1f and %.1f, want within 10%% of %.0f and %.0f", r.Workload, r.MeanInput, r.MeanOutput, w.in, w.out)
		}
	}
	paged16, contig := share[1], share[len(share)-1]
	if paged16.BlockSize != 16 || contig.Allocator != Contiguous {
		t.Fatalf("unexpected table layout: %+v", share)
	}
	if paged16.WastePercent > 4 {
		t.Errorf("ShareGPT-like paged waste at block size 16: %.2f%%, want <= 4%%", paged16.WastePercent)
	}
	if contig.WastePercent < 10*paged16.WastePercent || contig.WastePercent < 30 {
		t.Errorf("contiguous waste %.2f%% is not much larger than paged %.2f%%", contig.WastePercent, paged16.WastePercent)
	}
	if contig.MaxConcurrent*2 > paged16.MaxConcurrent {
		t.Errorf("contiguous ran %d sequences at once, paged %d: want paged well ahead", contig.MaxConcurrent, paged16.MaxConcurrent)
	}
	for i := 1; i < len(WasteBlockSizes); i++ {
		if share[i].WastePercent <= share[i-1].WastePercent {
			t.Errorf("waste does not grow with block size: %d: %.2f%%, %d: %.2f%%",
				share[i-1].BlockSize, share[i-1].WastePercent, share[i].BlockSize, share[i].WastePercent)
		}
	}
	if alpaca[1].WastePercent <= paged16.WastePercent {
		t.Errorf("Alpaca-like waste at block size 16 (%.2f%%) not above ShareGPT-like (%.2f%%)", alpaca[1].WastePercent, paged16.WastePercent)
	}
	// Deterministic for a seed.
	again, err := ReplayWorkload(ShareGPTLike, Paged, 16, budget)
	if err != nil || again != paged16 {
		t.Errorf("replay not deterministic: %+v vs %+v (%v)", again, paged16, err)
	}
}

func TestReplayErrors(t *testing.T) {
	tests := []struct {
		name      string
		w         Workload
		bs, bud   int
		wantError string
	}{
		{"no requests", Workload{Name: "x", InputMean: 10, OutputMean: 10, MaxLen: 100, MaxOutput: 10}, 16, 1024, "at least 1 request"},
		{"block size", ShareGPTLike, 0, 1024, "block size 0"},
		{"budget below a block", ShareGPTLike, 16, 8, "budget of 8 tokens"},
		{"request larger than the budget", Workload{Name: "big", Requests: 3, InputMean: 500, OutputMean: 10, MaxLen: 2048, MaxOutput: 10, Seed: 1}, 16, 64, "cannot hold request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReplayWorkload(tt.w, Paged, tt.bs, tt.bud)
			if err == nil || !strings.Contains(err.Error(), tt.wantError) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantError)
			}
		})
	}
}
