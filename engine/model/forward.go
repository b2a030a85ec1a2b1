package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
)

// Batch is one forward call's input: row i is token Tokens[i] at position
// Pos[i] of a sequence whose block table is Blocks[i]. Rows of the same
// sequence share the same table and must come in position order. Row i's K
// and V are written at block Blocks[i][Pos[i]/BlockSize], slot
// Pos[i]%BlockSize; positions before Pos[i] must already be in the cache or
// earlier in the batch. Consecutive rows with equal tables attend as one
// sequence, which lets the backend decode their cached blocks once.
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

// Forward runs the model on a batch, writing every row's K and V into kv,
// and returns the logits (Vocab values) of the rows whose Logits flag is
// set, in row order. kv must come from NewCache (with the Go backend, any
// *kvstore.Store of the model's shape). Forward reuses its buffers from
// call to call, allocating only when a batch is larger than any before;
// calls from several goroutines at once each get their own.
func (m *Model) Forward(kv backend.Cache, b *Batch) ([][]float32, error) {
	if err := m.check(kv, b); err != nil {
		return nil, err
	}
	w, err := m.bound()
	if err != nil {
		return nil, err
	}
	be, c, n := w.be, &m.Config, b.Len()
	r, err := m.takeRun(w, n)
	if err != nil {
		return nil, err
	}
	defer m.putRun(r)
	r.describe(b, kv.Config().BlockSize)

	be.Embed(r.x, w.embed, r.tokens)
	if c.EmbedScale != 0 {
		be.Scale(r.x, n*c.Dim, c.EmbedScale)
	}

	for l := range w.layers {
		lw := &w.layers[l]

		// --- attention
		be.RMSNorm(r.xb, r.x, lw.attnNorm, n, c.Dim, c.NormEps)
		be.MatMuls(r.qkv[:], lw.qkv[:], r.xb, n)
		if lw.qNorm != nil { // qwen3: each head's q and k normalized
			be.RMSNorm(r.q, r.q, lw.qNorm, n*c.Heads, c.HeadDim, c.NormEps)
			be.RMSNorm(r.k, r.k, lw.kNorm, n*c.KVHeads, c.HeadDim, c.NormEps)
		}
		rope := &w.rope
		r.rows.Window = 0
		if c.Local(l) { // gemma3: a sliding-window layer, with its own RoPE base
			rope, r.rows.Window = &w.ropeLocal, int32(c.Window)
		}
		be.RoPE(r.q, c.Heads, r.rows.Pos, rope)
		be.RoPE(r.k, c.KVHeads, r.rows.Pos, rope)
		be.WriteKV(kv, l, r.k, r.v, r.slots)
		be.Attention(r.att, kv, l, r.q, c.Heads, &r.rows)
		be.MatMul(r.xb, lw.o, r.att, n)
		if lw.postAttnNorm != nil {
			be.RMSNorm(r.xb, r.xb, lw.postAttnNorm, n, c.Dim, c.NormEps)
		}
		be.Add(r.x, r.xb, n*c.Dim)

		// --- feed-forward (SwiGLU, or GeGLU for gemma3)
		be.RMSNorm(r.xb, r.x, lw.ffnNorm, n, c.Dim, c.NormEps)
		be.MatMuls(r.gateUp[:], lw.gateUp[:], r.xb, n)
		if c.GELU {
			be.GeGLU(r.hb, r.hb2, n*c.FFDim)
		} else {
			be.SwiGLU(r.hb, r.hb2, n*c.FFDim)
		}
		be.MatMul(r.xb, lw.down, r.hb, n)
		if lw.postFFNNorm != nil {
			be.RMSNorm(r.xb, r.xb, lw.postFFNNorm, n, c.Dim, c.NormEps)
		}
		be.Add(r.x, r.xb, n*c.Dim)
	}

	// --- final norm and output projection, for the rows that want logits
	nl := len(r.out)
	if nl == 0 {
		return nil, be.Sync()
	}
	if err := r.ensure(nl*c.Vocab, &r.logits); err != nil {
		return nil, err
	}
	be.Gather(r.xb, r.x, r.out, c.Dim)
	be.RMSNorm(r.xb, r.xb, w.outNorm, nl, c.Dim, c.NormEps)
	be.MatMul(r.logits, w.out, r.xb, nl)
	flat := make([]float32, nl*c.Vocab)
	if err := be.Read(flat, r.logits, 0); err != nil {
		return nil, fmt.Errorf("forward pass on the %s backend: %w", be.Name(), err)
	}
	logits := make([][]float32, nl)
	for j := range logits {
		logits[j] = flat[j*c.Vocab : (j+1)*c.Vocab : (j+1)*c.Vocab]
	}
	return logits, nil
}

// ShiftKeys re-positions the cached keys of positions [from, to) of the
// sequence whose block table is blocks by delta positions, in every layer:
// RoPE rotations compose, so rotating a key by the angle of delta moves it
// from position p to p+delta. Values are written back unchanged. A rolling
// context window (StreamingLLM) uses it after dropping tokens. A backend
// failure shows at the next Forward.
func (m *Model) ShiftKeys(kv backend.Cache, blocks []int, from, to, delta int) {
	if to <= from {
		return
	}
	w, err := m.bound()
	if err != nil {
		return // Forward reports it
	}
	be, bs := w.be, kv.Config().BlockSize
	r, err := m.takeRun(w, 0)
	if err != nil {
		return
	}
	defer m.putRun(r)
	r.slots, r.rows.Pos = r.slots[:0], r.rows.Pos[:0]
	for p := from; p < to; p++ {
		r.slots = append(r.slots, int32(blocks[p/bs]*bs+p%bs))
		r.rows.Pos = append(r.rows.Pos, int32(delta))
	}
	if err := r.ensure((to-from)*m.KVHeads*m.HeadDim, &r.shiftK, &r.shiftV); err != nil {
		return
	}
	for l := range m.Layers {
		be.ReadKV(r.shiftK, r.shiftV, kv, l, r.slots)
		be.RoPE(r.shiftK, m.KVHeads, r.rows.Pos, &w.rope)
		be.WriteKV(kv, l, r.shiftK, r.shiftV, r.slots)
	}
}

// NewCache allocates a paged K/V pool on the model's backend, for Forward.
func (m *Model) NewCache(c kvstore.Config) (backend.Cache, error) {
	w, err := m.bound()
	if err != nil {
		return nil, err
	}
	return w.be.NewCache(c)
}

// Use moves the model onto backend be, uploading its weights there; until
// then (or after Use(nil)) it runs on backend.Go. Caches made by NewCache
// for the old backend must not be used again. Use must not run while
// Forward or ShiftKeys does.
func (m *Model) Use(be backend.Backend) error {
	return m.UseContext(context.Background(), be, nil)
}

// Progress hears how a move onto a backend goes: done of the total bytes
// of weight matrices are on it. It is called on the goroutine that moves
// the model, after each matrix, with done rising to total.
type Progress func(done, total int64)

// UseContext is Use that reports each matrix moved to progress (nil: none)
// and stops when ctx is done: then the matrices moved so far are freed,
// the model stays on the backend it had, and the error wraps ctx's
// (errors.Is(err, context.Canceled) after a cancel).
func (m *Model) UseContext(ctx context.Context, be backend.Backend, progress Progress) error {
	if be == nil {
		be = backend.Go()
	}
	w, err := m.bind(ctx, be, progress)
	if err != nil {
		return fmt.Errorf("cannot move the model to the %s backend: %w", be.Name(), err)
	}
	m.compute.mu.Lock()
	old, runs := m.compute.w, m.compute.runs
	m.compute.w, m.compute.runs = w, nil
	m.compute.mu.Unlock()
	for _, r := range runs {
		r.free()
	}
	if old != nil {
		old.free()
	}
	return nil
}

// Backend returns the backend the model computes on.
func (m *Model) Backend() backend.Backend {
	w, err := m.bound()
	if err != nil {
		return backend.Go()
	}
	return w.be
}

func (m *Model) check(kv backend.Cache, b *Batch) error {
	if kv == nil || b == nil {
		return errors.New("a forward pass needs a K/V cache and a batch")
	}
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

// compute is a model's state on its backend: the bound weights and the run
// states Forward reuses. Its zero value binds to backend.Go on first use.
type compute struct {
	mu   sync.Mutex
	w    *boundWeights
	runs []*run // idle run states
}

// boundWeights are a model's weights as handles of one backend.
type boundWeights struct {
	be         backend.Backend
	embed, out backend.Weight
	outNorm    backend.Buffer
	rope       backend.Rope
	ropeLocal  backend.Rope // gemma3's sliding-window layers' (another base)
	layers     []boundLayer
}

type boundLayer struct {
	attnNorm, ffnNorm         backend.Buffer
	qNorm, kNorm              backend.Buffer    // nil: no per-head q/k norm
	postAttnNorm, postFFNNorm backend.Buffer    // nil: none (all but gemma3)
	qkv                       [3]backend.Weight // query, key, value: one MatMuls
	gateUp                    [2]backend.Weight // gate, up: one MatMuls
	o, down                   backend.Weight
}

// bound returns the model's weights on its backend, binding them to
// backend.Go the first time.
func (m *Model) bound() (*boundWeights, error) {
	m.compute.mu.Lock()
	defer m.compute.mu.Unlock()
	if m.compute.w == nil {
		w, err := m.bind(context.Background(), backend.Go(), nil)
		if err != nil {
			return nil, err
		}
		m.compute.w = w
	}
	return m.compute.w, nil
}

// rope returns the model's rotary position embedding.
func (m *Model) rope() backend.Rope {
	c := &m.Config
	return backend.Rope{HeadDim: c.HeadDim, Dims: c.RopeDim, Base: c.RopeBase, Scale: c.RopeScale, NeoX: c.RopeNeoX, Freqs: m.W.RopeFreqs}
}

// weightBytes is the bytes of every matrix bind moves, in its order.
func (m *Model) weightBytes() int64 {
	n := int64(len(m.W.Embed.Data) + len(m.W.Out.Data))
	for i := range m.W.Layers {
		l := &m.W.Layers[i]
		for _, x := range []*Matrix{&l.Q, &l.K, &l.V, &l.O, &l.Gate, &l.Up, &l.Down} {
			n += int64(len(x.Data))
		}
	}
	return n
}

// bind makes handles on be for every weight of the model, reporting each
// matrix to progress (nil: none) and stopping when ctx is done.
func (m *Model) bind(ctx context.Context, be backend.Backend, progress Progress) (*boundWeights, error) {
	w := &boundWeights{be: be, layers: make([]boundLayer, len(m.W.Layers)), rope: m.rope()}
	w.ropeLocal = w.rope
	w.ropeLocal.Base = m.RopeBaseLocal
	var err error
	var done int64
	total := m.weightBytes()
	weight := func(name string, x Matrix, bias []float32) backend.Weight {
		if err != nil {
			return nil
		}
		if e := ctx.Err(); e != nil {
			err = fmt.Errorf("stopped before weight %s: %w", name, e)
			return nil
		}
		h, e := be.Weight(x.Type, x.Rows, x.Cols, x.Data, bias)
		if e != nil {
			err = fmt.Errorf("weight %s: %w", name, e)
			return h
		}
		if done += int64(len(x.Data)); progress != nil {
			progress(done, total)
		}
		return h
	}
	vector := func(v []float32) backend.Buffer {
		if err != nil {
			return nil
		}
		h, e := be.NewBuffer(len(v))
		if e != nil {
			err = e
			return nil
		}
		be.Write(h, 0, v)
		return h
	}
	w.embed = weight("token_embd.weight", m.W.Embed, nil)
	w.out = weight("output.weight", m.W.Out, nil)
	w.outNorm = vector(m.W.OutNorm)
	for i := range m.W.Layers {
		src, dst := &m.W.Layers[i], &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		dst.attnNorm, dst.ffnNorm = vector(src.AttnNorm), vector(src.FFNNorm)
		if src.QNorm != nil || src.KNorm != nil {
			if src.QNorm == nil || src.KNorm == nil {
				err = fmt.Errorf("layer %d has a norm for only one of q and k", i)
			}
			dst.qNorm, dst.kNorm = vector(src.QNorm), vector(src.KNorm)
		}
		if src.PostAttnNorm != nil {
			dst.postAttnNorm = vector(src.PostAttnNorm)
		}
		if src.PostFFNNorm != nil {
			dst.postFFNNorm = vector(src.PostFFNNorm)
		}
		dst.qkv[0] = weight(p+"attn_q.weight", src.Q, src.QBias)
		dst.qkv[1] = weight(p+"attn_k.weight", src.K, src.KBias)
		dst.qkv[2] = weight(p+"attn_v.weight", src.V, src.VBias)
		dst.o = weight(p+"attn_output.weight", src.O, nil)
		dst.gateUp[0] = weight(p+"ffn_gate.weight", src.Gate, nil)
		dst.gateUp[1] = weight(p+"ffn_up.weight", src.Up, nil)
		dst.down = weight(p+"ffn_down.weight", src.Down, nil)
	}
	if err == nil {
		err = be.Sync()
	}
	if err != nil {
		w.free()
		return nil, err
	}
	return w, nil
}

func (w *boundWeights) free() {
	for _, h := range []backend.Weight{w.embed, w.out} {
		if h != nil {
			h.Free()
		}
	}
	if w.outNorm != nil {
		w.outNorm.Free()
	}
	for _, l := range w.layers {
		for _, h := range []backend.Weight{l.qkv[0], l.qkv[1], l.qkv[2], l.o, l.gateUp[0], l.gateUp[1], l.down} {
			if h != nil {
				h.Free()
			}
		}
		for _, h := range []backend.Buffer{l.attnNorm, l.ffnNorm, l.qNorm, l.kNorm, l.postAttnNorm, l.postFFNNorm} {
			if h != nil {
				h.Free()
			}
		}
	}
}

// run is the state of one Forward call (llama2.c's RunState): activation
// buffers for up to n rows on the backend, and the step's row description.
type run struct {
	w *boundWeights // the weights it was made for
	n int

	x, xb, q, k, v, att, hb, hb2 backend.Buffer
	qkv                          [3]backend.Buffer // q, k, v
	gateUp                       [2]backend.Buffer // hb, hb2
	logits                       backend.Buffer    // rows wanting logits × Vocab
	shiftK, shiftV               backend.Buffer    // ShiftKeys' keys and values

	tokens, slots, out []int32
	rows               backend.Rows
}

// takeRun returns an idle run state for w with room for n rows, making or
// growing one as needed.
func (m *Model) takeRun(w *boundWeights, n int) (*run, error) {
	m.compute.mu.Lock()
	var r *run
	if k := len(m.compute.runs); k > 0 {
		r = m.compute.runs[k-1]
		m.compute.runs = m.compute.runs[:k-1]
	}
	m.compute.mu.Unlock()
	if r == nil || r.w != w {
		if r != nil {
			r.free()
		}
		r = &run{w: w}
	}
	if n > r.n {
		if err := r.grow(m, n); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// putRun makes r idle again.
func (m *Model) putRun(r *run) {
	m.compute.mu.Lock()
	defer m.compute.mu.Unlock()
	if r.w != m.compute.w {
		r.free() // Use moved the model meanwhile
		return
	}
	m.compute.runs = append(m.compute.runs, r)
}

// grow replaces r's activation buffers by ones for n rows.
func (r *run) grow(m *Model, n int) error {
	c := &m.Config
	qDim, kvDim := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	sizes := []struct {
		b    *backend.Buffer
		size int
	}{
		{&r.x, c.Dim}, {&r.xb, c.Dim}, {&r.q, qDim}, {&r.k, kvDim}, {&r.v, kvDim},
		{&r.att, qDim}, {&r.hb, c.FFDim}, {&r.hb2, c.FFDim},
	}
	for _, s := range sizes {
		b, err := r.w.be.NewBuffer(n * s.size)
		if err != nil {
			return fmt.Errorf("cannot allocate activations for %d rows on the %s backend: %w", n, r.w.be.Name(), err)
		}
		if *s.b != nil {
			(*s.b).Free()
		}
		*s.b = b
	}
	r.qkv, r.gateUp = [3]backend.Buffer{r.q, r.k, r.v}, [2]backend.Buffer{r.hb, r.hb2}
	r.n = n
	return nil
}

// ensure makes each of bufs hold at least size values, replacing those
// that are smaller.
func (r *run) ensure(size int, bufs ...*backend.Buffer) error {
	for _, b := range bufs {
		if *b != nil && (*b).Len() >= size {
			continue
		}
		nb, err := r.w.be.NewBuffer(size)
		if err != nil {
			return fmt.Errorf("cannot allocate %d activations on the %s backend: %w", size, r.w.be.Name(), err)
		}
		if *b != nil {
			(*b).Free()
		}
		*b = nb
	}
	return nil
}

func (r *run) free() {
	for _, b := range []backend.Buffer{r.x, r.xb, r.q, r.k, r.v, r.att, r.hb, r.hb2, r.logits, r.shiftK, r.shiftV} {
		if b != nil {
			b.Free()
		}
	}
}

// describe fills r's token ids, cache slots, logit rows and attention rows
// for batch b: consecutive rows with equal block tables form one sequence,
// whose table is cut to the blocks its rows reach.
func (r *run) describe(b *Batch, bs int) {
	r.tokens, r.slots, r.out = r.tokens[:0], r.slots[:0], r.out[:0]
	rows := &r.rows
	rows.Pos, rows.Seqs, rows.TableStart, rows.Tables = rows.Pos[:0], rows.Seqs[:0], rows.TableStart[:0], rows.Tables[:0]
	for i, tok := range b.Tokens {
		p := b.Pos[i]
		r.tokens = append(r.tokens, int32(tok))
		rows.Pos = append(rows.Pos, int32(p))
		r.slots = append(r.slots, int32(b.Blocks[i][p/bs]*bs+p%bs))
		if b.Logits[i] {
			r.out = append(r.out, int32(i))
		}
		if i == 0 || !slices.Equal(b.Blocks[i], b.Blocks[i-1]) {
			r.endSeq(b, i, bs)
			rows.Seqs = append(rows.Seqs, int32(i))
		}
	}
	r.endSeq(b, len(b.Tokens), bs)
	rows.Seqs = append(rows.Seqs, int32(len(b.Tokens)))
}

// endSeq closes the sequence whose rows end before row i, if any, by
// appending its block table.
func (r *run) endSeq(b *Batch, i, bs int) {
	rows := &r.rows
	if len(rows.Seqs) == 0 {
		rows.TableStart = append(rows.TableStart, 0)
		return
	}
	first := int(rows.Seqs[len(rows.Seqs)-1])
	last := 0
	for _, p := range b.Pos[first:i] {
		last = max(last, p)
	}
	for _, blk := range b.Blocks[first][:last/bs+1] {
		rows.Tables = append(rows.Tables, int32(blk))
	}
	rows.TableStart = append(rows.TableStart, int32(len(rows.Tables)))
}

// release frees the model's weights and run states on its backend.
func (m *Model) release() {
	m.compute.mu.Lock()
	w, runs := m.compute.w, m.compute.runs
	m.compute.w, m.compute.runs = nil, nil
	m.compute.mu.Unlock()
	for _, r := range runs {
		r.free()
	}
	if w != nil {
		w.free()
	}
}
