package quant

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"kvscope/internal/par"
)

// serialWork is the number of multiply-adds (rows*cols*nx) below which
// MatMul runs on the calling goroutine only: starting goroutines would cost
// more than it saves.
const serialWork = 1 << 16

// span is the number of elements of a row multiplied by every vector of a
// tile before the next (and DotFunc's unit of dequantization): one K-quant
// block, eight 32-element blocks.
const span = 256

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
// chunk, rows are taken eight at a time: they are dequantized to float32
// once for all the vectors (up to 32 per pass) and multiplied by them with
// SIMD kernels where the machine has them. Every output is computed by the same arithmetic, in
// the same order, as the function DotFunc(t) returns, on the same row and
// vector, so the result for (b, r) is bit-identical to DotFunc's whatever
// nx is, whatever the other vectors are, and however the rows are split.
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
	m := matmul{dequant: k.dequant, bs: t.BlockSize(), ts: t.TypeSize(), w: w, rb: rb, rows: rows, cols: cols, x: x, nx: nx, out: out}

	workers := min(runtime.GOMAXPROCS(0), rows)
	if workers < 2 || rows*cols*nx < serialWork {
		m.do(0, rows)
		return nil
	}
	chunk := (max(8, rows/(8*workers)) + 7) &^ 7 // whole 8-row tiles
	var next atomic.Int64
	shared := m // only the parallel path moves the operands to the heap
	// A fault reading the weights' mapping (a model file changed on disk)
	// or any other panic in a helper goroutine goes back to the caller's
	// goroutine (par.Run), which may recover it.
	par.Run(workers, func(int) {
		for {
			r1 := int(next.Add(int64(chunk)))
			r0 := r1 - chunk
			if r0 >= rows {
				return
			}
			shared.do(r0, min(r1, rows))
		}
	})
	return nil
}

// matmul is one MatMul call's operands.
type matmul struct {
	dequant    func(src []byte, dst []float32)
	bs, ts     int // elements and bytes per block
	w          []byte
	rb         int // bytes per row
	rows, cols int
	x          []float32
	nx         int
	out        []float32
}

// tileRows is the number of rows in a tile.
const tileRows = 8

// tileScratch is one goroutine's working memory: a tile's rows dequantized
// (row i at w[i*cols:]) and the four-lane running sums of every (row,
// vector) pair of the tile (pair i*nv+v at acc[4*(i*nv+v):]).
type tileScratch struct {
	w   []float32
	acc [4 * tileRows * maxVec]float32
}

var tilePool = sync.Pool{New: func() any { return new(tileScratch) }}

// do computes rows [r0, r1) for every vector.
func (m *matmul) do(r0, r1 int) {
	s := tilePool.Get().(*tileScratch)
	defer tilePool.Put(s)
	if cap(s.w) < tileRows*m.cols {
		s.w = make([]float32, tileRows*m.cols)
	}
	for v0 := 0; v0 < m.nx; v0 += maxVec {
		nv := min(maxVec, m.nx-v0)
		for r := r0; r < r1; r += tileRows {
			m.tile(s, r, min(tileRows, r1-r), v0, nv)
		}
	}
}

// tile computes rows [r, r+nr) for vectors [v0, v0+nv). It dequantizes the
// rows whole, one after another, so that the weights are read as one
// stream, then multiplies them by the vectors a span at a time, so that
// each span of the vectors is read from cache by every row.
func (m *matmul) tile(s *tileScratch, r, nr, v0, nv int) {
	w := s.w[:nr*m.cols]
	for i := range nr {
		m.dequant(m.w[(r+i)*m.rb:(r+i+1)*m.rb], w[i*m.cols:(i+1)*m.cols])
	}
	acc := s.acc[:4*nr*nv]
	clear(acc)
	for e0 := 0; e0 < m.cols; e0 += span {
		n := min(span, m.cols-e0)
		s.products(w[e0:], m.cols, nr, nv, n, m.x[v0*m.cols+e0:], m.cols)
	}
	for i := range nr {
		for v := range nv {
			m.out[(v0+v)*m.rows+r+i] = laneSum(acc[4*(i*nv+v):])
		}
	}
}

// products adds to s.acc the products of nr dequantized rows, row i's n
// elements at w[i*ws:], with nv activation spans of n elements, vector v's
// at x[v*xs:]. It covers the pairs with the widest kernels that fit; any
// kernel gives the same bits for a pair.
func (s *tileScratch) products(w []float32, ws, nr, nv, n int, x []float32, xs int) {
	ng := n / 16
	if nv == 1 {
		i := 0
		for ; i+8 <= nr; i += 8 {
			s.kernel(w, ws, i, 8, 0, 1, nv, ng, x, xs)
		}
		for ; i+4 <= nr; i += 4 {
			s.kernel(w, ws, i, 4, 0, 1, nv, ng, x, xs)
		}
		for ; i < nr; i++ {
			s.kernel(w, ws, i, 1, 0, 1, nv, ng, x, xs)
		}
	} else {
		for i := 0; i < nr; {
			v := 0
			if nr-i >= 4 {
				// Four rows by four or two vectors, then the rest two rows
				// at a time.
				for ; v+4 <= nv; v += 4 {
					s.kernel(w, ws, i, 4, v, 4, nv, ng, x, xs)
				}
				for ; v+2 <= nv; v += 2 {
					s.kernel(w, ws, i, 4, v, 2, nv, ng, x, xs)
				}
				s.pairs(w, ws, i, 2, v, nv, ng, x, xs)
				s.pairs(w, ws, i+2, 2, v, nv, ng, x, xs)
				i += 4
				continue
			}
			rows := min(2, nr-i)
			s.pairs(w, ws, i, rows, 0, nv, ng, x, xs)
			i += rows
		}
	}
	if n%16 != 0 {
		// The last few elements of a plain-type row.
		for i := range nr {
			wi := w[i*ws+16*ng : i*ws+n]
			for v := range nv {
				macTail(wi, x[v*xs+16*ng:], (*[4]float32)(s.acc[4*(i*nv+v):]))
			}
		}
	}
}

// pairs multiplies rows [i, i+rows) of w (rows <= 2) by vectors [v0, nv)
// with the 2×4, 2×2 and 2×1 kernels (or their one-row versions).
func (s *tileScratch) pairs(w []float32, ws, i, rows, v0, nv, ng int, x []float32, xs int) {
	v := v0
	for ; v+4 <= nv; v += 4 {
		s.kernel(w, ws, i, rows, v, 4, nv, ng, x, xs)
	}
	for ; v+2 <= nv; v += 2 {
		s.kernel(w, ws, i, rows, v, 2, nv, ng, x, xs)
	}
	for ; v < nv; v++ {
		s.kernel(w, ws, i, rows, v, 1, nv, ng, x, xs)
	}
}

// kernel multiplies rows [i, i+rows) of w (stride ws) by vectors [v,
// v+vecs) over ng groups of 16 elements, adding to the pairs' sums (nv
// vectors per row).
func (s *tileScratch) kernel(w []float32, ws, i, rows, v, vecs, nv, ng int, x []float32, xs int) {
	macTile(rows, vecs, w[i*ws:], ws, x[v*xs:], xs, ng, s.acc[4*(i*nv+v):], 4*nv)
}

// dotScratch is the working memory of one DotFunc call.
type dotScratch struct {
	w   [span]float32
	acc [4]float32
}

var dotPool = sync.Pool{New: func() any { return new(dotScratch) }}

// dotFunc returns DotFunc(t)'s function: MatMul's arithmetic for one row
// and one vector.
func dotFunc(t Type, dequant func(src []byte, dst []float32)) func(row []byte, x []float32) float32 {
	bs, ts := t.BlockSize(), t.TypeSize()
	return func(row []byte, x []float32) float32 {
		if len(x)%bs != 0 || len(row) != len(x)/bs*ts {
			dotLenPanic(t, len(row), len(x))
		}
		s := dotPool.Get().(*dotScratch)
		defer dotPool.Put(s)
		s.acc = [4]float32{}
		for e0 := 0; e0 < len(x); e0 += span {
			n := min(span, len(x)-e0)
			dequant(row[e0/bs*ts:(e0+n)/bs*ts], s.w[:n])
			ng := n / 16
			macTile(1, 1, s.w[:], span, x[e0:], 0, ng, s.acc[:], 4)
			if n%16 != 0 {
				macTail(s.w[16*ng:n], x[e0+16*ng:], &s.acc)
			}
		}
		return laneSum(s.acc[:])
	}
}

// dotF32 and dotF16 are DotFunc(F32) and DotFunc(F16).
var (
	dotF32 = dotFunc(F32, dequantF32)
	dotF16 = dotFunc(F16, dequantF16)
)
