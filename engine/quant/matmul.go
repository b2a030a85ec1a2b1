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

// MatMul multiplies the weight matrix w, which holds rows rows of cols
// elements of type t, by nx = len(x)/cols activation vectors stored one
// after another in x. It writes out[b*rows+r] = dot(row r of w, vector b),
// so len(out) must be nx*rows.
//
// Rows are shared out among GOMAXPROCS goroutines in chunks; each row is
// multiplied by all nx vectors while it is in cache. Every output is
// computed by the same arithmetic as the function DotFunc(t) returns, on the
// same row and vector (for types with block minimums, the sums of groups of
// activations are computed once per call instead of once per row, by the
// same code), so the result for (b, r) is bit-identical to DotFunc's
// whatever nx is and however the rows are split.
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
	m := matmul{dot: k.dot, w: w, rb: rb, rows: rows, cols: cols, x: x, nx: nx, out: out}
	if k.dotSums != nil {
		// Sum each group of activations once for all rows.
		m.dotSums, m.ng = k.dotSums, cols/k.sumGroup
		sp := sumsPool.Get().(*[]float32)
		defer sumsPool.Put(sp)
		if cap(*sp) < nx*m.ng {
			*sp = make([]float32, nx*m.ng)
		}
		m.sums = (*sp)[:nx*m.ng]
		for b := range nx {
			subSums(x[b*cols:(b+1)*cols], k.sumGroup, m.sums[b*m.ng:(b+1)*m.ng])
		}
	}

	workers := min(runtime.GOMAXPROCS(0), rows)
	if workers < 2 || rows*cols*nx < serialWork {
		m.do(0, rows)
		return nil
	}
	chunk := max(4, rows/(8*workers))
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
	dot        func(row []byte, x []float32) float32
	dotSums    func(row []byte, x, sums []float32) float32
	sums       []float32 // nx × ng group sums for dotSums
	ng         int       // groups per vector
	w          []byte
	rb         int // bytes per row
	rows, cols int
	x          []float32
	nx         int
	out        []float32
}

// do computes rows [r0, r1) for every vector.
func (m *matmul) do(r0, r1 int) {
	for r := r0; r < r1; r++ {
		row := m.w[r*m.rb : (r+1)*m.rb]
		for b := 0; b < m.nx; b++ {
			xb := m.x[b*m.cols : (b+1)*m.cols]
			if m.dotSums != nil {
				m.out[b*m.rows+r] = m.dotSums(row, xb, m.sums[b*m.ng:(b+1)*m.ng])
			} else {
				m.out[b*m.rows+r] = m.dot(row, xb)
			}
		}
	}
}
