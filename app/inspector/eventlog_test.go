package inspector

import (
	"fmt"
	"strings"
	"testing"

	"kvscope/engine/kvcache"
)

// events returns the events logged after cursor, and the new cursor.
func events(m *kvcache.Manager, after uint64) ([]kvcache.Event, uint64) {
	evs, next, _ := m.Events().Since(after, 0)
	return evs, next
}

func TestRecencyVictimIsTheBlockTheManagerEvicts(t *testing.T) {
	for _, policy := range []kvcache.EvictionPolicy{kvcache.LRU, kvcache.LFU} {
		t.Run(policy.String(), func(t *testing.T) {
			m, st := buildState(t)
			if err := m.SetEviction(policy); err != nil {
				t.Fatal(err)
			}
			before := m.Snapshot()
			img, g := Image(before, View{Mode: ByRecency, Victims: 1}, 200, 120)
			var marked []int
			for i := range before.Blocks {
				if cellColor(img, g, i, false) == VictimColor {
					marked = append(marked, i)
				}
			}
			_, cursor := events(m, 0)
			// 10 free blocks; 11 needed: one eviction.
			if _, err := m.Allocate(4, seqTokens(900, 44), kvcache.SeqOptions{}); err != nil {
				t.Fatal(err)
			}
			write(t, m, st, 4, 0)
			evs, _ := events(m, cursor)
			var evicted []int
			for _, e := range evs {
				if e.Kind == kvcache.EventEvict {
					evicted = append(evicted, e.Blocks...)
				}
			}
			if len(evicted) != 1 || len(marked) != 1 || evicted[0] != marked[0] {
				t.Errorf("heatmap marked %v as the next victim; the manager evicted %v", marked, evicted)
			}
		})
	}
}

func TestDescribeRealEvents(t *testing.T) {
	m, st := buildState(t)
	name := func(id kvcache.SeqID) string { return fmt.Sprintf("conversation %d", id) }
	evs, cursor := events(m, 0)
	var all []string
	for _, e := range evs {
		all = append(all, Describe(e, nil, name))
	}
	before := m.Snapshot() // step 3; blocks 4 and 5 last used at step 2
	m.Tick()
	m.Tick()
	if _, err := m.Allocate(4, seqTokens(900, 44), kvcache.SeqOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, m, st, 4, 0)
	if _, err := m.Preempt(1, kvcache.Recompute); err != nil {
		t.Fatal(err)
	}
	evs, _ = events(m, cursor)
	for _, e := range evs {
		all = append(all, Describe(e, before, name))
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"step 0: blocks 0, 1, 2 allocated to conversation 1",
		"conversation 2 created: fork of sequence 1: shares its blocks",
		"block 2 copied to block 3 before conversation 2 wrote into it (copy on write",
		"conversation 3 released blocks 4, 5",
		"step 5: block 5 evicted (LRU, idle 3 steps) to make room for conversation 4",
		"conversation 1 preempted (recompute): no free block; its 10 tokens will be computed again",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %q; it reads:\n%s", want, text)
		}
	}
}

func TestDescribeSynthetic(t *testing.T) {
	tests := []struct {
		e    kvcache.Event
		want string
	}{
		{kvcache.Event{Step: 7, Kind: kvcache.EventSwapOut, Seq: 2, Blocks: []int{1, 2}, Bytes: 2048},
			"step 7: sequence 2 swapped out: blocks 1, 2 (2.0 KiB) copied to the host pool"},
		{kvcache.Event{Step: 9, Kind: kvcache.EventSwapIn, Seq: 2, Blocks: []int{5}, Bytes: 1024},
			"step 9: sequence 2 swapped in: block 5 back on the device (1.0 KiB loaded)"},
		{kvcache.Event{Step: 3, Kind: kvcache.EventPreempt, Seq: 4, Tokens: 9, Reason: "swap fell back to recompute: host pool full"},
			"step 3: sequence 4 preempted (swap fell back to recompute): host pool full"},
		{kvcache.Event{Step: 1, Kind: kvcache.EventCacheHit, Seq: 1, Blocks: []int{0, 1, 2, 3, 4, 5, 6, 7}, Tokens: 128},
			"step 1: sequence 1 reused 8 blocks (0 … 7) from the prefix cache (128 tokens not recomputed)"},
		{kvcache.Event{Step: 2, Kind: kvcache.EventOverflow, Seq: 1, Reason: "rolling window dropped 32 tokens"},
			"step 2: sequence 1 reached its context limit: rolling window dropped 32 tokens"},
		{kvcache.Event{Step: 4, Kind: kvcache.EventEvict, Seq: 1, Blocks: []int{3}},
			"step 4: block 3 evicted (eviction) to make room for sequence 1"},
	}
	for _, tc := range tests {
		if got := Describe(tc.e, nil, nil); got != tc.want {
			t.Errorf("Describe(%v)\n got %q\nwant %q", tc.e, got, tc.want)
		}
	}
}

func TestGaugeValues(t *testing.T) {
	m, _ := buildState(t)
	x := m.Metrics()
	got := map[string]Gauge{}
	for _, g := range GaugeValues(x, kvcache.Paged, 12.34) {
		got[g.Name] = g
	}
	bb := x.BlockBytes
	tests := []struct{ name, want string }{
		{"used blocks", "4 of 16 · 25.0 %"},
		{"free blocks", "10 + 2 cached"},
		{"internal frag.", "18.8 % slots empty"}, // 13 of 16 reserved slots filled
		{"external frag.", "0 % (paged)"},
		{"prefix hit rate", "0.0 % (0/18 tok)"},
		{"tokens/s, last 2 s", "12.3"},
		{"memory used", fmt.Sprintf("%s of %s", humanizeBytes(4*bb), humanizeBytes(16*bb))},
	}
	for _, tc := range tests {
		if g := got[tc.name]; g.Value != tc.want {
			t.Errorf("gauge %q = %q, want %q", tc.name, g.Value, tc.want)
		}
	}
	if g := got["used blocks"]; g.Bar != 0.25 {
		t.Errorf("used blocks bar %v, want 0.25", g.Bar)
	}
}

// TestExternalFragmentationNamesTheAllocator: "(paged)" only under the
// paged allocator, never in a contiguous pool that happens to have none.
func TestExternalFragmentationNamesTheAllocator(t *testing.T) {
	value := func(alloc kvcache.Allocator) string {
		for _, g := range GaugeValues(kvcache.Metrics{TotalBlocks: 8, FreeBlocks: 8, LargestFreeRun: 8}, alloc, 0) {
			if g.Name == "external frag." {
				return g.Value
			}
		}
		return ""
	}
	if got := value(kvcache.Paged); got != "0 % (paged)" {
		t.Errorf("paged: %q", got)
	}
	if got := value(kvcache.Contiguous); got != "0.0 %" {
		t.Errorf("contiguous: %q", got)
	}
}
