package backend

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"kvscope/engine/kvstore"
)

// Attention runs in two parallel phases. First every block of every
// sequence with several rows is decoded once, K and V, into call.dec; then
// every row attends, reading those decoded blocks, or, for a sequence of one
// row, decoding its blocks one at a time into a worker's scratch. A row's
// arithmetic is the same either way: scores block by block in position
// order, a softmax over all of them, then the weighted sum of values in
// position order.
func (goBackend) Attention(out Buffer, c Cache, layer int, q Buffer, heads int, r *Rows) {
	st := store(c)
	cfg := st.Config()
	a := callPool.Get().(*attnCall)
	defer callPool.Put(a)
	a.st, a.layer, a.r = st, layer, r
	a.heads, a.kvHeads, a.hd, a.bs = heads, cfg.KVHeads, cfg.HeadDim, cfg.BlockSize
	a.scale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	a.q, a.out = vals(q), vals(out)
	a.plan()
	a.parallel(len(a.units), a.decodeFn)
	a.parallel(len(r.Pos), a.rowFn)
	a.st, a.r, a.q, a.out = nil, nil, nil, nil
}

// attnCall is one Attention call's operands and working memory. Calls take
// one from callPool, so a steady stream of calls of one shape allocates
// nothing.
type attnCall struct {
	st                     *kvstore.Store
	layer                  int
	heads, kvHeads, hd, bs int
	scale                  float32
	q, out                 []float32
	r                      *Rows

	seq    []int32   // seq[i]: row i's sequence
	nPos   []int32   // nPos[s]: positions sequence s attends to (its last row's + 1)
	decOff []int     // decOff[s]: sequence s's decoded K in dec (its V follows), or -1: it streams
	dec    []float32 // decoded blocks: per sequence K then V, each block [kvHead][token][dim]
	units  []unit    // decoding work

	// parallel's state; decodeFn, rowFn and loopFn are bound once.
	n               int
	next            atomic.Int64
	wg              sync.WaitGroup
	fn              func(i int, s *attnScratch)
	decodeFn, rowFn func(i int, s *attnScratch)
	loopFn          func()
}

var callPool = sync.Pool{New: func() any {
	a := new(attnCall)
	a.decodeFn, a.rowFn, a.loopFn = a.decode, a.row, a.loop
	return a
}}

// attnScratch is one worker's memory: a row's scores [head][position] and
// one block of K or V.
type attnScratch struct {
	scores []float32
	buf    []float32
}

var attnPool = sync.Pool{New: func() any { return new(attnScratch) }}

// plan finds each row's sequence and lays out the decoded blocks of the
// sequences with more than one row.
func (a *attnCall) plan() {
	r := a.r
	seqs := len(r.Seqs) - 1
	a.seq = growInt32(a.seq, len(r.Pos))
	a.nPos = growInt32(a.nPos, seqs)
	if cap(a.decOff) < seqs {
		a.decOff = make([]int, seqs)
	}
	a.decOff = a.decOff[:seqs]
	a.units = a.units[:0]
	row := a.kvHeads * a.hd
	size := 0
	for s := range seqs {
		r0, r1 := int(r.Seqs[s]), int(r.Seqs[s+1])
		var n int32
		for i := r0; i < r1; i++ {
			a.seq[i] = int32(s)
			n = max(n, r.Pos[i]+1)
		}
		a.nPos[s] = n
		a.decOff[s] = -1
		if r1-r0 > 1 {
			a.decOff[s] = size
			size += 2 * int(n) * row
			for j := 0; j*a.bs < int(n); j++ {
				a.units = append(a.units, unit{s, j})
			}
		}
	}
	a.dec = grow(a.dec, size)
}

// unit is one block of a sequence to decode.
type unit struct{ s, j int }

// block returns the number of positions of block j that sequence s
// decodes, which is the stride of its decoded K and V heads.
func (a *attnCall) block(s, j int) int { return min(a.bs, int(a.nPos[s])-j*a.bs) }

// decode decodes unit i's block, K and V, into dec.
func (a *attnCall) decode(i int, _ *attnScratch) {
	s, j := a.units[i].s, a.units[i].j
	cnt, row := a.block(s, j), a.kvHeads*a.hd
	blk := int(a.r.Tables[int(a.r.TableStart[s])+j])
	k := a.dec[a.decOff[s]+j*a.bs*row:][:cnt*row]
	v := a.dec[a.decOff[s]+int(a.nPos[s])*row+j*a.bs*row:][:cnt*row]
	a.st.ReadK(a.layer, blk, cnt, k)
	a.st.ReadV(a.layer, blk, cnt, v)
}

// kv returns block j of row i's sequence as K (or V with values), laid out
// [kvHead][token][dim] with stride tokens per head, decoding cnt tokens
// into scratch when the sequence streams.
func (a *attnCall) kv(s, j, cnt int, values bool, sc *attnScratch) (data []float32, stride int) {
	row := a.kvHeads * a.hd
	if off := a.decOff[s]; off >= 0 {
		if values {
			off += int(a.nPos[s]) * row
		}
		stride = a.block(s, j)
		return a.dec[off+j*a.bs*row:][:stride*row], stride
	}
	blk := int(a.r.Tables[int(a.r.TableStart[s])+j])
	data = sc.buf[:cnt*row]
	if values {
		a.st.ReadV(a.layer, blk, cnt, data)
	} else {
		a.st.ReadK(a.layer, blk, cnt, data)
	}
	return data, cnt
}

// row computes row i's attention over positions 0..Pos[i].
func (a *attnCall) row(i int, sc *attnScratch) {
	s := int(a.seq[i])
	hd, group := a.hd, a.heads/a.kvHeads
	nPos := int(a.r.Pos[i]) + 1
	width := a.heads * hd
	q, out := a.q[i*width:(i+1)*width], a.out[i*width:(i+1)*width]
	sc.scores = grow(sc.scores, a.heads*nPos)
	sc.buf = grow(sc.buf, a.kvHeads*a.bs*hd)

	for j := 0; j*a.bs < nPos; j++ {
		cnt := min(a.bs, nPos-j*a.bs)
		kb, stride := a.kv(s, j, cnt, false, sc)
		for h := range a.heads {
			qh := q[h*hd : (h+1)*hd]
			g := h / group
			scores := sc.scores[h*nPos+j*a.bs : h*nPos+j*a.bs+cnt]
			dots(scores, qh, kb[g*stride*hd:], a.scale)
		}
	}
	if w := int(a.r.Window); w > 0 && nPos > w {
		// A sliding window: the positions before it weigh nothing.
		for h := range a.heads {
			for t := range nPos - w {
				sc.scores[h*nPos+t] = float32(math.Inf(-1))
			}
		}
	}
	for h := range a.heads {
		softmax(sc.scores[h*nPos : (h+1)*nPos])
	}
	clear(out)
	for j := 0; j*a.bs < nPos; j++ {
		cnt := min(a.bs, nPos-j*a.bs)
		vb, stride := a.kv(s, j, cnt, true, sc)
		for h := range a.heads {
			oh := out[h*hd : (h+1)*hd]
			g := h / group
			scores := sc.scores[h*nPos+j*a.bs : h*nPos+j*a.bs+cnt]
			weighted(oh, scores, vb[g*stride*hd:])
		}
	}
}

// dots sets scores[t] = (q·k[t])·scale, where key t is k[t*len(q):], each
// dot product summed in dimension order. Four keys go at once, with four
// independent sums, so that the additions' latency overlaps; every sum is
// still the same sequence of float32 operations as one at a time.
func dots(scores, q, k []float32, scale float32) {
	hd := len(q)
	t := 0
	for ; t+4 <= len(scores); t += 4 {
		k0 := k[t*hd : (t+1)*hd]
		k1 := k[(t+1)*hd : (t+2)*hd]
		k2 := k[(t+2)*hd : (t+3)*hd]
		k3 := k[(t+3)*hd : (t+4)*hd]
		var d0, d1, d2, d3 float32
		for d, qv := range q {
			d0 += qv * k0[d]
			d1 += qv * k1[d]
			d2 += qv * k2[d]
			d3 += qv * k3[d]
		}
		scores[t], scores[t+1], scores[t+2], scores[t+3] = d0*scale, d1*scale, d2*scale, d3*scale
	}
	for ; t < len(scores); t++ {
		kt := k[t*hd : (t+1)*hd]
		var dot float32
		for d, qv := range q {
			dot += qv * kt[d]
		}
		scores[t] = dot * scale
	}
}

// weighted adds p[t]·v[t] to out for every t in order, where value t is
// v[t*len(out):]. Four values go at once per dimension, added one after
// another, the same operations as one value at a time.
func weighted(out, p, v []float32) {
	hd := len(out)
	t := 0
	for ; t+4 <= len(p); t += 4 {
		p0, p1, p2, p3 := p[t], p[t+1], p[t+2], p[t+3]
		v0 := v[t*hd : (t+1)*hd]
		v1 := v[(t+1)*hd : (t+2)*hd]
		v2 := v[(t+2)*hd : (t+3)*hd]
		v3 := v[(t+3)*hd : (t+4)*hd]
		for d, o := range out {
			o += p0 * v0[d]
			o += p1 * v1[d]
			o += p2 * v2[d]
			o += p3 * v3[d]
			out[d] = o
		}
	}
	for ; t < len(p); t++ {
		vt := v[t*hd : (t+1)*hd]
		for d := range out {
			out[d] += p[t] * vt[d]
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

// parallel runs fn(i) for i in [0, n) on up to GOMAXPROCS goroutines, the
// caller's among them.
func (a *attnCall) parallel(n int, fn func(int, *attnScratch)) {
	if n == 0 {
		return
	}
	a.n, a.fn = n, fn
	a.next.Store(0)
	workers := min(runtime.GOMAXPROCS(0), n)
	a.wg.Add(workers - 1)
	for range workers - 1 {
		go a.loopFn()
	}
	a.work()
	a.wg.Wait()
}

func (a *attnCall) loop() {
	defer a.wg.Done()
	a.work()
}

func (a *attnCall) work() {
	s := attnPool.Get().(*attnScratch)
	defer attnPool.Put(s)
	for {
		i := int(a.next.Add(1)) - 1
		if i >= a.n {
			return
		}
		a.fn(i, s)
	}
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
