package backend

import (
	"fmt"
	"math"

	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// Go returns the pure Go backend: the reference every backend is tested
// against and the fallback when no native library loads. Weights stay in the
// caller's memory (the mapped GGUF file), its Cache is a *kvstore.Store and
// its buffers are Go slices. It holds no state of its own, so one Go
// backend may serve any number of models and goroutines at once.
func Go() Backend { return goBackend{} }

type goBackend struct{}

// goBuffer is the Go backend's Buffer.
type goBuffer struct{ v []float32 }

func (b *goBuffer) Len() int { return len(b.v) }
func (b *goBuffer) Free()    { b.v = nil }

// goWeight is the Go backend's Weight: the matrix's bytes where they are.
type goWeight struct {
	t          quant.Type
	rows, cols int
	data       []byte
	bias       []float32
}

func (w *goWeight) Shape() (rows, cols int) { return w.rows, w.cols }
func (w *goWeight) Free()                   { w.data, w.bias = nil, nil }

func (goBackend) Name() string { return "go" }

func (goBackend) Weight(t quant.Type, rows, cols int, data []byte, bias []float32) (Weight, error) {
	if !quant.Supported(t) {
		return nil, fmt.Errorf("weights of type %s are not supported", t)
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("a weight matrix of %d×%d elements is empty", rows, cols)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%d rows of %d %s elements take %d bytes, the weight has %d", rows, cols, t, rows*rb, len(data))
	}
	if bias != nil && len(bias) != rows {
		return nil, fmt.Errorf("a bias of %d values does not fit a weight of %d rows", len(bias), rows)
	}
	return &goWeight{t: t, rows: rows, cols: cols, data: data, bias: bias}, nil
}

func (goBackend) NewCache(c kvstore.Config) (Cache, error) {
	st, err := kvstore.New(c)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (goBackend) NewBuffer(n int) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("a buffer of %d values is impossible", n)
	}
	return &goBuffer{v: make([]float32, n)}, nil
}

func (goBackend) Write(dst Buffer, off int, src []float32) { copy(vals(dst)[off:off+len(src)], src) }

func (goBackend) Read(dst []float32, src Buffer, off int) error {
	s := vals(src)
	if off < 0 || off+len(dst) > len(s) {
		return fmt.Errorf("backend: read of %d values from %d is outside a buffer of %d", len(dst), off, len(s))
	}
	copy(dst, s[off:])
	return nil
}

func (goBackend) Sync() error { return nil }

// vals returns a Go buffer's values; a handle of another backend is a
// programming error.
func vals(b Buffer) []float32 {
	gb, ok := b.(*goBuffer)
	if !ok {
		panic(fmt.Sprintf("backend: the Go backend was given a %T buffer, made by another backend", b))
	}
	return gb.v
}

func weight(w Weight) *goWeight {
	gw, ok := w.(*goWeight)
	if !ok {
		panic(fmt.Sprintf("backend: the Go backend was given a %T weight, made by another backend", w))
	}
	return gw
}

func store(c Cache) *kvstore.Store {
	st, ok := c.(*kvstore.Store)
	if !ok {
		panic(fmt.Sprintf("backend: the Go backend was given a %T cache, made by another backend", c))
	}
	return st
}

func (g goBackend) MatMuls(outs []Buffer, ws []Weight, x Buffer, n int) {
	for j, w := range ws {
		g.MatMul(outs[j], w, x, n)
	}
}

func (goBackend) MatMul(out Buffer, w Weight, x Buffer, n int) {
	gw := weight(w)
	o := vals(out)[:n*gw.rows]
	if err := quant.MatMul(gw.t, gw.data, gw.rows, gw.cols, vals(x)[:n*gw.cols], o); err != nil {
		panic("backend: " + err.Error()) // shapes were checked when the weight was made
	}
	if gw.bias == nil {
		return
	}
	for r := 0; r < len(o); r += gw.rows {
		row := o[r : r+gw.rows]
		for i, b := range gw.bias {
			row[i] += b
		}
	}
}

func (goBackend) Embed(out Buffer, w Weight, tokens []int32) {
	gw := weight(w)
	rb, _ := gw.t.RowBytes(gw.cols) // checked when the weight was made
	o := vals(out)
	for i, tok := range tokens {
		if err := quant.Dequantize(gw.t, gw.data[int(tok)*rb:(int(tok)+1)*rb], o[i*gw.cols:(i+1)*gw.cols]); err != nil {
			panic("backend: " + err.Error())
		}
	}
}

// RMSNorm's sum of squares runs in float64, as in ggml.
func (goBackend) RMSNorm(out, x, weight Buffer, n, dim int, eps float32) {
	xs, os, w := vals(x), vals(out), vals(weight)[:dim]
	for r := 0; r < n*dim; r += dim {
		row := xs[r : r+dim]
		var ss float64
		for _, v := range row {
			ss += float64(v * v)
		}
		mean := float32(ss / float64(dim))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		o := os[r : r+dim]
		for i, v := range row {
			o[i] = v * scale * w[i]
		}
	}
}

// RoPE steps each pair's angle by repeated multiplication in float32, as
// ggml does.
func (goBackend) RoPE(x Buffer, heads int, pos []int32, r *Rope) {
	xs := vals(x)
	thetaScale := float32(math.Pow(float64(r.Base), -2/float64(r.Dims)))
	half := r.Dims / 2
	width := heads * r.HeadDim
	for i, p := range pos {
		row := xs[i*width : (i+1)*width]
		for h := 0; h < width; h += r.HeadDim {
			head := row[h : h+r.HeadDim]
			theta := float32(p)
			for j := range half {
				t := theta / r.Scale
				if r.Freqs != nil {
					t /= r.Freqs[j]
				}
				cos, sin := float32(math.Cos(float64(t))), float32(math.Sin(float64(t)))
				a, b := 2*j, 2*j+1
				if r.NeoX {
					a, b = j, j+half
				}
				x0, x1 := head[a], head[b]
				head[a] = x0*cos - x1*sin
				head[b] = x0*sin + x1*cos
				theta *= thetaScale
			}
		}
	}
}

func (goBackend) SwiGLU(gate, up Buffer, count int) {
	g, u := vals(gate)[:count], vals(up)[:count]
	for i, v := range g {
		g[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
	}
}

func (goBackend) Scale(x Buffer, count int, s float32) {
	xs := vals(x)[:count]
	for i := range xs {
		xs[i] *= s
	}
}

// GeGLU's GELU is the tanh approximation, in float64 as ggml's reference.
func (goBackend) GeGLU(gate, up Buffer, count int) {
	g, u := vals(gate)[:count], vals(up)[:count]
	const c = 0.7978845608028654 // sqrt(2/pi)
	for i, v := range g {
		x := float64(v)
		g[i] = float32(0.5*x*(1+math.Tanh(c*(x+0.044715*x*x*x)))) * u[i]
	}
}

func (goBackend) Add(x, y Buffer, count int) {
	xs, ys := vals(x)[:count], vals(y)[:count]
	for i := range xs {
		xs[i] += ys[i]
	}
}

func (goBackend) Gather(dst, src Buffer, rows []int32, width int) {
	d, s := vals(dst), vals(src)
	for j, r := range rows {
		copy(d[j*width:(j+1)*width], s[int(r)*width:(int(r)+1)*width])
	}
}

func (goBackend) WriteKV(c Cache, layer int, k, v Buffer, slots []int32) {
	st := store(c)
	cfg := st.Config()
	row := cfg.KVHeads * cfg.HeadDim
	ks, vs := vals(k), vals(v)
	for i, s := range slots {
		st.Write(layer, int(s)/cfg.BlockSize, int(s)%cfg.BlockSize, ks[i*row:(i+1)*row], vs[i*row:(i+1)*row])
	}
}

// ReadKV decodes each run of slots in one block with one read of the
// block's first tokens.
func (goBackend) ReadKV(k, v Buffer, c Cache, layer int, slots []int32) {
	st := store(c)
	cfg := st.Config()
	bs, hd, nkv := cfg.BlockSize, cfg.HeadDim, cfg.KVHeads
	row := nkv * hd
	ks, vs := vals(k), vals(v)
	s := attnPool.Get().(*attnScratch)
	defer attnPool.Put(s)
	for i0 := 0; i0 < len(slots); {
		blk := int(slots[i0]) / bs
		i1, n := i0, 0
		for ; i1 < len(slots) && int(slots[i1])/bs == blk; i1++ {
			n = max(n, int(slots[i1])%bs+1)
		}
		s.buf = grow(s.buf, 2*row*n)
		kb, vb := s.buf[:row*n], s.buf[row*n:]
		st.ReadK(layer, blk, n, kb)
		st.ReadV(layer, blk, n, vb)
		for i := i0; i < i1; i++ {
			t := int(slots[i]) % bs
			for h := range nkv {
				copy(ks[i*row+h*hd:i*row+(h+1)*hd], kb[(h*n+t)*hd:])
				copy(vs[i*row+h*hd:i*row+(h+1)*hd], vb[(h*n+t)*hd:])
			}
		}
		i0 = i1
	}
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
