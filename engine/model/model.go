package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"kvscope/engine/gguf"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// Model is a loaded Llama-family model: its configuration and weights.
// Forward may be called from one goroutine at a time.
type Model struct {
	Config
	W    *Weights
	File *gguf.File // the file the weights are mapped from
	own  bool       // Close closes File
}

// Load opens and maps a GGUF model file. Close releases it.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := New(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.own = true
	return m, nil
}

// New binds a model to an opened GGUF file, which must stay open while the
// model is used.
func New(f *gguf.File) (*Model, error) {
	c, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	w, err := loadWeights(f, c)
	if err != nil {
		return nil, err
	}
	return &Model{Config: c, W: w, File: f}, nil
}

// Close releases the model's file when Load opened it.
func (m *Model) Close() error {
	if m.own {
		return m.File.Close()
	}
	return nil
}

// CacheConfig returns a K/V store configuration shaped for this model, with
// the given block size, number of blocks and precisions.
func (m *Model) CacheConfig(blockSize, blocks int, k, v kvstore.Precision) kvstore.Config {
	return kvstore.Config{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, BlockSize: blockSize, Blocks: blocks, K: k, V: v}
}

// Params returns the number of weights (elements) of the model.
func (m *Model) Params() int64 {
	var n int64
	for _, t := range m.File.Tensors {
		n += int64(t.Elements())
	}
	return n
}

// Batch is one forward call's input: row i is token Tokens[i] at position
// Pos[i] of a sequence whose block table is Blocks[i]. Rows of the same
// sequence share the same table and must come in position order. Row i's K
// and V are written at block Blocks[i][Pos[i]/BlockSize], slot
// Pos[i]%BlockSize; positions before Pos[i] must already be in the cache or
// earlier in the batch.
type Batch struct {
	Tokens []int
	Pos    []int
	Blocks [][]int
	Logits []bool // whether row i wants logits
}

// Add appends a row to the batch.
func (b *Batch) Add(token, pos int, blocks []int, logits bool) {
	b.Tokens = append(b.Tokens, token)
	b.Pos = append(b.Pos, pos)
	b.Blocks = append(b.Blocks, blocks)
	b.Logits = append(b.Logits, logits)
}

// Len returns the number of rows.
func (b *Batch) Len() int { return len(b.Tokens) }

// Reset empties the batch, keeping its storage.
func (b *Batch) Reset() {
	b.Tokens, b.Pos, b.Blocks, b.Logits = b.Tokens[:0], b.Pos[:0], b.Blocks[:0], b.Logits[:0]
}

func (m *Model) check(kv *kvstore.Store, b *Batch) error {
	n := len(b.Tokens)
	if len(b.Pos) != n || len(b.Blocks) != n || len(b.Logits) != n {
		return errors.New("batch rows have different lengths")
	}
	if n == 0 {
		return errors.New("empty batch")
	}
	c := kv.Config()
	if c.Layers != m.Layers || c.KVHeads != m.KVHeads || c.HeadDim != m.HeadDim {
		return fmt.Errorf("the K/V store is shaped %d layers × %d heads × %d, the model needs %d × %d × %d",
			c.Layers, c.KVHeads, c.HeadDim, m.Layers, m.KVHeads, m.HeadDim)
	}
	for i := range n {
		if b.Tokens[i] < 0 || b.Tokens[i] >= m.Vocab {
			return fmt.Errorf("token id %d is outside the vocabulary (0..%d)", b.Tokens[i], m.Vocab-1)
		}
		p := b.Pos[i]
		if p < 0 || p/c.BlockSize >= len(b.Blocks[i]) {
			return fmt.Errorf("row %d: position %d has no block in its %d-block table", i, p, len(b.Blocks[i]))
		}
		for _, blk := range b.Blocks[i][:p/c.BlockSize+1] {
			if blk < 0 || blk >= c.Blocks {
				return fmt.Errorf("row %d: block %d is outside the store's %d blocks", i, blk, c.Blocks)
			}
		}
	}
	return nil
}

// Forward runs the model on a batch, writing every row's K and V into kv,
// and returns the logits (Vocab values) of the rows whose Logits flag is
// set, in row order.
func (m *Model) Forward(kv *kvstore.Store, b *Batch) ([][]float32, error) {
	if err := m.check(kv, b); err != nil {
		return nil, err
	}
	c := &m.Config
	n, dim := b.Len(), c.Dim
	qDim, kvDim := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim

	// Activations, row-major: row i of x is x[i*dim:(i+1)*dim].
	x := make([]float32, n*dim)
	xb := make([]float32, n*dim)
	q := make([]float32, n*qDim)
	k := make([]float32, n*kvDim)
	v := make([]float32, n*kvDim)
	att := make([]float32, n*qDim)
	hb := make([]float32, n*c.FFDim)
	hb2 := make([]float32, n*c.FFDim)

	for i, tok := range b.Tokens {
		if err := m.embed(tok, x[i*dim:(i+1)*dim]); err != nil {
			return nil, err
		}
	}

	for l := range c.Layers {
		w := &m.W.Layers[l]

		// Attention.
		rmsNorm(xb, x, w.AttnNorm, dim, c.NormEps)
		if err := matmuls(xb, mm{w.Q, q}, mm{w.K, k}, mm{w.V, v}); err != nil {
			return nil, err
		}
		addBias(q, w.QBias)
		addBias(k, w.KBias)
		addBias(v, w.VBias)
		for i, p := range b.Pos {
			m.rope(q[i*qDim:(i+1)*qDim], p)
			m.rope(k[i*kvDim:(i+1)*kvDim], p)
			bs := kv.Config().BlockSize
			kv.Write(l, b.Blocks[i][p/bs], p%bs, k[i*kvDim:(i+1)*kvDim], v[i*kvDim:(i+1)*kvDim])
		}
		m.attention(kv, l, b, q, att)
		if err := matmuls(att, mm{w.O, xb}); err != nil {
			return nil, err
		}
		add(x, xb)

		// Feed-forward (SwiGLU).
		rmsNorm(xb, x, w.FFNNorm, dim, c.NormEps)
		if err := matmuls(xb, mm{w.Gate, hb}, mm{w.Up, hb2}); err != nil {
			return nil, err
		}
		for i, g := range hb {
			hb[i] = silu(g) * hb2[i]
		}
		if err := matmuls(hb, mm{w.Down, xb}); err != nil {
			return nil, err
		}
		add(x, xb)
	}

	// Final norm and output projection, for the rows that want logits.
	var rows []int
	for i, want := range b.Logits {
		if want {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	sel := make([]float32, len(rows)*dim)
	for j, i := range rows {
		copy(sel[j*dim:], x[i*dim:(i+1)*dim])
	}
	rmsNorm(sel, sel, m.W.OutNorm, dim, c.NormEps)
	out := make([]float32, len(rows)*c.Vocab)
	if err := matmuls(sel, mm{m.W.Out, out}); err != nil {
		return nil, err
	}
	logits := make([][]float32, len(rows))
	for j := range rows {
		logits[j] = out[j*c.Vocab : (j+1)*c.Vocab : (j+1)*c.Vocab]
	}
	return logits, nil
}

// embed writes token tok's embedding row into dst.
func (m *Model) embed(tok int, dst []float32) error {
	e := m.W.Embed
	rb, err := e.Type.RowBytes(e.Cols)
	if err != nil {
		return err
	}
	return quant.Dequantize(e.Type, e.Data[tok*rb:(tok+1)*rb], dst)
}

// mm is one matrix product: out = W·x for every activation row x.
type mm struct {
	w   Matrix
	out []float32
}

func matmuls(x []float32, ops ...mm) error {
	for _, op := range ops {
		if err := quant.MatMul(op.w.Type, op.w.Data, op.w.Rows, op.w.Cols, x, op.out); err != nil {
			return err
		}
	}
	return nil
}

// rmsNorm writes x normalised by its root mean square and scaled by weight
// into out, row by row (out and x may be the same). The sum of squares runs
// in float64, as in ggml.
func rmsNorm(out, x, weight []float32, dim int, eps float32) {
	for r := 0; r < len(x); r += dim {
		row := x[r : r+dim]
		var ss float64
		for _, v := range row {
			ss += float64(v * v)
		}
		mean := float32(ss / float64(dim))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		o := out[r : r+dim]
		for i, v := range row {
			o[i] = v * scale * weight[i]
		}
	}
}

func addBias(x, bias []float32) {
	if bias == nil {
		return
	}
	for r := 0; r < len(x); r += len(bias) {
		row := x[r : r+len(bias)]
		for i, b := range bias {
			row[i] += b
		}
	}
}

func add(x, y []float32) {
	for i := range x {
		x[i] += y[i]
	}
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// rope rotates each head of x (a row of heads of HeadDim values) for
// position pos. The angle for pair i is pos/scale · base^(-2i/RopeDim),
// stepped by repeated multiplication in float32 as ggml does, and divided by
// rope_freqs[i] when the model has them (Llama 3.1).
func (m *Model) rope(x []float32, pos int) {
	c := &m.Config
	thetaScale := float32(math.Pow(float64(c.RopeBase), -2/float64(c.RopeDim)))
	half := c.RopeDim / 2
	for h := 0; h < len(x); h += c.HeadDim {
		head := x[h : h+c.HeadDim]
		theta := float32(pos)
		for i := range half {
			t := theta / c.RopeScale
			if m.W.RopeFreqs != nil {
				t /= m.W.RopeFreqs[i]
			}
			cos, sin := float32(math.Cos(float64(t))), float32(math.Sin(float64(t)))
			a, b := 2*i, 2*i+1
			if c.RopeNeoX {
				a, b = i, i+half
			}
			x0, x1 := head[a], head[b]
			head[a] = x0*cos - x1*sin
			head[b] = x0*sin + x1*cos
			theta *= thetaScale
		}
	}
}

// ShiftKeys re-positions the cached keys of positions [from, to) of the
// sequence whose block table is blocks by delta positions, in every layer:
// RoPE rotations compose, so rotating a key by the angle of delta moves it
// from position p to p+delta. Values are written back unchanged. A rolling
// context window (StreamingLLM) uses it after dropping tokens.
func (m *Model) ShiftKeys(kv *kvstore.Store, blocks []int, from, to, delta int) {
	bs, hd, nkv := kv.Config().BlockSize, m.HeadDim, m.KVHeads
	kb := make([]float32, nkv*bs*hd)
	vb := make([]float32, nkv*bs*hd)
	k := make([]float32, nkv*hd)
	v := make([]float32, nkv*hd)
	for l := range m.Layers {
		for b := from / bs; b*bs < to; b++ {
			lo, hi := max(from, b*bs), min(to, (b+1)*bs)
			n := hi - b*bs
			kv.ReadK(l, blocks[b], n, kb[:nkv*n*hd])
			kv.ReadV(l, blocks[b], n, vb[:nkv*n*hd])
			for p := lo; p < hi; p++ {
				t := p - b*bs
				for h := range nkv {
					copy(k[h*hd:(h+1)*hd], kb[(h*n+t)*hd:])
					copy(v[h*hd:(h+1)*hd], vb[(h*n+t)*hd:])
				}
				m.rope(k, delta)
				kv.Write(l, blocks[b], t, k, v)
			}
		}
	}
}

// attention computes, for every row, softmax(q·Kᵀ/√d)·V over positions
// 0..pos of the row's sequence, reading K and V block by block through its
// table. Rows run in parallel; each row's sums run in position order.
func (m *Model) attention(kv *kvstore.Store, layer int, b *Batch, q, out []float32) {
	c := &m.Config
	qDim := c.Heads * c.HeadDim
	workers := min(runtime.GOMAXPROCS(0), b.Len())
	var wg sync.WaitGroup
	next := make(chan int, b.Len())
	for i := range b.Len() {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s attnScratch
			for i := range next {
				m.attendRow(kv, layer, b.Pos[i], b.Blocks[i], q[i*qDim:(i+1)*qDim], out[i*qDim:(i+1)*qDim], &s)
			}
		}()
	}
	wg.Wait()
}

type attnScratch struct {
	scores []float32 // [head][position]
	buf    []float32 // one block of K or V, [kvHead][t][d]
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (m *Model) attendRow(kv *kvstore.Store, layer, pos int, blocks []int, q, out []float32, s *attnScratch) {
	c := &m.Config
	bs := kv.Config().BlockSize
	hd, group := c.HeadDim, c.Heads/c.KVHeads
	nPos := pos + 1
	s.scores = grow(s.scores, c.Heads*nPos)
	s.buf = grow(s.buf, c.KVHeads*bs*hd)
	scale := float32(1 / math.Sqrt(float64(hd)))

	for j := 0; j*bs < nPos; j++ {
		cnt := min(bs, nPos-j*bs)
		kb := s.buf[:c.KVHeads*cnt*hd]
		kv.ReadK(layer, blocks[j], cnt, kb)
		for h := range c.Heads {
			qh := q[h*hd : (h+1)*hd]
			g := h / group
			sc := s.scores[h*nPos+j*bs : h*nPos+j*bs+cnt]
			for t := range sc {
				kt := kb[(g*cnt+t)*hd : (g*cnt+t+1)*hd]
				var dot float32
				for d, qv := range qh {
					dot += qv * kt[d]
				}
				sc[t] = dot * scale
			}
		}
	}
	for h := range c.Heads {
		softmax(s.scores[h*nPos : (h+1)*nPos])
	}
	clear(out)
	for j := 0; j*bs < nPos; j++ {
		cnt := min(bs, nPos-j*bs)
		vb := s.buf[:c.KVHeads*cnt*hd]
		kv.ReadV(layer, blocks[j], cnt, vb)
		for h := range c.Heads {
			oh := out[h*hd : (h+1)*hd]
			g := h / group
			sc := s.scores[h*nPos+j*bs : h*nPos+j*bs+cnt]
			for t, p := range sc {
				vt := vb[(g*cnt+t)*hd : (g*cnt+t+1)*hd]
				for d := range oh {
					oh[d] += p * vt[d]
				}
			}
		}
	}
}

// softmax normalises x in place; the sum runs in float64 as in ggml.
func softmax(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - mx)))
		x[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}
