package native

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"kvscope/engine/kvstore"
)

// kvPlane mirrors kvscope.h's struct kvs_kv_plane.
type kvPlane struct {
	prec, key                                   int32
	layers, blocks, blockSize, kvHeads, headDim int32
	rowBytes, group, groups                     int32
	dataPerBlock, scalesPerBlock                int64
	data                                        unsafe.Pointer
	scale, zero                                 unsafe.Pointer
}

// planeOf describes one of K or V of store s for the library, checking that
// the store's slices are as long as the shape says.
func planeOf(c kvstore.Config, r kvstore.Raw) (kvPlane, error) {
	p := kvPlane{prec: int32(r.Prec), layers: int32(c.Layers), blocks: int32(c.Blocks), blockSize: int32(c.BlockSize),
		kvHeads: int32(c.KVHeads), headDim: int32(c.HeadDim), rowBytes: int32(r.RowBytes), group: int32(r.Group),
		groups: int32(r.Groups), dataPerBlock: int64(r.DataPerBlock), scalesPerBlock: int64(r.ScalesPerBlock),
		scale: ptr(r.Scale)} // zero stays NULL: no precision has a zero array since ABI 9
	if r.Scale8 != nil {
		p.scale = ptr(r.Scale8)
	}
	if r.Key {
		p.key = 1
	}
	lb := c.Layers * c.Blocks
	var n int
	switch {
	case r.F32 != nil:
		n, p.data = len(r.F32), ptr(r.F32)
	case r.U16 != nil:
		n, p.data = len(r.U16), ptr(r.U16)
	default:
		n, p.data = len(r.Bytes), ptr(r.Bytes)
		if len(r.Scale)+len(r.Scale8) != lb*r.ScalesPerBlock {
			return p, fmt.Errorf("native: the K/V store's %s scales do not match its shape", r.Prec)
		}
	}
	if n != lb*r.DataPerBlock {
		return p, fmt.Errorf("native: the K/V store's %s data does not match its shape", r.Prec)
	}
	if c.HeadDim > maxHeadDim {
		return p, fmt.Errorf("native: head dimension %d is over the library's %d: %w", c.HeadDim, maxHeadDim, ErrUnsupported)
	}
	return p, nil
}

// maxHeadDim and maxGroup are kvscope.h's KVS_MAX_HEAD_DIM and
// KVS_MAX_GROUP.
const (
	maxHeadDim = 1024
	maxGroup   = 256
)

// WriteKV stores row i of k and of v (KVHeads*HeadDim values each,
// head-major) in layer of s at slot slots[i] (block*BlockSize + slot within
// the block), in row order, with the bytes s.Write would store. Int8 and
// Int4 keys, which the store quantizes across tokens, give an error wrapping
// ErrUnsupported before anything is written: use s.Write.
func (l *Lib) WriteKV(s *kvstore.Store, layer int, k, v []float32, slots []int32) error {
	c := s.Config()
	row := c.KVHeads * c.HeadDim
	if uint(layer) >= uint(c.Layers) || len(k) != len(slots)*row || len(v) != len(k) {
		return fmt.Errorf("native: write K/V: layer %d of %d, %d keys and %d values for %d slots of rows of %d", layer, c.Layers, len(k), len(v), len(slots), row)
	}
	for i, sl := range slots {
		if uint(sl) >= uint(c.Blocks*c.BlockSize) {
			return fmt.Errorf("native: write K/V: row %d's slot %d is outside the %d blocks of %d", i, sl, c.Blocks, c.BlockSize)
		}
	}
	rk, rv := s.RawK(), s.RawV()
	if rk.Key {
		return fmt.Errorf("native: write K/V: %s keys: %w", rk.Prec, ErrUnsupported)
	}
	if len(slots) == 0 {
		return nil
	}
	pk, err := planeOf(c, rk)
	if err != nil {
		return err
	}
	pv, err := planeOf(c, rv)
	if err != nil {
		return err
	}
	n := int64(len(slots))
	if err := status("write keys", l.kvWrite(unsafe.Pointer(&pk), int32(layer), n, ptr(slots), ptr(k), nil)); err != nil {
		return err
	}
	err = status("write values", l.kvWrite(unsafe.Pointer(&pv), int32(layer), n, ptr(slots), ptr(v), nil))
	runtime.KeepAlive(rk)
	runtime.KeepAlive(rv)
	return err
}

// AttnRow is one query row of an Attention call: it attends to positions
// 0..NPos-1 of its sequence, whose block table is Blocks.
type AttnRow struct {
	NPos   int   // positions attended, 0..NPos-1; at least 1
	Blocks []int // the sequence's block table, covering NPos positions
}

// Attention computes, for each row i, softmax(q·Kᵀ·scale)·V over the row's
// positions, per query head (heads of them, sharing KV heads in groups),
// reading K and V of layer straight from the store's blocks. q and out hold
// len(rows)*heads*HeadDim values. The library splits the rows among GOMAXPROCS threads.
// The caller must not write the blocks read while it runs.
func (l *Lib) Attention(s *kvstore.Store, layer, heads int, scale float32, q []float32, rows []AttnRow, out []float32) error {
	c := s.Config()
	m := attnMeta{nPos: make([]int32, len(rows)), off: make([]int64, len(rows))}
	for i, r := range rows {
		nb := (r.NPos + c.BlockSize - 1) / c.BlockSize
		if r.NPos < 1 || nb > len(r.Blocks) {
			return fmt.Errorf("native: attention: row %d attends %d positions, its block table holds %d blocks of %d", i, r.NPos, len(r.Blocks), c.BlockSize)
		}
		m.nPos[i], m.off[i] = int32(r.NPos), int64(len(m.tables))
		for _, b := range r.Blocks[:nb] {
			m.tables = append(m.tables, int32(b))
		}
	}
	return l.attend(s, layer, heads, 0, scale, q, &m, out)
}

// AttentionRows is Attention for rows described as engine/backend's Rows
// does, in flat arrays: row i is at position pos[i] (attending 0..pos[i],
// or only its window latest positions when window > 0); sequence k has rows
// seqs[k]..seqs[k+1]-1 and block table tables[tableStart[k]:tableStart[k+1]].
func (l *Lib) AttentionRows(s *kvstore.Store, layer, heads, window int, scale float32, q []float32, pos, seqs, tableStart, tables []int32, out []float32) error {
	c := s.Config()
	if len(seqs) < 1 || len(tableStart) != len(seqs) || seqs[0] != 0 || int(seqs[len(seqs)-1]) != len(pos) {
		return fmt.Errorf("native: attention: %d sequence bounds and %d table starts do not describe %d rows", len(seqs), len(tableStart), len(pos))
	}
	m := attnMeta{nPos: make([]int32, len(pos)), off: make([]int64, len(pos)), tables: tables}
	for k := range len(seqs) - 1 {
		t0, t1 := tableStart[k], tableStart[k+1]
		if seqs[k+1] < seqs[k] || t0 < 0 || t1 < t0 || int(t1) > len(tables) {
			return fmt.Errorf("native: attention: sequence %d has rows %d..%d and table %d..%d of %d", k, seqs[k], seqs[k+1], t0, t1, len(tables))
		}
		for i := seqs[k]; i < seqs[k+1]; i++ {
			if pos[i] < 0 || int(pos[i])/c.BlockSize >= int(t1-t0) {
				return fmt.Errorf("native: attention: row %d attends %d positions, its block table holds %d blocks of %d", i, pos[i]+1, t1-t0, c.BlockSize)
			}
			m.nPos[i], m.off[i] = pos[i]+1, int64(t0)
		}
	}
	return l.attend(s, layer, heads, window, scale, q, &m, out)
}

// attnMeta is an attention call's rows: positions to attend, offsets of
// their block tables in tables.
type attnMeta struct {
	nPos   []int32
	off    []int64
	tables []int32
}

// attnScratch holds attention's score scratch between calls.
var attnScratch = sync.Pool{New: func() any { return new([]float32) }}

// attend checks the call and runs it in one call: the library splits it by
// (row, KV head) pairs among its threads (kvscope.h), so that a decode
// step's one row has each KV head's query group computed by a different
// core, and a prefill's rows spread the same way.
func (l *Lib) attend(s *kvstore.Store, layer, heads, window int, scale float32, q []float32, m *attnMeta, out []float32) error {
	c := s.Config()
	n := len(m.nPos)
	if uint(layer) >= uint(c.Layers) || window < 0 || window > math.MaxInt32 || heads < 1 || heads%c.KVHeads != 0 || heads/c.KVHeads > maxGroup {
		return fmt.Errorf("native: attention: layer %d of %d, %d query heads over %d KV heads (at most %d a KV head)", layer, c.Layers, heads, c.KVHeads, maxGroup)
	}
	qd := heads * c.HeadDim
	if len(q) != n*qd || len(out) != len(q) {
		return fmt.Errorf("native: attention: %d rows of %d heads × %d need %d queries and outputs, got %d and %d", n, heads, c.HeadDim, n*qd, len(q), len(out))
	}
	for i, p := range m.nPos {
		for j := range (int(p) + c.BlockSize - 1) / c.BlockSize {
			if b := m.tables[m.off[i]+int64(j)]; uint(b) >= uint(c.Blocks) {
				return fmt.Errorf("native: attention: row %d's block table names block %d of %d", i, b, c.Blocks)
			}
		}
	}
	rk, rv := s.RawK(), s.RawV()
	pk, err := planeOf(c, rk)
	if err != nil {
		return err
	}
	pv, err := planeOf(c, rv)
	if err != nil {
		return err
	}
	var resid []uintptr
	if rk.Key {
		// The residual slots stay referenced by the store while the call
		// runs (nothing writes these blocks meanwhile).
		resid = make([]uintptr, len(m.tables)*rk.Groups)
		for j, b := range m.tables {
			if uint(b) >= uint(c.Blocks) {
				continue // an entry no row reaches (checked above)
			}
			for g := range rk.Groups {
				resid[j*rk.Groups+g] = uintptr(ptr(rk.Resid(layer, int(b), g)))
			}
		}
	}
	maxPos := int32(1)
	for _, p := range m.nPos {
		maxPos = max(maxPos, p)
	}
	if window > 0 {
		maxPos = min(maxPos, int32(window))
	}
	// The library splits the rows' (row, KV head) pairs among its threads,
	// each scoring into its own part of scratch.
	group := heads / c.KVHeads
	sp := attnScratch.Get().(*[]float32)
	defer attnScratch.Put(sp)
	if need := l.split() * int(maxPos) * group; cap(*sp) < need {
		*sp = make([]float32, need)
	}
	rc := l.attention(unsafe.Pointer(&pk), unsafe.Pointer(&pv), int32(layer), int64(n), int32(heads), 0, int32(heads), int32(window), scale,
		ptr(q), ptr(m.nPos), ptr(m.tables), ptr(m.off), ptr(resid), ptr((*sp)[:cap(*sp)]), ptr(out))
	runtime.KeepAlive(rk)
	runtime.KeepAlive(rv)
	runtime.KeepAlive(s)
	return status("attention", rc)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
