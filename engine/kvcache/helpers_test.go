package kvcache

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"kvscope/engine/kvstore"
)

// testShape is the tiny K/V shape the tests store: one layer, one KV head of
// two values, f32. A token's key row is (token id, position) and its value
// row (-token id, 1), so reading a block back says exactly which token each
// slot holds and at which position its key was rotated.
func storeConfig(blockSize, blocks int) kvstore.Config {
	return kvstore.Config{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: blockSize, Blocks: blocks, K: kvstore.F32, V: kvstore.F32}
}

// newTestManager makes a Manager over a real kvstore.Store of the given
// number of blocks. cfg's BlockBytes and Budget are filled in.
func newTestManager(t testing.TB, cfg Config, blocks int) (*Manager, *kvstore.Store) {
	t.Helper()
	sc := storeConfig(cfg.BlockSize, blocks)
	st, err := kvstore.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BlockBytes = kvstore.BlockBytes(sc)
	cfg.Budget = int64(blocks * cfg.BlockBytes)
	m, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if m.NumBlocks() != blocks {
		t.Fatalf("manager has %d blocks, store %d", m.NumBlocks(), blocks)
	}
	return m, st
}

// writeKV plays the engine's forward pass: it writes the K/V rows of
// sequence id's tokens [from, Len) into the slots its block table names,
// then commits them.
func writeKV(m *Manager, st *kvstore.Store, id SeqID, from int) error {
	toks := m.Tokens(id)
	table := m.BlockTable(id)
	bs := m.BlockSize()
	for i := from; i < len(toks); i++ {
		st.Write(0, table[i/bs], i%bs, []float32{float32(toks[i]), float32(i)}, []float32{-float32(toks[i]), 1})
	}
	return m.Commit(id, len(toks))
}

// rotate plays the engine's RoPE re-positioning after a rolling-window
// shift: keys at [from, to) move shift positions down.
func rotate(m *Manager, st *kvstore.Store, id SeqID, ov *Overflow) {
	table := m.BlockTable(id)
	bs := m.BlockSize()
	k := make([]float32, 2*bs)
	v := make([]float32, 2*bs)
	for i := ov.RotateFrom; i < ov.RotateTo; i++ {
		b, slot := table[i/bs], i%bs
		st.ReadK(0, b, slot+1, k)
		st.ReadV(0, b, slot+1, v)
		st.Write(0, b, slot, []float32{k[2*slot], k[2*slot+1] - float32(ov.Shift)}, v[2*slot:2*slot+2])
	}
}

// verifyKV checks that every computed token of sequence id reads back from
// the store as (token, position).
func verifyKV(m *Manager, st *kvstore.Store, id SeqID) error {
	if m.Swapped(id) {
		return nil
	}
	toks := m.Tokens(id)
	table := m.BlockTable(id)
	bs := m.BlockSize()
	n := m.Computed(id)
	k := make([]float32, 2*bs)
	v := make([]float32, 2*bs)
	for b := 0; b*bs < n; b++ {
		cnt := min(bs, n-b*bs)
		st.ReadK(0, table[b], cnt, k)
		st.ReadV(0, table[b], cnt, v)
		for s := range cnt {
			i := b*bs + s
			if k[2*s] != float32(toks[i]) || k[2*s+1] != float32(i) || v[2*s] != -float32(toks[i]) || v[2*s+1] != 1 {
				return fmt.Errorf("sequence %d token %d (block %d slot %d): K (%v, %v) V (%v, %v), want token %d at position %d",
					id, i, table[b], s, k[2*s], k[2*s+1], v[2*s], v[2*s+1], toks[i], i)
			}
		}
	}
	return nil
}

// expected reports whether err is a refusal the caller must handle (no
// space, context full) rather than a bug.
func expected(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, ErrContextFull)
}

// sameState reports whether two snapshots hold the same blocks, host blocks
// and sequences.
func sameState(a, b *Snapshot) bool {
	return reflect.DeepEqual(a.Blocks, b.Blocks) && reflect.DeepEqual(a.Host, b.Host) && reflect.DeepEqual(a.Seqs, b.Seqs)
}

func seqTokens(base int32, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}

// mustAllocate allocates, writes the computed tokens and returns the result.
func mustAllocate(t testing.TB, m *Manager, st *kvstore.Store, id SeqID, toks []int32, opts SeqOptions) AllocResult {
	t.Helper()
	r, err := m.Allocate(id, toks, opts)
	if err != nil {
		t.Fatalf("allocate %d: %v", id, err)
	}
	if err := writeKV(m, st, id, r.Computed); err != nil {
		t.Fatal(err)
	}
	return r
}

// mustAppend appends, applies the overflow contract, writes and commits.
func mustAppend(t testing.TB, m *Manager, st *kvstore.Store, id SeqID, toks []int32) AppendResult {
	t.Helper()
	r, err := m.Append(id, toks)
	if err != nil {
		t.Fatalf("append to %d: %v", id, err)
	}
	if r.Overflow != nil && r.Overflow.Policy == RollingWindow {
		rotate(m, st, id, r.Overflow)
	}
	if err := writeKV(m, st, id, r.Start); err != nil {
		t.Fatal(err)
	}
	return r
}

func mustCheck(t testing.TB, m *Manager, st *kvstore.Store) {
	t.Helper()
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Snapshot().Seqs {
		if err := verifyKV(m, st, s.ID); err != nil {
			t.Fatal(err)
		}
	}
}
