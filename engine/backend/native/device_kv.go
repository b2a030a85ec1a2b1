package native

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
)

// devPlane mirrors kvscope.h's struct kvs_kv_plane with device pointers.
type devPlane struct {
	prec, key                                   int32
	layers, blocks, blockSize, kvHeads, headDim int32
	rowBytes, group, groups                     int32
	dataPerBlock, scalesPerBlock                int64
	data, scale, zero                           uintptr
}

// devCache is a paged K/V pool in device memory, laid out as an
// engine/kvstore Store's planes (the library's kernels read them as they
// read a store's), moved whole blocks at a time through kvcache.Storage
// with device copies. Its memory is freed when it becomes unreachable.
type devCache struct {
	b    *Device
	cfg  kvstore.Config
	k, v devPlane
	keys *devKeys // Int8/Int4 keys' bookkeeping, else nil
	// per (layer, block): bytes of data, scale and zero of K, then of V
	sizes [2][3]int64
}

// Config returns the pool's shape and precisions.
func (c *devCache) Config() kvstore.Config { return c.cfg }

// kvReason says why the library refuses a precision for keys or values.
func (b *Device) kvReason(p kvstore.Precision, key bool) string {
	what := "values"
	if key {
		what = "keys"
	}
	var ok []string
	for q := kvstore.Precision(0); q <= kvstore.FP8; q++ {
		if b.d.kvSupported(int32(q), int32(btoi(key))) == 0 {
			ok = append(ok, q.String())
		}
	}
	return fmt.Sprintf("the %s backend stores %s as %s only", b.Name(), what, strings.Join(ok, ", "))
}

// NewCache allocates a K/V pool of c's shape and precisions in device
// memory, zeroed. A precision the library does not store is refused with
// the reason.
func (b *Device) NewCache(c kvstore.Config) (backend.Cache, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.HeadDim > maxHeadDim {
		return nil, fmt.Errorf("%s backend: head dimension %d is over the library's %d", b.Name(), c.HeadDim, maxHeadDim)
	}
	for _, pk := range []struct {
		p   kvstore.Precision
		key bool
	}{{c.K, true}, {c.V, false}} {
		if b.d.kvSupported(int32(pk.p), int32(btoi(pk.key))) != 0 {
			what := "value"
			if pk.key {
				what = "key"
			}
			return nil, fmt.Errorf("K/V precision: %s %ss are refused: %s", pk.p, what, b.kvReason(pk.p, pk.key))
		}
	}
	// The layout's parameters are the store's: read them off a store of
	// one block.
	one := c
	one.Blocks = 1
	proto, err := kvstore.New(one)
	if err != nil {
		return nil, err
	}
	raws := []kvstore.Raw{proto.RawK(), proto.RawV()}
	dc := &devCache{b: b, cfg: c}
	mem := new([]uintptr)
	free := func() {
		for _, p := range *mem {
			b.d.free(p)
		}
	}
	if rk := raws[0]; rk.Key {
		words := kvstore.MaskWords(c)
		dc.keys = &devKeys{group: rk.Group, groups: rk.Groups, words: words, mem: mem,
			mask:      make([]uint64, c.Layers*c.Blocks*words),
			resid:     make([]uintptr, c.Layers*c.Blocks*rk.Groups),
			slotBytes: int64(kvstore.ResidualBytes(c) / c.Layers)}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb := int64(c.Layers) * int64(c.Blocks)
	for i, r := range raws {
		p := devPlane{prec: int32(r.Prec), key: int32(btoi(r.Key)), layers: int32(c.Layers), blocks: int32(c.Blocks),
			blockSize: int32(c.BlockSize), kvHeads: int32(c.KVHeads), headDim: int32(c.HeadDim), rowBytes: int32(r.RowBytes),
			group: int32(r.Group), groups: int32(r.Groups), dataPerBlock: int64(r.DataPerBlock), scalesPerBlock: int64(r.ScalesPerBlock)}
		elem := int64(1)
		switch {
		case r.F32 != nil:
			elem = 4
		case r.U16 != nil:
			elem = 2
		}
		dc.sizes[i][0] = int64(r.DataPerBlock) * elem
		switch {
		case r.Scale != nil:
			dc.sizes[i][1] = int64(r.ScalesPerBlock) * 2 // f16
		case r.Scale8 != nil:
			dc.sizes[i][1] = int64(r.ScalesPerBlock) // E5M3
		}
		ptrs := []*uintptr{&p.data, &p.scale, &p.zero}
		for j, size := range dc.sizes[i] {
			if size == 0 {
				continue
			}
			m, err := b.alloc(size * lb)
			if err != nil {
				free()
				return nil, fmt.Errorf("a K/V pool of %d blocks: %w", c.Blocks, err)
			}
			*mem = append(*mem, m)
			if rc := b.d.memset(m, 0, size*lb); rc != 0 {
				free()
				return nil, status("memset", rc)
			}
			*ptrs[j] = m
		}
		if i == 0 {
			dc.k = p
		} else {
			dc.v = p
		}
	}
	d := b.d
	runtime.AddCleanup(dc, func(mem *[]uintptr) {
		for _, p := range *mem {
			d.free(p)
		}
	}, mem)
	return dc, nil
}

// cache returns c as this backend's cache, or records why not.
func (b *Device) cache(op string, c backend.Cache) (*devCache, bool) {
	dc, ok := c.(*devCache)
	if !ok || dc.b != b {
		b.fail(op, fmt.Errorf("given a %T cache, not one made by this backend's NewCache", c))
		return nil, false
	}
	return dc, true
}

// blockOK records a block index out of range.
func (c *devCache) blockOK(op string, blocks ...int) bool {
	for _, blk := range blocks {
		if uint(blk) >= uint(c.cfg.Blocks) {
			c.b.fail(op, fmt.Errorf("block %d is outside the pool's %d", blk, c.cfg.Blocks))
			return false
		}
	}
	return true
}

// Copy makes block dst a copy of block src in every layer, on the device.
func (c *devCache) Copy(dst, src int) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if !c.blockOK("copy block", dst, src) || dst == src {
		return
	}
	for _, p := range []*devPlane{&c.k, &c.v} {
		c.b.check("copy block", c.b.d.kvCopy(unsafe.Pointer(p), int32(dst), int32(src)))
	}
	if c.keys != nil {
		c.copyKeys(dst, src)
	}
}

// saveMagic starts every block a device cache saves.
const devSaveMagic = "KVD3"

func (c *devCache) header() []uint32 {
	g := c.cfg
	return []uint32{uint32(g.Layers), uint32(g.KVHeads), uint32(g.HeadDim), uint32(g.BlockSize),
		uint32(g.K), uint32(g.V), uint32(c.k.group), uint32(c.v.group)}
}

// blockBytes is the bytes one block takes in every layer, K and V.
func (c *devCache) blockBytes() int64 {
	var n int64
	for _, s := range c.sizes {
		n += s[0] + s[1] + s[2]
	}
	return n * int64(c.cfg.Layers)
}

// regions calls f with each of block's regions in device memory, in the
// saved order: K's data, scale, zero of every layer, then V's.
func (c *devCache) regions(block int, f func(p uintptr, size int64) bool) {
	for i, p := range []*devPlane{&c.k, &c.v} {
		for l := range c.cfg.Layers {
			lb := int64(l)*int64(c.cfg.Blocks) + int64(block)
			for j, base := range []uintptr{p.data, p.scale, p.zero} {
				if size := c.sizes[i][j]; size > 0 && !f(base+uintptr(lb*size), size) {
					return
				}
			}
		}
	}
}

// Save appends block's bytes, all layers, K and V, to buf (swap out),
// after a header of the pool's shape that Load checks; for Int8/Int4 keys
// then the key state (saveKeys).
func (c *devCache) Save(block int, buf []byte) []byte {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if !c.blockOK("save block", block) {
		return buf
	}
	buf = append(buf, devSaveMagic...)
	for _, v := range c.header() {
		buf = binary.LittleEndian.AppendUint32(buf, v)
	}
	at := len(buf)
	buf = append(buf, make([]byte, c.blockBytes())...)
	c.regions(block, func(p uintptr, size int64) bool {
		ok := c.b.check("save block", c.b.d.d2h(unsafe.Pointer(&buf[at]), p, size))
		at += int(size)
		return ok
	})
	if c.keys != nil {
		buf = c.saveKeys(block, buf)
	}
	return buf
}

// Load writes data, as Save wrote it, into block (swap in), after checking
// its header and length; on error the block is unchanged.
func (c *devCache) Load(block int, data []byte) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if uint(block) >= uint(c.cfg.Blocks) {
		return fmt.Errorf("%s backend: load: block %d is outside the pool's %d", c.b.Name(), block, c.cfg.Blocks)
	}
	h := c.header()
	hl := len(devSaveMagic) + 4*len(h)
	if len(data) < hl || string(data[:len(devSaveMagic)]) != devSaveMagic {
		return fmt.Errorf("%s backend: load block %d: %d bytes do not start with a saved block header", c.b.Name(), block, len(data))
	}
	for i, w := range h {
		if got := binary.LittleEndian.Uint32(data[len(devSaveMagic)+4*i:]); got != w {
			return fmt.Errorf("%s backend: load block %d: the saved block is of another pool shape (field %d: %d, not %d)", c.b.Name(), block, i, got, w)
		}
	}
	body := data[hl:]
	if int64(len(body)) < c.blockBytes() || (c.keys == nil && int64(len(body)) != c.blockBytes()) {
		return fmt.Errorf("%s backend: load block %d: %d bytes of data, the pool's blocks have %d", c.b.Name(), block, len(body), c.blockBytes())
	}
	var keys *keyState
	if c.keys != nil {
		var err error
		if keys, err = c.parseKeys(body[c.blockBytes():]); err != nil {
			return fmt.Errorf("%s backend: load block %d: %w", c.b.Name(), block, err)
		}
	}
	at := 0
	var err error
	c.regions(block, func(p uintptr, size int64) bool {
		if rc := c.b.d.h2d(p, unsafe.Pointer(&body[at]), size); rc != 0 {
			err = fmt.Errorf("%s backend: load block %d: %v", c.b.Name(), block, status("copy", rc))
			return false
		}
		at += int(size)
		return true
	})
	if err == nil && keys != nil {
		if err = c.loadKeys(block, keys); err != nil {
			err = fmt.Errorf("%s backend: load block %d: %w", c.b.Name(), block, err)
		}
	}
	return err
}

// Reset forgets a block's old contents: for Int8/Int4 keys, which slots
// were written and the residual slots (resetKeys); the other precisions
// keep no state across a block's tokens.
func (c *devCache) Reset(block int) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if c.blockOK("reset block", block) && c.keys != nil {
		c.resetKeys(block)
	}
}

// kvArgs checks a WriteKV or ReadKV call and uploads its slots.
func (b *Device) kvArgs(op string, c backend.Cache, layer int, k, v backend.Buffer, slots []int32) (dc *devCache, kp, vp, sp uintptr, ok bool) {
	if dc, ok = b.cache(op, c); !ok || len(slots) == 0 {
		return nil, 0, 0, 0, false
	}
	cfg := dc.cfg
	if uint(layer) >= uint(cfg.Layers) {
		b.fail(op, fmt.Errorf("layer %d of %d", layer, cfg.Layers))
		return nil, 0, 0, 0, false
	}
	for i, s := range slots {
		if uint(s) >= uint(cfg.Blocks*cfg.BlockSize) {
			b.fail(op, fmt.Errorf("row %d's slot %d is outside the %d blocks of %d", i, s, cfg.Blocks, cfg.BlockSize))
			return nil, 0, 0, 0, false
		}
	}
	row := len(slots) * cfg.KVHeads * cfg.HeadDim
	kp, ok1 := b.buf(op, k, row)
	vp, ok2 := b.buf(op, v, row)
	if !ok1 || !ok2 {
		return nil, 0, 0, 0, false
	}
	if sp = uploadInts(b, "slots", slots); sp == 0 {
		return nil, 0, 0, 0, false
	}
	return dc, kp, vp, sp, true
}

// WriteKV stores row i of k and v in layer at slots[i], on the device.
func (b *Device) WriteKV(c backend.Cache, layer int, k, v backend.Buffer, slots []int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dc, kp, vp, sp, ok := b.kvArgs("K/V write", c, layer, k, v, slots)
	if !ok {
		return
	}
	n := int64(len(slots))
	if dc.keys != nil {
		ok = dc.writeKeys(layer, slots, sp, kp)
	} else {
		ok = b.check("K/V write", b.d.kvWrite(unsafe.Pointer(&dc.k), int32(layer), n, sp, kp, 0))
	}
	if ok {
		b.check("K/V write", b.d.kvWrite(unsafe.Pointer(&dc.v), int32(layer), n, sp, vp, 0))
	}
}

// ReadKV decodes the K and V of layer at slots[i] into row i of k and v.
func (b *Device) ReadKV(k, v backend.Buffer, c backend.Cache, layer int, slots []int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dc, kp, vp, sp, ok := b.kvArgs("K/V read", c, layer, k, v, slots)
	if !ok {
		return
	}
	n := int64(len(slots))
	var rp uintptr
	if dc.keys != nil {
		if rp = dc.rowResiduals(layer, slots); rp == 0 {
			return
		}
	}
	if b.check("K/V read", b.d.kvRead(unsafe.Pointer(&dc.k), int32(layer), n, sp, kp, rp)) {
		b.check("K/V read", b.d.kvRead(unsafe.Pointer(&dc.v), int32(layer), n, sp, vp, 0))
	}
}

// attnScratchBytes bounds a device's attention scratch: the partial
// results of rows whose context is split over the GPU.
const attnScratchBytes = 64 << 20

// Attention runs paged attention for every row of q on the device, over
// the rows' block tables (a sliding window too).
func (b *Device) Attention(out backend.Buffer, c backend.Cache, layer int, q backend.Buffer, heads int, r *backend.Rows) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const op = "attention"
	dc, ok := b.cache(op, c)
	n := len(r.Pos)
	if !ok || n == 0 {
		return
	}
	cfg := dc.cfg
	if uint(layer) >= uint(cfg.Layers) || heads < 1 || heads%cfg.KVHeads != 0 || heads/cfg.KVHeads > maxGroup || r.Window < 0 {
		b.fail(op, fmt.Errorf("layer %d of %d, %d query heads over %d KV heads (at most %d a KV head), window %d", layer, cfg.Layers, heads, cfg.KVHeads, maxGroup, r.Window))
		return
	}
	seqs, ts := r.Seqs, r.TableStart
	if len(seqs) < 1 || len(ts) != len(seqs) || seqs[0] != 0 || int(seqs[len(seqs)-1]) != n {
		b.fail(op, fmt.Errorf("%d sequence bounds and %d table starts do not describe %d rows", len(seqs), len(ts), n))
		return
	}
	nPos, off := make([]int32, n), make([]int64, n)
	maxPos := int32(1)
	for s := range len(seqs) - 1 {
		t0, t1 := ts[s], ts[s+1]
		if seqs[s+1] < seqs[s] || t0 < 0 || t1 < t0 || int(t1) > len(r.Tables) {
			b.fail(op, fmt.Errorf("sequence %d has rows %d..%d and table %d..%d of %d", s, seqs[s], seqs[s+1], t0, t1, len(r.Tables)))
			return
		}
		for i := seqs[s]; i < seqs[s+1]; i++ {
			if r.Pos[i] < 0 || int(r.Pos[i])/cfg.BlockSize >= int(t1-t0) {
				b.fail(op, fmt.Errorf("row %d attends %d positions, its block table holds %d blocks of %d", i, r.Pos[i]+1, t1-t0, cfg.BlockSize))
				return
			}
			// Every block the row reaches (inside the window) must exist.
			first := int32(0)
			if r.Window > 0 {
				first = max(0, r.Pos[i]+1-r.Window)
			}
			for j := first / int32(cfg.BlockSize); j <= r.Pos[i]/int32(cfg.BlockSize); j++ {
				if blk := r.Tables[t0+j]; uint(blk) >= uint(cfg.Blocks) {
					b.fail(op, fmt.Errorf("row %d's block table names block %d of %d", i, blk, cfg.Blocks))
					return
				}
			}
			nPos[i], off[i] = r.Pos[i]+1, int64(t0)
			maxPos = max(maxPos, r.Pos[i]+1)
		}
	}
	qd := heads * cfg.HeadDim
	qp, ok1 := b.buf(op, q, n*qd)
	op2, ok2 := b.buf(op, out, n*qd)
	if !ok1 || !ok2 {
		return
	}
	tables := r.Tables
	if len(tables) == 0 {
		tables = []int32{0}
	}
	tp := uploadInts(b, "tables", tables)
	np := uploadInts(b, "attended", nPos)
	ofp := uploadInts(b, "table offsets", off)
	if tp == 0 || np == 0 || ofp == 0 {
		return
	}
	var kr uintptr
	if dc.keys != nil {
		if kr = dc.tableResiduals(layer, tables); kr == 0 {
			return
		}
	}
	scale := float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	call := func(a, e int, scratch uintptr) int32 {
		return b.d.attention(unsafe.Pointer(&dc.k), unsafe.Pointer(&dc.v), int32(layer), int64(e-a), int32(heads), 0, int32(heads), r.Window, scale,
			qp+uintptr(a*qd*4), np+uintptr(a*4), tp, ofp+uintptr(a*8), kr, scratch, op2+uintptr(a*qd*4))
	}
	scratchFor := func(rows int) int64 {
		return b.d.attnScratch(int64(rows), int32(heads), int32(cfg.KVHeads), int32(cfg.HeadDim), maxPos)
	}
	if per := scratchFor(1); per < 0 {
		b.check(op, int32(per))
		return
	}
	var rc int32
	if b.host() {
		// One call: the library splits the rows among its threads, each
		// with its own part of the scratch.
		b.lib.split()
		if !b.ensure(&b.scratch, scratchFor(n)) {
			return
		}
		rc = call(0, n, b.scratch.p)
	} else {
		// One call a chunk of rows whose partial results (long contexts
		// split over the GPU) fit in attnScratchBytes; rows are
		// independent, so the chunking changes no result.
		chunk := n
		if per := scratchFor(1); per > 0 {
			chunk = max(1, min(n, int(attnScratchBytes/per)))
		}
		if !b.ensure(&b.scratch, scratchFor(chunk)) {
			return
		}
		for a := 0; a < n && rc == 0; a += chunk {
			rc = call(a, min(n, a+chunk), b.scratch.p)
		}
	}
	b.check(op, rc)
}
