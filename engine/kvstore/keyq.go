package kvstore

import (
	"encoding/binary"
	"sync"
)

// keyPlane stores Int8, Int4 or FP8 keys the KIVI way: quantized per
// channel (kvHead, dim) across the tokens of a key group, with scales (for
// Int4, a scale and a zero point) per channel and group. A group's tokens
// stay at f16 in a residual slot until the group is full, then the group is
// quantized at once.
//
// Per layer and block: data [kvHead][slot][rowBytes] (Int4 packs two dims a
// byte, the even dim in the low nibble), scale [kvHead][group] of
// keyScaleBytes (Int8, FP8) or keyMetaBytes (Int4), and a bit mask of the
// slots written. A residual slot serves one layer's
// key group of one block: [kvHead][tokenInGroup][dim], holding for Int8 and
// FP8 the high byte of each f16 value (the low byte sits in data, where the
// token's quantized byte will go) and for Int4 the whole f16 value,
// little-endian.
//
// A per-block lock serializes writes, which may quantize a group; reads take
// it shared.
type keyPlane struct {
	c     Config
	sh    shape
	words int // mask words per layer and block
	data  []byte
	scale []uint8 // Int8, FP8: E5M3 base and multipliers; Int4: E5M4 scale and zero codes (int4.go)
	mask  []uint64
	resid [][]byte // [(layer*Blocks+block)*groups+group]; nil when none is held
	locks []sync.RWMutex
	pool  *residualPool
	bufs  sync.Pool // *[]float32 of KVHeads*group*HeadDim, for (re)quantizing
}

func newKeyPlane(c Config, sh shape, pool *residualPool) *keyPlane {
	n := c.Layers * c.Blocks
	w := MaskWords(c)
	p := &keyPlane{c: c, sh: sh, words: w, pool: pool,
		data:  make([]byte, n*sh.data),
		scale: make([]uint8, n*sh.scales),
		mask:  make([]uint64, n*w),
		resid: make([][]byte, n*sh.groups),
		locks: make([]sync.RWMutex, c.Blocks),
	}
	size := c.KVHeads * sh.group * c.HeadDim
	p.bufs.New = func() any { b := make([]float32, size); return &b }
	return p
}

// residualPool hands out key residual slots (one layer's key group of one
// block) and keeps returned ones for reuse.
type residualPool struct {
	mu               sync.Mutex
	size             int // bytes a slot
	free             [][]byte
	inUse, allocated int // slots
}

// slotBytes returns the bytes of one layer's residual slot.
func slotBytes(c Config) int { return ResidualBytes(c) / c.Layers }

func (p *residualPool) get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse++
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free = p.free[:n-1]
		return r
	}
	p.allocated++
	return make([]byte, p.size)
}

func (p *residualPool) put(r []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse--
	p.free = append(p.free, r)
}

// masks returns the written-slot mask of layer l, block b.
func (p *keyPlane) masks(l, b int) SlotMask {
	i := (l*p.c.Blocks + b) * p.words
	return p.mask[i : i+p.words]
}

// residual returns the address of layer l, block b, group g's residual slot.
func (p *keyPlane) residual(l, b, g int) *[]byte {
	return &p.resid[(l*p.c.Blocks+b)*p.sh.groups+g]
}

// dataIndex returns the index in data of layer l, block b, head h, slot t's row.
func (p *keyPlane) dataIndex(l, b, h, t int) int {
	return (l*p.c.Blocks+b)*p.sh.data + (h*p.c.BlockSize+t)*p.sh.rowBytes
}

// residIndex returns the index of (h, tg, 0) in a residual slot, counted in
// values.
func (p *keyPlane) residIndex(h, tg int) int {
	return (h*p.sh.group + tg) * p.c.HeadDim
}

func (p *keyPlane) write(l, b, t int, x []float32) {
	D, H := p.c.HeadDim, p.c.KVHeads
	g := t / p.sh.group
	lo, gn := p.c.KeyGroupSpan(g)
	p.locks[b].Lock()
	defer p.locks[b].Unlock()
	m := p.masks(l, b)
	bit := uint64(1) << uint(t%64)
	if m[t/64]&bit != 0 && m.Full(lo, gn) {
		// The slot is rewritten in a group already quantized: decode the
		// group, put the new row in and quantize it again.
		bp := p.bufs.Get().(*[]float32)
		buf := (*bp)[:H*gn*D]
		p.dequantTokens(l, b, g, 0, gn, gn, 0, buf)
		for h := range H {
			copy(buf[(h*gn+t-lo)*D:(h*gn+t-lo+1)*D], x[h*D:(h+1)*D])
		}
		p.quantGroup(l, b, g, gn, buf)
		p.bufs.Put(bp)
		return
	}
	rp := p.residual(l, b, g)
	if *rp == nil {
		*rp = p.pool.get()
	}
	r := *rp
	for h := range H {
		xs := x[h*D : (h+1)*D]
		ri := p.residIndex(h, t-lo)
		if p.sh.prec.byteResid() {
			di := p.dataIndex(l, b, h, t)
			for d, v := range xs {
				f := f16(v)
				r[ri+d] = byte(f >> 8)
				p.data[di+d] = byte(f)
			}
		} else {
			for d, v := range xs {
				binary.LittleEndian.PutUint16(r[2*(ri+d):], f16(v))
			}
		}
	}
	m[t/64] |= bit
	if !m.Full(lo, gn) {
		return
	}
	bp := p.bufs.Get().(*[]float32)
	buf := (*bp)[:H*gn*D]
	p.decodeResidual(l, b, g, 0, gn, gn, 0, buf)
	p.quantGroup(l, b, g, gn, buf)
	p.bufs.Put(bp)
	p.pool.put(r)
	*rp = nil
}

// decodeResidual writes the f16 values of group g's tokens tg0..tg1-1 (slots
// lo+tg) of layer l, block b into dst[(h*n + off + tg)*D + d]. Without a
// residual slot (no token of the group written) it writes zeros.
func (p *keyPlane) decodeResidual(l, b, g, tg0, tg1, n, off int, dst []float32) {
	D := p.c.HeadDim
	lo := g * p.sh.group
	r := *p.residual(l, b, g)
	for h := range p.c.KVHeads {
		for tg := tg0; tg < tg1; tg++ {
			o := dst[(h*n+off+tg)*D : (h*n+off+tg+1)*D]
			if r == nil {
				clear(o)
				continue
			}
			ri := p.residIndex(h, tg)
			if p.sh.prec.byteResid() {
				di := p.dataIndex(l, b, h, lo+tg)
				for d := range o {
					o[d] = h2f(uint16(r[ri+d])<<8 | uint16(p.data[di+d]))
				}
			} else {
				for d := range o {
					o[d] = h2f(binary.LittleEndian.Uint16(r[2*(ri+d):]))
				}
			}
		}
	}
}

// scaleIndex returns the index in scale of layer-block lb, head h, key
// group g's first byte.
func (p *keyPlane) scaleIndex(lb, h, g int) int {
	return lb*p.sh.scales + (h*p.sh.groups+g)*(p.sh.scales/(p.c.KVHeads*p.sh.groups))
}

// keyScale returns channel d's scale of symmetric keys whose (head, group)
// scale bytes are sc: the E5M3 base times (multiplier+1)/16, exact.
func keyScale(sc []uint8, d int) float32 {
	return s8f(sc[0]) * float32(getNibble(sc[1:], d)+1) * (1.0 / 16)
}

// quantGroup quantizes buf, [kvHead][tokenInGroup][dim] holding group g's gn
// tokens of layer l, block b, per channel into data and scale.
//
// Int4 keys take, per channel, the E5M4 scale and zero point of
// int4KeySearch (codes clamp). Symmetric keys (Int8, FP8) take one E5M3 base scale S for the (head,
// group), amax/qmax over all its channels rounded up, and per channel the
// smallest multiplier r in 0..15 with S*(r+1)/16 at least the channel's
// amax/qmax: its scale.
func (p *keyPlane) quantGroup(l, b, g, gn int, buf []float32) {
	D, H, lo := p.c.HeadDim, p.c.KVHeads, g*p.sh.group
	lb := l*p.c.Blocks + b
	prec := p.sh.prec
	bp := p.bufs.Get().(*[]float32)
	defer p.bufs.Put(bp)
	amax := (*bp)[:D] // per channel, for symmetric keys (buf holds H*gn*D >= D values)
	for h := range H {
		si := p.scaleIndex(lb, h, g)
		x := buf[h*gn*D : (h+1)*gn*D]
		if prec == Int4 {
			meta := p.scale[si : si+keyMetaBytes(D)]
			var xs [MaxBlockSize]float32
			var codes [MaxBlockSize]uint8
			for d := range D {
				for tg := range gn {
					xs[tg] = x[tg*D+d]
				}
				sc, zc, _ := int4KeySearch(xs[:gn], codes[:gn])
				setInt4KeyCodes(meta, D, d, sc, zc)
				for tg := range gn {
					setNibble(p.data[p.dataIndex(l, b, h, lo+tg):], d, codes[tg])
				}
			}
			continue
		}
		var top float32
		for d := range D {
			var a float32
			for tg := range gn {
				v := x[tg*D+d]
				if v < 0 {
					v = -v
				}
				if v > a {
					a = v
				}
			}
			amax[d] = a
			top = max(top, a)
		}
		sc := p.scale[si : si+keyScaleBytes(D)]
		qm := qmax(prec)
		sc[0] = scaleUp(top / qm)
		base := s8f(sc[0])
		qs := make([]quant8, D)
		for d := range D {
			want := amax[d] / qm
			r := 0
			for r < 15 && base*float32(r+1)*(1.0/16) < want {
				r++
			}
			setNibble(sc[1:], d, uint8(r))
			if s := keyScale(sc, d); s != 0 {
				qs[d].id = 1 / s
			}
		}
		for tg := range gn {
			di := p.dataIndex(l, b, h, lo+tg)
			for d := range D {
				p.data[di+d] = qs[d].code(prec, x[tg*D+d])
			}
		}
	}
}

// dequantTokens writes the dequantized keys of group g's tokens tg0..tg1-1
// (slots lo+tg) into dst[(h*n + off + tg)*D + d].
func (p *keyPlane) dequantTokens(l, b, g, tg0, tg1, n, off int, dst []float32) {
	D, lo := p.c.HeadDim, g*p.sh.group
	lb := l*p.c.Blocks + b
	var sbuf, zbuf [256]float32
	for h := range p.c.KVHeads {
		si := p.scaleIndex(lb, h, g)
		// Decode the group's per-channel scales and zero points once,
		// in chunks of 256 channels.
		for c0 := 0; c0 < D; c0 += len(sbuf) {
			c1 := min(c0+len(sbuf), D)
			sc, zp := sbuf[:c1-c0], zbuf[:c1-c0]
			for i := range sc {
				if p.sh.prec == Int4 {
					sc[i], zp[i] = int4KeyVals(int4KeyCodes(p.scale[si:], D, c0+i))
				} else {
					sc[i] = keyScale(p.scale[si:], c0+i)
				}
			}
			for tg := tg0; tg < tg1; tg++ {
				o := dst[(h*n+off+tg)*D+c0 : (h*n+off+tg)*D+c1]
				di := p.dataIndex(l, b, h, lo+tg)
				switch p.sh.prec {
				case Int8:
					q := p.data[di+c0 : di+c1]
					for i := range o {
						o[i] = float32(int8(q[i])) * sc[i]
					}
				case FP8:
					q, tab := p.data[di+c0:di+c1], fp8Table
					for i := range o {
						o[i] = tab[q[i]] * sc[i]
					}
				default: // Int4
					q := p.data[di : di+p.sh.rowBytes]
					for i := range o {
						o[i] = float32(float32(getNibble(q, c0+i))*sc[i]) + zp[i]
					}
				}
			}
		}
	}
}

func (p *keyPlane) read(l, b, n int, dst []float32) {
	p.locks[b].RLock()
	defer p.locks[b].RUnlock()
	m := p.masks(l, b)
	for g := 0; g*p.sh.group < n; g++ {
		lo, gn := p.c.KeyGroupSpan(g)
		k := min(gn, n-lo) // tokens of this group to read
		if m.Full(lo, gn) {
			p.dequantTokens(l, b, g, 0, k, n, lo, dst)
		} else {
			p.decodeResidual(l, b, g, 0, k, n, lo, dst)
		}
	}
}

// setResidual makes *rp hold a copy of src (or nothing, when src is nil),
// taking or returning a pool slot as needed.
func (p *keyPlane) setResidual(rp *[]byte, src []byte) {
	switch {
	case src == nil && *rp != nil:
		p.pool.put(*rp)
		*rp = nil
	case src != nil:
		if *rp == nil {
			*rp = p.pool.get()
		}
		copy(*rp, src)
	}
}

func (p *keyPlane) copyBlock(dst, src int) {
	a, b := min(dst, src), max(dst, src)
	p.locks[a].Lock()
	defer p.locks[a].Unlock()
	p.locks[b].Lock()
	defer p.locks[b].Unlock()
	sh := &p.sh
	for l := range p.c.Layers {
		ld, ls := l*p.c.Blocks+dst, l*p.c.Blocks+src
		copy(p.data[ld*sh.data:(ld+1)*sh.data], p.data[ls*sh.data:(ls+1)*sh.data])
		copy(p.scale[ld*sh.scales:(ld+1)*sh.scales], p.scale[ls*sh.scales:(ls+1)*sh.scales])
		copy(p.masks(l, dst), p.masks(l, src))
		for g := range sh.groups {
			p.setResidual(p.residual(l, dst, g), *p.residual(l, src, g))
		}
	}
}

func (p *keyPlane) reset(b int) {
	p.locks[b].Lock()
	defer p.locks[b].Unlock()
	for l := range p.c.Layers {
		clear(p.masks(l, b))
		for g := range p.sh.groups {
			p.setResidual(p.residual(l, b, g), nil)
		}
	}
}

func (p *keyPlane) save(b int, buf []byte) []byte {
	p.locks[b].RLock()
	defer p.locks[b].RUnlock()
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		buf = append(buf, p.data[lb*sh.data:(lb+1)*sh.data]...)
		buf = append(buf, p.scale[lb*sh.scales:(lb+1)*sh.scales]...)
		for _, w := range p.masks(l, b) {
			buf = binary.LittleEndian.AppendUint64(buf, w)
		}
		for g := range sh.groups {
			if r := *p.residual(l, b, g); r != nil {
				buf = append(buf, 1)
				buf = append(buf, r...)
			} else {
				buf = append(buf, 0)
			}
		}
	}
	return buf
}

// layerFixed is the saved length of one layer's share of a block before its
// residual groups: data, scales and mask.
func (p *keyPlane) layerFixed() int { return p.sh.bytes() + 8*p.words }

func (p *keyPlane) loadSize(data []byte) (int, error) {
	fixed := p.layerFixed()
	n := 0
	m := make(SlotMask, p.words)
	for l := range p.c.Layers {
		if len(data) < n+fixed+p.sh.groups {
			return 0, errShort(n+fixed+p.sh.groups, len(data))
		}
		for w := range m {
			m[w] = binary.LittleEndian.Uint64(data[n+p.sh.bytes()+8*w:])
		}
		if err := m.CheckSaved(p.c, l); err != nil {
			return 0, err
		}
		if err := p.sh.checkCodes(l, data[n+p.sh.data:n+p.sh.data+p.sh.scales]); err != nil {
			return 0, err
		}
		n += fixed
		for g := range p.sh.groups {
			if n >= len(data) {
				return 0, errShort(n+1, len(data))
			}
			flag := data[n]
			n++
			if err := m.CheckResidual(p.c, l, g, flag); err != nil {
				return 0, err
			}
			if flag == 1 {
				if len(data) < n+p.pool.size {
					return 0, errShort(n+p.pool.size, len(data))
				}
				n += p.pool.size
			}
		}
	}
	return n, nil
}

func (p *keyPlane) load(b int, data []byte) {
	p.locks[b].Lock()
	defer p.locks[b].Unlock()
	sh := &p.sh
	for l := range p.c.Layers {
		lb := l*p.c.Blocks + b
		data = data[copy(p.data[lb*sh.data:(lb+1)*sh.data], data):]
		data = data[copy(p.scale[lb*sh.scales:(lb+1)*sh.scales], data):]
		m := p.masks(l, b)
		for w := range m {
			m[w] = binary.LittleEndian.Uint64(data[8*w:])
		}
		data = data[8*len(m):]
		for g := range sh.groups {
			flag := data[0]
			data = data[1:]
			var src []byte
			if flag == 1 {
				src = data[:p.pool.size]
				data = data[p.pool.size:]
			}
			p.setResidual(p.residual(l, b, g), src)
		}
	}
}
