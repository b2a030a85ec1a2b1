package kvcache

import (
	"slices"
	"testing"
)

func TestSnapshot(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4, HostBudget: 1 << 20, KPrecision: "int4", VPrecision: "f16"}, 8)
	mustAllocate(t, m, st, 1, seqTokens(1, 6), SeqOptions{MaxLen: 32})
	m.Fork(1, 2)
	m.Tick()
	mustAllocate(t, m, st, 3, seqTokens(50, 5), SeqOptions{})
	m.Preempt(3, Swap)
	snap := m.Snapshot()

	b0 := m.BlockTable(1)[0]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"step", snap.Step, int64(1)},
		{"owners", snap.Blocks[b0].Owners, []SeqID{1, 2}},
		{"ref", snap.Blocks[b0].Ref, 2},
		{"filled", snap.Blocks[m.BlockTable(1)[1]].Filled, 2},
		{"hashed", snap.Blocks[b0].Hashed, true},
		{"partial not hashed", snap.Blocks[m.BlockTable(1)[1]].Hashed, false},
		{"precisions", snap.Blocks[b0].KPrecision + "/" + snap.Blocks[b0].VPrecision, "int4/f16"},
		{"state used", snap.Blocks[b0].State, BlockUsed},
		{"location", snap.Blocks[b0].Location, Device},
		{"host blocks", len(snap.Host), 2},
		{"host location", snap.Host[0].Location, Host},
		{"host owner", snap.Host[0].Owners, []SeqID{3}},
		{"sequences", len(snap.Seqs), 3},
		{"seq 2 table", snap.Seqs[1].Blocks, m.BlockTable(2)},
		{"seq 1 limit", snap.Seqs[0].MaxLen, 32},
		{"seq 3 swapped", snap.Seqs[2].Swapped, true},
		{"seq 3 host table", len(snap.Seqs[2].HostBlocks), 2},
		{"metrics used", snap.Metrics.UsedBlocks, 2},
		{"metrics swapped", snap.Metrics.SwappedSequences, 1},
		{"bytes per token", snap.Metrics.BytesPerToken, float64(m.Config().BlockBytes) / 4},
	}
	for _, tt := range tests {
		switch w := tt.want.(type) {
		case []SeqID:
			if !slices.Equal(tt.got.([]SeqID), w) {
				t.Errorf("%s: %v, want %v", tt.name, tt.got, w)
			}
		case []int:
			if !slices.Equal(tt.got.([]int), w) {
				t.Errorf("%s: %v, want %v", tt.name, tt.got, w)
			}
		default:
			if tt.got != tt.want {
				t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
			}
		}
	}
	// The snapshot is a copy: scribbling on it changes nothing.
	snap.Blocks[b0].Owners[0] = 99
	snap.Seqs[0].Blocks[0] = 99
	again := m.Snapshot()
	if again.Blocks[b0].Owners[0] != 1 || again.Seqs[0].Blocks[0] != b0 {
		t.Error("changing a snapshot changed the manager")
	}
	mustCheck(t, m, st)
}

// BenchmarkDecodeStep measures one decode step of bookkeeping for 64
// sequences: Append one token, Commit, and a Tick.
func BenchmarkDecodeStep(b *testing.B) {
	m, err := New(Config{BlockSize: 16, BlockBytes: 1, Budget: 1 << 16}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 64 {
		if _, err := m.Allocate(SeqID(i), seqTokens(int32(i*1000), 100), SeqOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	tok := []int32{7}
	for n := 0; b.Loop(); n++ {
		for i := range 64 {
			id := SeqID(i)
			if m.Len(id) >= 1000 {
				m.Free(id)
				m.Allocate(id, seqTokens(int32(i*1000+n), 100), SeqOptions{})
			}
			m.Append(id, tok)
			m.Commit(id, m.Len(id))
		}
		m.Tick()
	}
}
