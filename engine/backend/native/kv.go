package native

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
		scale: ptr(r.Scale), zero: ptr(r.Zero)}
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
		if len(r.Scale) != lb*r.ScalesPerBlock || (r.Zero != nil && len(r.Zero) != len(r.Scale)) {
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

// WriteKV stores one token's K and V rows (KVHeads*HeadDim values each,
// head-major) at (layer, block, slot) of s with the bytes s.Write would
// store. Int8 and Int4 keys, which the store quantizes across tokens, give
// an error wrapping ErrUnsupported before anything is written: use s.Write.
func (l *Lib) WriteKV(s *kvstore.Store, layer, block, slot int, k, v []float32) error {
	c := s.Config()
	row := c.KVHeads * c.HeadDim
	if uint(layer) >= uint(c.Layers) || uint(block) >= uint(c.Blocks) || uint(slot) >= uint(c.BlockSize) || len(k) != row || len(v) != row {
		return fmt.Errorf("native: write K/V (layer %d, block %d, slot %d, %d keys, %d values) is outside %d layers, %d blocks of %d slots, rows of %d",
			layer, block, slot, len(k), len(v), c.Layers, c.Blocks, c.BlockSize, row)
	}
	rk, rv := s.RawK(), s.RawV()
	if rk.Key {
		return fmt.Errorf("native: write K/V: %s keys: %w", rk.Prec, ErrUnsupported)
	}
	pk, err := planeOf(c, rk)
	if err != nil {
		return err
	}
	pv, err := planeOf(c, rv)
	if err != nil {
		return err
	}
	if err := status("write keys", l.kvWrite(unsafe.Pointer(&pk), int32(layer), int32(block), int32(slot), ptr(k))); err != nil {
		return err
	}
	err = status("write values", l.kvWrite(unsafe.Pointer(&pv), int32(layer), int32(block), int32(slot), ptr(v)))
	runtime.KeepAlive(rk)
	runtime.KeepAlive(rv)
	return err
}

// AttnRow is one query row of an Attention call: it attends to positions
// 0..NPos-1 of its sequence, whose block table is Blocks.
type AttnRow struct {
	NPos   int
	Blocks []int
}

// Attention computes, for each row i, softmax(q·Kᵀ·scale)·V over the row's
// positions, per query head (heads of them, sharing KV heads in groups),
// reading K and V of layer straight from the store's blocks. q and out hold
// len(rows)*heads*HeadDim values. Rows are split among GOMAXPROCS goroutines.
// The caller must not write the blocks read while it runs.
func (l *Lib) Attention(s *kvstore.Store, layer, heads int, scale float32, q []float32, rows []AttnRow, out []float32) error {
	c := s.Config()
	if uint(layer) >= uint(c.Layers) || heads < 1 || heads%c.KVHeads != 0 || heads/c.KVHeads > maxGroup {
		return fmt.Errorf("native: attention: layer %d of %d, %d query heads over %d KV heads (at most %d a KV head)", layer, c.Layers, heads, c.KVHeads, maxGroup)
	}
	qd := heads * c.HeadDim
	if len(q) != len(rows)*qd || len(out) != len(q) {
		return fmt.Errorf("native: attention: %d rows of %d heads × %d need %d queries and outputs, got %d and %d", len(rows), heads, c.HeadDim, len(rows)*qd, len(q), len(out))
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
	nPos := make([]int32, len(rows))
	off := make([]int64, len(rows))
	var tables []int32
	var resid []uintptr
	maxPos := 1
	for i, r := range rows {
		nb := (r.NPos + c.BlockSize - 1) / c.BlockSize
		if r.NPos < 1 || nb > len(r.Blocks) {
			return fmt.Errorf("native: attention: row %d attends %d positions, its block table holds %d blocks of %d", i, r.NPos, len(r.Blocks), c.BlockSize)
		}
		nPos[i], off[i] = int32(r.NPos), int64(len(tables))
		maxPos = max(maxPos, r.NPos)
		for _, b := range r.Blocks[:nb] {
			if uint(b) >= uint(c.Blocks) {
				return fmt.Errorf("native: attention: row %d names block %d of %d", i, b, c.Blocks)
			}
			tables = append(tables, int32(b))
			for g := range rk.Groups * btoi(rk.Key) {
				// The residual slot stays referenced by the store while the
				// call runs (nothing writes these blocks meanwhile).
				resid = append(resid, uintptr(ptr(rk.Resid(layer, b, g))))
			}
		}
	}
	call := func(r0, r1 int, scratch []float32) int32 {
		return l.attention(unsafe.Pointer(&pk), unsafe.Pointer(&pv), int32(layer), int64(r1-r0), int32(heads), scale,
			ptr(q[r0*qd:]), ptr(nPos[r0:]), ptr(tables), ptr(off[r0:]), ptr(resid), ptr(scratch), ptr(out[r0*qd:]))
	}
	workers := min(runtime.GOMAXPROCS(0), len(rows))
	var next atomic.Int64
	var bad atomic.Int32
	work := func() {
		scratch := make([]float32, maxPos*(heads/c.KVHeads))
		for {
			i := int(next.Add(1)) - 1
			if i >= len(rows) {
				return
			}
			if rc := call(i, i+1, scratch); rc != 0 {
				bad.Store(rc)
			}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	if workers > 0 {
		work()
	}
	wg.Wait()
	runtime.KeepAlive(rk)
	runtime.KeepAlive(rv)
	runtime.KeepAlive(s)
	return status("attention", bad.Load())
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
