package kvstore

import (
	"encoding/binary"
	"math"

	"kvscope/engine/quant"
)

// floatPlane stores F32 values: per layer and block, [kvHead][slot][dim].
type floatPlane struct {
	c    Config
	data []float32
}

func (p *floatPlane) base(l, b int) int {
	return (l*p.c.Blocks + b) * p.c.KVHeads * p.c.BlockSize * p.c.HeadDim
}

func (p *floatPlane) write(l, b, t int, x []float32) {
	D, B := p.c.HeadDim, p.c.BlockSize
	base := p.base(l, b) + t*D
	for h := range p.c.KVHeads {
		copy(p.data[base+h*B*D:base+h*B*D+D], x[h*D:h*D+D])
	}
}

func (p *floatPlane) read(l, b, n int, dst []float32) {
	D, B := p.c.HeadDim, p.c.BlockSize
	base := p.base(l, b)
	for h := range p.c.KVHeads {
		copy(dst[h*n*D:(h+1)*n*D], p.data[base+h*B*D:base+h*B*D+n*D])
	}
}

func (p *floatPlane) blockLen() int { return p.c.KVHeads * p.c.BlockSize * p.c.HeadDim }

func (p *floatPlane) copyBlock(dst, src int) {
	n := p.blockLen()
	for l := range p.c.Layers {
		copy(p.data[p.base(l, dst):p.base(l, dst)+n], p.data[p.base(l, src):p.base(l, src)+n])
	}
}

func (p *floatPlane) save(b int, buf []byte) []byte {
	n := p.blockLen()
	for l := range p.c.Layers {
		for _, v := range p.data[p.base(l, b) : p.base(l, b)+n] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	return buf
}

func (p *floatPlane) loadSize(data []byte) (int, error) {
	need := 4 * p.blockLen() * p.c.Layers
	if len(data) < need {
		return 0, errShort(need, len(data))
	}
	return need, nil
}

func (p *floatPlane) load(b int, data []byte) {
	n := p.blockLen()
	for l := range p.c.Layers {
		d := p.data[p.base(l, b) : p.base(l, b)+n]
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		data = data[4*n:]
	}
}

func (p *floatPlane) reset(int) {}

// halfPlane stores F16 or BF16 values: per layer and block,
// [kvHead][slot][dim].
type halfPlane struct {
	c    Config
	bf   bool
	data []uint16
}

func (p *halfPlane) blockLen() int { return p.c.KVHeads * p.c.BlockSize * p.c.HeadDim }

func (p *halfPlane) base(l, b int) int { return (l*p.c.Blocks + b) * p.blockLen() }

func (p *halfPlane) write(l, b, t int, x []float32) {
	D, B := p.c.HeadDim, p.c.BlockSize
	base := p.base(l, b) + t*D
	for h := range p.c.KVHeads {
		d := p.data[base+h*B*D : base+h*B*D+D]
		xs := x[h*D : h*D+D]
		if p.bf {
			for i, v := range xs {
				d[i] = quant.F32ToBF16(v)
			}
		} else {
			for i, v := range xs {
				d[i] = quant.F32ToF16(v)
			}
		}
	}
}

func (p *halfPlane) read(l, b, n int, dst []float32) {
	D, B := p.c.HeadDim, p.c.BlockSize
	base := p.base(l, b)
	for h := range p.c.KVHeads {
		src := p.data[base+h*B*D : base+h*B*D+n*D]
		out := dst[h*n*D : (h+1)*n*D]
		if p.bf {
			for i, v := range src {
				out[i] = math.Float32frombits(uint32(v) << 16)
			}
		} else {
			for i, v := range src {
				out[i] = h2f(v)
			}
		}
	}
}

func (p *halfPlane) copyBlock(dst, src int) {
	n := p.blockLen()
	for l := range p.c.Layers {
		copy(p.data[p.base(l, dst):p.base(l, dst)+n], p.data[p.base(l, src):p.base(l, src)+n])
	}
}

func (p *halfPlane) save(b int, buf []byte) []byte {
	n := p.blockLen()
	for l := range p.c.Layers {
		buf = appendU16s(buf, p.data[p.base(l, b):p.base(l, b)+n])
	}
	return buf
}

func (p *halfPlane) loadSize(data []byte) (int, error) {
	need := 2 * p.blockLen() * p.c.Layers
	if len(data) < need {
		return 0, errShort(need, len(data))
	}
	return need, nil
}

func (p *halfPlane) load(b int, data []byte) {
	n := p.blockLen()
	for l := range p.c.Layers {
		data = readU16s(p.data[p.base(l, b):p.base(l, b)+n], data)
	}
}

func (p *halfPlane) reset(int) {}

// appendU16s appends vs little-endian.
func appendU16s(buf []byte, vs []uint16) []byte {
	for _, v := range vs {
		buf = binary.LittleEndian.AppendUint16(buf, v)
	}
	return buf
}

// readU16s fills dst from little-endian data and returns the rest of data.
func readU16s(dst []uint16, data []byte) []byte {
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint16(data[2*i:])
	}
	return data[2*len(dst):]
}
