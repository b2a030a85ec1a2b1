package native

import (
	"math/rand/v2"
	"testing"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
)

// TestDeviceKeyGroups follows int8, int4 and fp8 keys, which a device stores as
// the Go store does (per channel across key groups of tokens, the group
// being filled at f16 in a residual slot), through a sequence's life, on
// the device and in the Go store side by side:
//   - a prefill that leaves a key group partly filled;
//   - decode rows written one a call, which fill it and start the next;
//   - a copy of a partly filled block (a fork), which both sides then fill
//     differently;
//   - a swap out, a reset, and the swap in to another block;
//   - a whole block written again in one call (a context shift's rewrite),
//     which comes out as a fresh write of the block.
//
// After each step every written slot reads back with the Go store's bits
// (keys and values), and attention over the sequences agrees within 1e-4.
// A key group written again in part is quantized again from its other
// tokens rounded to f16 on the device (the Go store keeps them at float32):
// that stays within 2% RMS. Once no group is partly filled every residual
// slot is free again, and saved key states that contradict themselves are
// refused.
func TestDeviceKeyGroups(t *testing.T) {
	d, g := hostDevice(t), backend.Go()
	r := rand.New(rand.NewPCG(7, 7))
	for _, tc := range []struct {
		k, v            kvstore.Precision
		headDim, bs, kg int
	}{
		{kvstore.Int4, kvstore.F16, 24, 5, 2},   // groups of 2, 2 and 1
		{kvstore.Int8, kvstore.Q8_0, 7, 6, 4},   // an odd head dim; groups of 4 and 2
		{kvstore.Int4, kvstore.Int4, 9, 4, 0},   // the default group: the block
		{kvstore.Int8, kvstore.F16, 8, 1, 0},    // block size 1: every token fills its group
		{kvstore.Int4, kvstore.Q8_0, 8, 256, 0}, // block size 256: groups of 16
		{kvstore.FP8, kvstore.FP8, 40, 7, 3},    // fp8 keys per channel, groups of 3, 3 and 1
		{kvstore.Int8, kvstore.Int8, 32, 16, 0}, // parity-llama3's head dim at block size 16
		{kvstore.Int4, kvstore.Int4, 32, 16, 0}, // int4 at the same: values rotated in blocks of 32, groups of 16
	} {
		cfg := kvstore.Config{Layers: 2, KVHeads: 2, HeadDim: tc.headDim, BlockSize: tc.bs, Blocks: 17, K: tc.k, V: tc.v, KeyGroup: tc.kg}
		name := tc.k.String() + "/" + tc.v.String()
		const heads = 4
		B, row := tc.bs, cfg.KVHeads*cfg.HeadDim
		if d.d.kvSupported(int32(tc.k), 1) != 0 || d.d.kvSupported(int32(tc.v), 0) != 0 {
			t.Logf("%s: %s does not store these precisions (the CUDA library has no fp8)", name, d.Name())
			continue
		}
		caches := [2]backend.Cache{}
		for i, be := range []backend.Backend{d, g} {
			c, err := be.NewCache(cfg)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			caches[i] = c
		}
		// tables[s] is sequence s's block table; n[s] its length.
		tables := [][]int32{{3, 0, 7, 9, 10, 11, 12}, nil}
		n := []int{0, 0}
		var written []int32 // every slot written, for reads
		slotOf := func(s, p int) int32 { return tables[s][p/B]*int32(B) + int32(p%B) }
		write := func(s, from, to int) {
			t.Helper()
			var slots []int32
			for p := from; p < to; p++ {
				slots = append(slots, slotOf(s, p))
			}
			k, v := randVec(r, len(slots)*row), randVec(r, len(slots)*row)
			for i, be := range []backend.Backend{d, g} {
				for _, l := range []int{0, 1} {
					be.WriteKV(caches[i], l, toDevice(t, be, k), toDevice(t, be, v), slots)
				}
			}
			written = append(written, slots...)
			n[s] = max(n[s], to)
		}
		// compare reads every written slot and attends every sequence on
		// both sides; exact asks for the Go store's bits.
		compare := func(step string, exact bool) {
			t.Helper()
			var reads, atts [2][]float32
			rows := &backend.Rows{Seqs: []int32{0}, TableStart: []int32{0}}
			for s, tab := range tables {
				if n[s] == 0 {
					continue
				}
				rows.Pos = append(rows.Pos, int32(n[s]-1))
				rows.Seqs = append(rows.Seqs, int32(len(rows.Pos)))
				rows.Tables = append(rows.Tables, tab...)
				rows.TableStart = append(rows.TableStart, int32(len(rows.Tables)))
			}
			q := randVec(r, len(rows.Pos)*heads*cfg.HeadDim)
			for i, be := range []backend.Backend{d, g} {
				for _, l := range []int{0, 1} {
					kb, vb := toDevice(t, be, make([]float32, len(written)*row)), toDevice(t, be, make([]float32, len(written)*row))
					be.ReadKV(kb, vb, caches[i], l, written)
					reads[i] = append(reads[i], download(t, be, kb, len(written)*row)...)
					reads[i] = append(reads[i], download(t, be, vb, len(written)*row)...)
					ob := toDevice(t, be, make([]float32, len(q)))
					be.Attention(ob, caches[i], l, toDevice(t, be, q), heads, rows)
					atts[i] = append(atts[i], download(t, be, ob, len(q))...)
				}
			}
			if err := d.Sync(); err != nil {
				t.Fatalf("%s, %s: %v", name, step, err)
			}
			if i := sameBits(reads[0], reads[1]); exact && i >= 0 {
				t.Errorf("%s, %s: read value %d: %v, the Go store's %v", name, step, i, reads[0][i], reads[1][i])
			}
			bound := 1e-4
			if !exact {
				bound = 0.02
				if e := relRMS(reads[0], reads[1]); e > bound {
					t.Errorf("%s, %s: reads differ by %.3g RMS, want ≤ %g", name, step, e, bound)
				}
			}
			if e := relRMS(atts[0], atts[1]); e > bound {
				t.Errorf("%s, %s: attention differs by %.3g RMS, want ≤ %g", name, step, e, bound)
			}
		}
		dc := caches[0].(*devCache)
		held := func() int {
			total := 0
			for _, gi := range dc.keys.resid {
				if gi != 0 {
					total++
				}
			}
			return total
		}

		write(0, 0, 2*B-B/2) // block 3 full, block 0 partly
		compare("prefill", true)
		for p := n[0]; p < 2*B+1; p++ {
			write(0, p, p+1)
		}
		compare("decode", true)
		// Fork at the third block, partly filled (one token written)
		// unless blocks hold one token: sequence 1 shares blocks 3 and 0
		// and gets a copy of block 7 as block 8.
		caches[0].Copy(8, 7)
		caches[1].Copy(8, 7)
		tables[1], n[1] = []int32{3, 0, 8, 13, 14, 15, 16}, n[0]
		write(0, n[0], n[0]+2)
		write(1, n[1], n[1]+1)
		compare("fork", true)
		// Swap block 8 out, reset it, and swap it in as block 5.
		var saved [2][]byte
		for i, c := range caches {
			saved[i] = c.Save(8, nil)
			c.Reset(8)
			if err := c.Load(5, saved[i]); err != nil {
				t.Fatalf("%s: load: %v", name, err)
			}
		}
		tables[1][2] = 5
		for i, s := range written {
			if s/int32(B) == 8 {
				written[i] = 5*int32(B) + s%int32(B)
			}
		}
		write(1, n[1], n[1]+1)
		compare("swap", true)
		// A context shift rewrites whole blocks in one call: on the device
		// block 3's groups come out as if written fresh (the Go store
		// quantizes a full group again at each row it takes, so its block
		// is reset first for the comparison).
		caches[1].Reset(3)
		write(0, 0, B)
		compare("rewrite", true)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		// Saved states that contradict themselves are refused, the block
		// unchanged.
		ds := saved[0]
		flag := append([]byte(nil), ds...)
		flag[len(devSaveMagic)+4*len(dc.header())+int(dc.blockBytes())+8*dc.keys.words] = 2 // layer 0, group 0
		for _, bad := range [][]byte{ds[:len(ds)-1], append(append([]byte(nil), ds...), 0), flag} {
			if err := caches[0].Load(6, bad); err == nil {
				t.Errorf("%s: a saved block of %d bytes (saved: %d) loaded", name, len(bad), len(ds))
			}
		}
		// Fill every partly filled group, then reset: no slot is held.
		for s := range tables {
			if end := (n[s] + B - 1) / B * B; end > n[s] {
				write(s, n[s], end)
			}
		}
		if h := held(); h != 0 {
			t.Errorf("%s: %d residual slots held with every key group full", name, h)
		}
		compare("filled", true)
		// One token of a full group written again: its group is quantized
		// again from its other tokens rounded to f16.
		write(0, 1, 2)
		compare("one rewritten", false)
		for b := range cfg.Blocks {
			caches[0].Reset(b)
		}
		if h := held(); h != 0 {
			t.Errorf("%s: %d residual slots held after every block was reset", name, h)
		}
		if free := len(dc.keys.free); free == 0 || free%residChunk != 0 {
			t.Errorf("%s: %d residual slots free, want every slot of the chunks of %d allocated", name, free, residChunk)
		}
	}
}
