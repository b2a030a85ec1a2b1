package model

import (
	"fmt"
	"testing"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/internal/testshared"
)

// forwardManaged runs ids teacher-forced through a real cache manager's
// block table (paged or contiguous) and returns every row's logits.
func forwardManaged(t *testing.T, m *Model, ids []int, bs int, alloc kvcache.Allocator, k, v kvstore.Precision) [][]float32 {
	t.Helper()
	sc := m.CacheConfig(bs, 1, k, v)
	bb := kvstore.BlockBytes(sc)
	// Room for the sequence plus a few blocks held by a neighbour, so that
	// the sequence's blocks are not simply 0, 1, 2...
	sc.Blocks = (len(ids)+bs-1)/bs + 4
	st, err := kvstore.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, BlockBytes: bb, Budget: int64(sc.Blocks * bb), Allocator: alloc, MaxLen: len(ids)}, st)
	if err != nil {
		t.Fatal(err)
	}
	neighbour := make([]int32, min(2*bs, len(ids)))
	if _, err := mgr.Allocate(99, neighbour, kvcache.SeqOptions{MaxLen: len(neighbour)}); err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, len(ids))
	for i, id := range ids {
		tokens[i] = int32(id)
	}
	if _, err := mgr.Allocate(1, tokens, kvcache.SeqOptions{}); err != nil {
		t.Fatal(err)
	}
	var b Batch
	table := mgr.BlockTable(1)
	for i, id := range ids {
		b.Add(id, i, table, true)
	}
	logits, err := m.Forward(st, &b)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestBlockSizeInvariance: with f32 K/V, logits are bit-identical for every
// block size and for the contiguous allocator, since attention sums run in
// position order whatever the layout; greedy tokens are therefore the same.
func TestBlockSizeInvariance(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))
	ref := forwardManaged(t, m, ids, 16, kvcache.Paged, kvstore.F32, kvstore.F32)
	want := testshared.Logits(t, testshared.Path(t, "reference/stories260K-textA.f32kv.logits.f32"), m.Vocab)
	rms, _, _ := testshared.Compare(ref, want)
	t.Logf("f32 K/V against llama.cpp's f32-KV logits: RMS %.2g of std", rms)
	if rms > 1e-3 {
		t.Errorf("f32 K/V logits differ from llama.cpp's by %.3g of std", rms)
	}
	for _, tc := range []struct {
		bs    int
		alloc kvcache.Allocator
	}{{1, kvcache.Paged}, {3, kvcache.Paged}, {16, kvcache.Paged}, {64, kvcache.Paged}, {256, kvcache.Paged}, {16, kvcache.Contiguous}, {256, kvcache.Contiguous}} {
		t.Run(fmt.Sprintf("%s-%d", tc.alloc, tc.bs), func(t *testing.T) {
			got := forwardManaged(t, m, ids, tc.bs, tc.alloc, kvstore.F32, kvstore.F32)
			for r := range ref {
				for v := range ref[r] {
					if got[r][v] != ref[r][v] {
						t.Fatalf("row %d logit %d: %v, block size 16 gives %v", r, v, got[r][v], ref[r][v])
					}
				}
			}
		})
	}
}

// TestCachePrecisionKL measures each K/V precision's cost as the mean KL of
// its next-token distributions from f32 K/V on textA, at block size 32 (key
// groups of 32 tokens), and checks that int8 costs at most q8_0's.
func TestCachePrecisionKL(t *testing.T) {
	m := load(t, "models/stories260K.gguf")
	ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))
	ref := forwardManaged(t, m, ids, 32, kvcache.Paged, kvstore.F32, kvstore.F32)
	kls := map[kvstore.Precision]float64{}
	for _, tc := range []struct {
		p     kvstore.Precision
		maxKL float64
	}{
		{kvstore.F16, 1e-5},
		{kvstore.Q8_0, 5e-3},
		{kvstore.Int8, 5e-4},
		{kvstore.FP8, 2e-2},
		{kvstore.Int4, 3e-2},
		{kvstore.BF16, 1e-3},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			got := forwardManaged(t, m, ids, 32, kvcache.Paged, tc.p, tc.p)
			_, kl, err := testshared.Compare(got, ref)
			if err != nil {
				t.Fatal(err)
			}
			kls[tc.p] = kl
			t.Logf("K/V %-5s mean KL from f32: %.3g (at most %g)", tc.p, kl, tc.maxKL)
			if kl > tc.maxKL {
				t.Errorf("mean KL %.3g, want ≤ %g", kl, tc.maxKL)
			}
		})
	}
	if kls[kvstore.Int8] > kls[kvstore.Q8_0] {
		t.Errorf("int8's mean KL %.3g is over q8_0's %.3g at a smaller size", kls[kvstore.Int8], kls[kvstore.Q8_0])
	}
}
