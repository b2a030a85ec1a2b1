package kvsub_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"kvscope/vllm/kvevents"
	"kvscope/vllm/kvsub"
	"kvscope/vllm/prefixcache"
)

// TestEndToEnd: a publisher speaking vLLM's protocol on loopback sends
// 10,000 events (both encodings, int and bytes hashes, shared prefixes,
// evictions, a clear) in 500 batches; the first 100 are published before
// the subscriber connects and 30 later ones never reach the live stream;
// a final empty batch, sent once the rest is in, marks the end.
// The model's block set must equal the set the events imply, the early
// batches and the gap coming from replay.
func TestEndToEnd(t *testing.T) {
	const (
		nEvents   = 10000
		perBatch  = 20
		nBatches  = nEvents / perBatch
		early     = 100 // published before the subscriber connects
		gapFrom   = 250 // batches gapFrom..gapTo-1 are not sent live
		gapTo     = 280
		blockSize = 4
	)
	rng := rand.New(rand.NewPCG(1, 2))
	type ref struct {
		wire any // the hash as put on the wire
		key  kvevents.Hash
	}
	var cached []ref
	want := map[kvevents.Hash]bool{}
	next := uint64(1)
	newHash := func() ref {
		n := next
		next++
		if n%3 == 0 {
			b := []byte{byte(n >> 16), byte(n >> 8), byte(n), 0xb7}
			return ref{b, kvevents.BytesHash(b)}
		}
		v := n*0x9e3779b97f4a7c15 | 1<<63 // above 2^63: a uint64 on the wire
		return ref{v, kvevents.IntHash(v)}
	}
	var payloads [][]byte
	for b := range nBatches {
		mapForm := b%2 == 1
		var events []any
		for range perBatch {
			switch r := rng.IntN(1000); {
			case r < 2 && len(cached) > 0:
				events = append(events, []any{"AllBlocksCleared"})
				if mapForm {
					events[len(events)-1] = map[string]any{"type": "AllBlocksCleared"}
				}
				cached = nil
				clear(want)
			case r < 400 && len(cached) > 0:
				var hashes []any
				for range 1 + rng.IntN(3) {
					if len(cached) == 0 {
						break
					}
					i := rng.IntN(len(cached))
					hashes = append(hashes, cached[i].wire)
					delete(want, cached[i].key)
					cached = slices.Delete(cached, i, i+1)
				}
				if len(hashes) == 0 {
					hashes = []any{uint64(0xdead)} // not cached: harmless
				}
				if mapForm {
					events = append(events, kvsub.RemovedMap(hashes))
				} else {
					events = append(events, kvsub.RemovedArray(hashes))
				}
			default:
				var parent any
				if len(cached) > 0 && rng.IntN(4) != 0 {
					parent = cached[rng.IntN(len(cached))].wire // a shared prefix
				}
				n := 1 + rng.IntN(4)
				var hashes, tokens []any
				for range n {
					h := newHash()
					hashes = append(hashes, h.wire)
					cached = append(cached, h)
					want[h.key] = true
					for range blockSize {
						tokens = append(tokens, rng.IntN(32000))
					}
				}
				if mapForm {
					events = append(events, kvsub.StoredMap(hashes, parent, tokens, blockSize))
				} else {
					events = append(events, kvsub.StoredArray(hashes, parent, tokens, blockSize))
				}
			}
		}
		ts := 1.7e9 + float64(b)/10
		if mapForm {
			payloads = append(payloads, kvsub.Pack(t, kvsub.BatchMap(ts, events...)))
		} else {
			payloads = append(payloads, kvsub.Pack(t, kvsub.BatchArray(ts, events...)))
		}
	}

	pub := kvsub.NewTestPub(t, "kv@pod-0@model", 10000) // vLLM's default buffer_steps
	for _, p := range payloads[:early] {
		pub.Publish(p, true)
	}
	pubEP, replayEP := pub.Endpoints()
	sub, err := kvsub.New(kvsub.Source{Name: "pod-0", Endpoint: pubEP, Replay: replayEP, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	cluster := prefixcache.NewCluster(prefixcache.Options{})
	ch := make(chan kvsub.Update, 256)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, ch) }()

	applied := make(chan struct{})  // up to the final batch
	lastIn := make(chan struct{})   // the last of the 500 is in
	replayed := make(chan struct{}) // the early batches are in
	var lastSeq int64 = -1
	var bad []kvsub.Update
	go func() {
		defer close(applied)
		for u := range ch {
			cluster.Apply(u)
			if u.Kind != kvsub.KindBatch {
				bad = append(bad, u)
				continue
			}
			if u.Seq != lastSeq+1 {
				bad = append(bad, u)
			}
			lastSeq = u.Seq
			if u.Seq == early-1 {
				close(replayed)
			}
			if u.Seq == nBatches-1 {
				close(lastIn)
			}
			if u.Seq == nBatches {
				return
			}
		}
	}()
	pub.WaitSubscribed("kv@")
	select {
	case <-replayed:
	case <-time.After(60 * time.Second):
		t.Fatalf("the replay on connect did not deliver the first %d batches", early)
	}
	for i := early; i < nBatches; i++ {
		pub.Publish(payloads[i], i < gapFrom || i >= gapTo)
	}
	select {
	case <-lastIn:
	case <-time.After(60 * time.Second):
		t.Fatalf("applied up to seq %d of %d in 60 s", lastSeq, nBatches-1)
	}
	// The gap's replay may have delivered the last batch before its end
	// marker came: a final, empty batch sent now is not in that replay,
	// so it is delivered live, once the replay is done and counted.
	pub.Publish(kvsub.Pack(t, kvsub.BatchArray(1.8e9)), true)
	select {
	case <-applied:
	case <-time.After(60 * time.Second):
		t.Fatalf("the final batch %d was not applied in 60 s", nBatches)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
	for _, u := range bad {
		t.Errorf("unexpected update %v seq %d: %v", u.Kind, u.Seq, u.Err)
	}

	cache := cluster.Source("pod-0")
	got := map[kvevents.Hash]bool{}
	for _, k := range cache.Keys() {
		got[k.Hash] = true
	}
	if len(got) != len(want) {
		t.Errorf("%d blocks cached, the events imply %d", len(got), len(want))
	}
	for h := range want {
		if !got[h] {
			t.Errorf("block %v missing", h)
			break
		}
	}
	for h := range got {
		if !want[h] {
			t.Errorf("block %v should have gone", h)
			break
		}
	}
	tr := cache.Tree()
	if tr.Blocks != len(want) || tr.Tokens != blockSize*len(want) {
		t.Errorf("tree: %d blocks %d tokens, want %d, %d", tr.Blocks, tr.Tokens, len(want), blockSize*len(want))
	}
	st := sub.Stats()
	if st.Gaps < 1 || st.Filled != st.Gaps || st.Lost != 0 || st.Replayed < early+gapTo-gapFrom {
		t.Errorf("subscriber stats %+v", st)
	}
	starts := pub.ReplayStarts()
	if len(starts) < 2 || starts[0] != 0 || !slices.Contains(starts, gapFrom) {
		t.Errorf("replay requests from %v, want 0 first and %d", starts, gapFrom)
	}
	total, distinct := cluster.Total()
	if total.Blocks != len(want) || distinct != len(want) || total.Batches != nBatches+1 || total.Lost != 0 {
		t.Errorf("cluster total %+v distinct %d", total, distinct)
	}
	t.Logf("%d events, %d blocks cached in %d chains, %d removals, stats %+v", nEvents, tr.Blocks, len(tr.Roots), total.Removed, st)
}
