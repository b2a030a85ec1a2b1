package quant

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// serialWork is the number of multiply-adds (rows*cols*nx) below which
// MatMul runs on the calling goroutine only: starting goroutines would cost
// more than it saves.
const serialWork = 1 << 16

// maxVec is the most vectors multiplied in one pass over a tile of rows;
// more vectors take several passes, so that the activations a pass reads
// stay in cache.
const maxVec = 32

// MatMul multiplies the weight matrix w, which holds rows rows of cols
// elements of type t, by nx = len(x)/cols activation vectors stored one
// after another in x. It writes out[b*rows+r] = dot(row r of w, vector b),
// so len(out) must be nx*rows.
//
// Rows are shared out among GOMAXPROCS goroutines in chunks. Within a
// chunk, rows are taken in small tiles (eight rows for one vector, two rows
// for several); each block of a tile's rows is unpacked once and multiplied
// by all the vectors, so the cost of unpacking is shared by the batch.
// Every output is computed by the same arithmetic, in the same order, as
// the function DotFunc(t) returns, on the same row and vector, so the
// result for (b, r) is bit-identical to DotFunc's whatever nx is, whatever
// the other vectors are, and however the rows are split.
func MatMul(t Type, w []byte, rows, cols int, x []float32, out []float32) error {
	k, err := kernelFor(t)
	if err != nil {
		return err
	}
	if rows < 0 || cols <= 0 {
		return fmt.Errorf("matmul: bad shape %d rows × %d columns", rows, cols)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("matmul: %w", err)
	}
	if len(w) != rows*rb {
		return fmt.Errorf("matmul: %d rows of %d %s elements take %d bytes, weights have %d", rows, cols, t, rows*rb, len(w))
	}
	if len(x)%cols != 0 {
		return fmt.Errorf("matmul: %d activations are not a whole number of %d-element vectors", len(x), cols)
	}
	nx := len(x) / cols
	if len(out) != nx*rows {
		return fmt.Errorf("matmul: output has %d elements, want %d (%d vectors × %d rows)", len(out), nx*rows, nx, rows)
	}
	if rows == 0 || nx == 0 {
		return nil
	}
	f := k.f
	m := matmul{f: f, w: w, rb: rb, rows: rows, cols: cols, x: x, nx: nx, out: out}
	if f.sumGroup > 0 {
		// Sum each group of activations once for all rows.
		m.ng = cols / f.sumGroup
		sp := sumsPool.Get().(*[]float32)
		defer sumsPool.Put(sp)
		if cap(*sp) < nx*m.ng {
			*sp = make([]float32, nx*m.ng)
		}
		m.sums = (*sp)[:nx*m.ng]
		for b := range nx {
			subSums(x[b*cols:(b+1)*cols], f.sumGroup, m.sums[b*m.ng:(b+1)*m.ng])
		}
	}

	workers := min(runtime.GOMAXPROCS(0), rows)
	if workers < 2 || rows*cols*nx < serialWork {
		m.do(0, rows)
		return nil
	}
	chunk := (max(8, rows/(8*workers)) + 7) &^ 7 // whole 8-row tiles
	var next atomic.Int64
	work := func() {
		for {
			r1 := int(next.Add(int64(chunk)))
			r0 := r1 - chunk
			if r0 >= rows {
				return
			}
			m.do(r0, min(r1, rows))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return nil
}

// sumsPool recycles MatMul's activation-sum buffers.
var sumsPool = sync.Pool{New: func() any { return new([]float32) }}

// matmul is one MatMul call's operands.
type matmul struct {
	f          *format
	sums       []float32 // nx × ng group sums, for types with minimums
	ng         int       // sum groups per vector
	w          []byte
	rb         int // bytes per row
	rows, cols int
	x          []float32
	nx         int
	out        []float32
}

// tileScratch is one goroutine's working memory: the unpacked span of up
// to eight rows (row i at w[i*span:]), the partial products of every (row,
// vector) pair (16 groups each, pair i*nv+v) and their running totals.
type tileScratch struct {
	w   [8 * span]float32
	p   [16 * 2 * maxVec]float32
	acc [2 * maxVec]float32
}

var tilePool = sync.Pool{New: func() any { return new(tileScratch) }}

// do computes rows [r0, r1) for every vector.
func (m *matmul) do(r0, r1 int) {
	s := tilePool.Get().(*tileScratch)
	defer tilePool.Put(s)
	for v0 := 0; v0 < m.nx; v0 += maxVec {
		nv := min(maxVec, m.nx-v0)
		tr := 2 // rows per tile
		if nv == 1 {
			tr = 8
		}
		for r := r0; r < r1; r += tr {
			m.tile(s, r, min(tr, r1-r), v0, nv)
		}
	}
}

// tile computes rows [r, r+nr) for vectors [v0, v0+nv): nr*nv <= 2*maxVec.
func (m *matmul) tile(s *tileScratch, r, nr, v0, nv int) {
	f := m.f
	acc := s.acc[:nr*nv]
	clear(acc)
	for e0 := 0; e0 < m.cols; e0 += span {
		n := min(span, m.cols-e0)
		bo := e0 / f.bs * f.ts
		for i := range nr {
			f.unpack(m.w[(r+i)*m.rb+bo:], n, (*[span]float32)(s.w[i*span:]))
		}
		s.products(nr, nv, n, m.x[v0*m.cols+e0:], m.cols)
		var sums []float32
		if f.sumGroup > 0 {
			sums = m.sums[v0*m.ng+e0/f.sumGroup:]
		}
		for i := range nr {
			f.finish(m.w[(r+i)*m.rb+bo:], n, s.p[16*nv*i:16*nv*(i+1)], sums, m.ng, acc[nv*i:nv*(i+1)])
		}
	}
	for i := range nr {
		for v := range nv {
			m.out[(v0+v)*m.rows+r+i] = acc[nv*i+v]
		}
	}
}

// products fills s.p with the partial products of the nr unpacked rows in
// s.w with nv activation spans of n elements, vector v's at x[v*xs:]. It
// covers the pairs with the widest kernels that fit; any kernel gives the
// same bits for a pair.
func (s *tileScratch) products(nr, nv, n int, x []float32, xs int) {
	ng := n / 16
	if nv == 1 {
		i := 0
		for ; i+4 <= nr; i += 4 {
			s.kernel(i, 4, 0, 1, nv, ng, x, xs)
		}
		for ; i < nr; i++ {
			s.kernel(i, 1, 0, 1, nv, ng, x, xs)
		}
	} else {
		for i := 0; i < nr; i += 2 {
			rows := min(2, nr-i)
			v := 0
			for ; v+4 <= nv; v += 4 {
				s.kernel(i, rows, v, 4, nv, ng, x, xs)
			}
			for ; v+2 <= nv; v += 2 {
				s.kernel(i, rows, v, 2, nv, ng, x, xs)
			}
			for ; v < nv; v++ {
				s.kernel(i, rows, v, 1, nv, ng, x, xs)
			}
		}
	}
	if n%16 != 0 {
		// A short last group (plain types only).
		for i := range nr {
			w := s.w[i*span+16*ng : i*span+n]
			for v := range nv {
				s.p[16*(nv*i+v)+ng] = dotShort(w, x[v*xs+16*ng:])
			}
		}
	}
}

// kernel multiplies rows [i, i+rows) of s.w by vectors [v, v+vecs) over ng
// groups, writing the products to s.p (nv vectors per row).
func (s *tileScratch) kernel(i, rows, v, vecs, nv, ng int, x []float32, xs int) {
	macTile(rows, vecs, s.w[i*span:], span, x[v*xs:], xs, ng, s.p[16*(nv*i+v):], 16*nv)
}
