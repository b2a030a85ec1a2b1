package native

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"kvscope/engine/kvstore"
)

// devKeys keeps, on the host, the state of a device cache's Int8, Int4 or
// FP8 keys, which the device stores as engine/kvstore stores them (KIVI):
// quantized per channel across a key group of tokens, the group being
// filled held at f16 in a residual slot until its last token is written.
// The host sees every write, copy, swap and reset, so it tracks which slots
// of each layer's block are written and which key groups hold a residual
// slot, and tells the library which slot each row goes to; nothing is read
// back from the device for it. Residual slots come from chunks of device
// memory that are never moved (a slot's address is fixed while it is held)
// and are freed with the cache.
type devKeys struct {
	group, groups int       // tokens a key group, key groups a block
	words         int       // mask words per (layer, block)
	mask          []uint64  // [(layer*Blocks+block)*words + w]: slots written
	resid         []uintptr // [(layer*Blocks+block)*groups + g]: residual slot, 0 for none
	slotBytes     int64
	free          []uintptr  // residual slots not held
	mem           *[]uintptr // the cache's device allocations, chunks included
}

// residChunk is the residual slots allocated at a time.
const residChunk = 64

// maskOf returns layer-block lb's written-slot mask.
func (ks *devKeys) maskOf(lb int) kvstore.SlotMask {
	return ks.mask[lb*ks.words : (lb+1)*ks.words]
}

// full reports whether every slot of key group g of layer-block lb is
// written.
func (c *devCache) full(lb, g int) bool { return c.keys.maskOf(lb).Full(c.cfg.KeyGroupSpan(g)) }

// take returns a free residual slot, allocating a chunk when none is free;
// the caller holds b.mu.
func (c *devCache) take() (uintptr, bool) {
	ks := c.keys
	if len(ks.free) == 0 {
		m, err := c.b.alloc(residChunk * ks.slotBytes)
		if err != nil {
			c.b.fail("key residual slots", err)
			return 0, false
		}
		*ks.mem = append(*ks.mem, m)
		for i := residChunk - 1; i >= 0; i-- {
			ks.free = append(ks.free, m+uintptr(int64(i)*ks.slotBytes))
		}
	}
	r := ks.free[len(ks.free)-1]
	ks.free = ks.free[:len(ks.free)-1]
	return r, true
}

// release returns key group gi's residual slot, if it holds one.
func (c *devCache) release(gi int) {
	ks := c.keys
	if r := ks.resid[gi]; r != 0 {
		ks.free = append(ks.free, r)
		ks.resid[gi] = 0
	}
}

// groupCall runs kvs_key_quantize or kvs_key_dequantize on the key groups
// gis with their residual slots rs.
func (c *devCache) groupCall(op string, f func(unsafe.Pointer, int64, uintptr, uintptr) int32, gis, rs []int64) bool {
	if len(gis) == 0 {
		return true
	}
	gp, rp := uploadInts(c.b, op+" groups", gis), uploadInts(c.b, op+" slots", rs)
	return gp != 0 && rp != 0 && c.b.check(op, f(unsafe.Pointer(&c.k), int64(len(gis)), gp, rp))
}

// writeKeys stores the key rows at kp (slots uploaded at sp) in layer: each
// row into its key group's residual slot, taken when the group has none (a
// group already quantized is first decoded back into one, so that its other
// tokens are kept); every group whose last token is written is then
// quantized and its slot returned. The caller holds b.mu.
func (c *devCache) writeKeys(layer int, slots []int32, sp, kp uintptr) bool {
	ks, B := c.keys, c.cfg.BlockSize
	rows := make([]int64, len(slots))
	var open, openR, taken []int64
	for i, s := range slots {
		lb := layer*c.cfg.Blocks + int(s)/B
		g := int(s) % B / ks.group
		gi := lb*ks.groups + g
		if ks.resid[gi] == 0 {
			r, ok := c.take()
			if !ok {
				for _, gi := range taken {
					c.release(int(gi))
				}
				return false
			}
			ks.resid[gi] = r
			taken = append(taken, int64(gi))
			if c.full(lb, g) {
				open, openR = append(open, int64(gi)), append(openR, int64(r))
			}
		}
		rows[i] = int64(ks.resid[gi])
	}
	if !c.groupCall("key group dequantize", c.b.d.keyDequant, open, openR) {
		return false
	}
	rp := uploadInts(c.b, "key residual slots", rows)
	if rp == 0 || !c.b.check("K/V write", c.b.d.kvWrite(unsafe.Pointer(&c.k), int32(layer), int64(len(slots)), sp, kp, rp)) {
		return false
	}
	for _, s := range slots {
		lb, t := layer*c.cfg.Blocks+int(s)/B, int(s)%B
		ks.maskOf(lb).Set(t)
	}
	var done, doneR []int64
	for _, s := range slots {
		lb := layer*c.cfg.Blocks + int(s)/B
		g := int(s) % B / ks.group
		if gi := lb*ks.groups + g; ks.resid[gi] != 0 && c.full(lb, g) {
			done, doneR = append(done, int64(gi)), append(doneR, int64(ks.resid[gi]))
			// Reused only by later calls, which run after this one.
			c.release(gi)
		}
	}
	return c.groupCall("key group quantize", c.b.d.keyQuant, done, doneR)
}

// rowResiduals uploads, for the rows at slots of layer, the residual slot of
// each row's key group (0 where the group is quantized).
func (c *devCache) rowResiduals(layer int, slots []int32) uintptr {
	ks, B := c.keys, c.cfg.BlockSize
	rows := make([]int64, len(slots))
	for i, s := range slots {
		lb := layer*c.cfg.Blocks + int(s)/B
		rows[i] = int64(ks.resid[lb*ks.groups+int(s)%B/ks.group])
	}
	return uploadInts(c.b, "key residual slots", rows)
}

// tableResiduals uploads kvs_attention's k_resid for layer and the block
// tables: entry j's key group g at j*groups+g.
func (c *devCache) tableResiduals(layer int, tables []int32) uintptr {
	ks := c.keys
	out := make([]int64, len(tables)*ks.groups)
	for j, blk := range tables {
		if uint(blk) >= uint(c.cfg.Blocks) {
			continue // an entry no row reaches (the caller checked those it does)
		}
		lb := layer*c.cfg.Blocks + int(blk)
		for g := range ks.groups {
			out[j*ks.groups+g] = int64(ks.resid[lb*ks.groups+g])
		}
	}
	return uploadInts(c.b, "attention key residual slots", out)
}

// copyKeys gives block dst of every layer block src's written slots and a
// copy of its residual slots (the library copies the rest).
func (c *devCache) copyKeys(dst, src int) {
	ks := c.keys
	for l := range c.cfg.Layers {
		ld, ls := l*c.cfg.Blocks+dst, l*c.cfg.Blocks+src
		copy(ks.maskOf(ld), ks.maskOf(ls))
		for g := range ks.groups {
			gd, gs := ld*ks.groups+g, ls*ks.groups+g
			if ks.resid[gs] == 0 {
				c.release(gd)
				continue
			}
			if ks.resid[gd] == 0 {
				r, ok := c.take()
				if !ok {
					return
				}
				ks.resid[gd] = r
			}
			if !c.b.check("copy block", c.b.d.d2d(ks.resid[gd], ks.resid[gs], ks.slotBytes)) {
				return
			}
		}
	}
}

// resetKeys forgets which slots of block are written and returns its
// residual slots.
func (c *devCache) resetKeys(block int) {
	ks := c.keys
	for l := range c.cfg.Layers {
		lb := l*c.cfg.Blocks + block
		clear(ks.maskOf(lb))
		for g := range ks.groups {
			c.release(lb*ks.groups + g)
		}
	}
}

// saveKeys appends block's key state, as engine/kvstore saves it: per
// layer the slot mask, then per key group a flag and, when it is 1, the
// residual slot's bytes.
func (c *devCache) saveKeys(block int, buf []byte) []byte {
	ks := c.keys
	for l := range c.cfg.Layers {
		lb := l*c.cfg.Blocks + block
		for _, w := range ks.maskOf(lb) {
			buf = binary.LittleEndian.AppendUint64(buf, w)
		}
		for g := range ks.groups {
			r := ks.resid[lb*ks.groups+g]
			if r == 0 {
				buf = append(buf, 0)
				continue
			}
			buf = append(buf, 1)
			at := len(buf)
			buf = append(buf, make([]byte, ks.slotBytes)...)
			if !c.b.check("save block", c.b.d.d2h(unsafe.Pointer(&buf[at]), r, ks.slotBytes)) {
				return buf
			}
		}
	}
	return buf
}

// keyState is a saved block's key state, checked by parseKeys.
type keyState struct {
	mask  []uint64
	resid [][]byte // [layer*groups+g], nil for none
}

// parseKeys checks data, saveKeys' bytes for one block, and returns them:
// a slot mask naming no slot past the block, and a residual exactly for
// the key groups partly filled.
func (c *devCache) parseKeys(data []byte) (*keyState, error) {
	ks, L := c.keys, c.cfg.Layers
	st := &keyState{mask: make([]uint64, L*ks.words), resid: make([][]byte, L*ks.groups)}
	n := 0
	for l := range L {
		if len(data) < n+8*ks.words {
			return nil, fmt.Errorf("layer %d's key slot mask is cut short", l)
		}
		m := kvstore.SlotMask(st.mask[l*ks.words : (l+1)*ks.words])
		for w := range m {
			m[w] = binary.LittleEndian.Uint64(data[n+8*w:])
		}
		n += 8 * ks.words
		if err := m.CheckSaved(c.cfg, l); err != nil {
			return nil, err
		}
		for g := range ks.groups {
			if n >= len(data) {
				return nil, fmt.Errorf("layer %d key group %d's residual flag is missing", l, g)
			}
			flag := data[n]
			n++
			if err := m.CheckResidual(c.cfg, l, g, flag); err != nil {
				return nil, err
			}
			if flag == 1 {
				if int64(len(data)-n) < ks.slotBytes {
					return nil, fmt.Errorf("layer %d key group %d's residual is cut short", l, g)
				}
				st.resid[l*ks.groups+g] = data[n : n+int(ks.slotBytes)]
				n += int(ks.slotBytes)
			}
		}
	}
	if n != len(data) {
		return nil, fmt.Errorf("%d bytes left over after the block's key state", len(data)-n)
	}
	return st, nil
}

// loadKeys installs a parsed key state in block.
func (c *devCache) loadKeys(block int, st *keyState) error {
	ks := c.keys
	for l := range c.cfg.Layers {
		lb := l*c.cfg.Blocks + block
		copy(ks.maskOf(lb), st.mask[l*ks.words:(l+1)*ks.words])
		for g := range ks.groups {
			gi := lb*ks.groups + g
			src := st.resid[l*ks.groups+g]
			if src == nil {
				c.release(gi)
				continue
			}
			if ks.resid[gi] == 0 {
				r, ok := c.take()
				if !ok {
					return c.b.takeErr()
				}
				ks.resid[gi] = r
			}
			if rc := c.b.d.h2d(ks.resid[gi], unsafe.Pointer(&src[0]), ks.slotBytes); rc != 0 {
				return status("copy", rc)
			}
		}
	}
	return nil
}
