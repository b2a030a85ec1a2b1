package native

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"kvscope/engine/quant"
)

// serialWork is the multiply-adds (rows*cols*n) below which MatMul makes one
// C call on the calling goroutine: starting goroutines would cost more.
const serialWork = 1 << 17

// ptr returns the address of s's first element, or nil for an empty slice.
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(s))
}

// actPool holds scratch for quantized activations.
var actPool sync.Pool

// MatMul multiplies the weight matrix w (rows rows of cols elements of type
// typ, the bytes a GGUF tensor holds) by the n activation vectors x[n][cols],
// writing out[b*rows+r] = dot(row r, vector b), as quant.MatMul does. Rows
// are split among GOMAXPROCS goroutines. An unimplemented type gives an error
// wrapping ErrUnsupported.
func (l *Lib) MatMul(typ quant.Type, w []byte, rows, cols int, x []float32, n int, out []float32) error {
	if rows < 0 || cols <= 0 || n < 0 {
		return fmt.Errorf("native: matmul: bad shape %d rows × %d columns × %d vectors", rows, cols, n)
	}
	rb := l.rowBytes(uint32(typ), int64(cols))
	ab := l.actBytes(uint32(typ), int64(cols), int64(n))
	if ab == -1 {
		return fmt.Errorf("native: matmul of %s weights: %w", typ, ErrUnsupported)
	}
	if rb <= 0 || ab < 0 {
		return fmt.Errorf("native: matmul: %d columns are not a whole number of %s blocks", cols, typ)
	}
	if int64(len(w)) != int64(rows)*rb {
		return fmt.Errorf("native: matmul: %d rows of %d %s elements take %d bytes, weights have %d", rows, cols, typ, int64(rows)*rb, len(w))
	}
	if len(x) != n*cols || len(out) != n*rows {
		return fmt.Errorf("native: matmul: %d vectors of %d and %d rows need %d activations and %d outputs, got %d and %d", n, cols, rows, n*cols, n*rows, len(x), len(out))
	}
	if rows == 0 || n == 0 {
		return nil
	}
	var qx []byte
	if ab > 0 {
		bp, _ := actPool.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
		}
		defer actPool.Put(bp)
		if int64(cap(*bp)) < ab {
			*bp = make([]byte, ab)
		}
		qx = (*bp)[:ab]
		if rc := l.quantizeActs(uint32(typ), ptr(x), int64(cols), int64(n), ptr(qx)); rc != 0 {
			return status("quantize activations", rc)
		}
	}
	call := func(r0, r1 int) int32 {
		rc, _, _ := purego.SyscallN(l.matmulSym, uintptr(typ), uintptr(ptr(w)), uintptr(rows), uintptr(cols), uintptr(r0), uintptr(r1),
			uintptr(ptr(x)), uintptr(ptr(qx)), uintptr(n), uintptr(ptr(out)))
		return int32(rc)
	}
	workers := min(runtime.GOMAXPROCS(0), rows)
	if workers < 2 || rows*cols*n < serialWork {
		return status("matmul", call(0, rows))
	}
	chunk := max(8, (rows+4*workers-1)/(4*workers))
	var next atomic.Int64
	var bad atomic.Int32
	work := func() {
		for {
			r1 := int(next.Add(int64(chunk)))
			r0 := r1 - chunk
			if r0 >= rows {
				return
			}
			if rc := call(r0, min(r1, rows)); rc != 0 {
				bad.Store(rc)
			}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	runtime.KeepAlive(w)
	return status("matmul", bad.Load())
}

// DequantRows decodes rows [row0, row1) of w (as for MatMul, cols elements a
// row) into out, (row1-row0)*cols floats: the embedding lookup. The values
// equal quant.Dequantize's bit for bit.
func (l *Lib) DequantRows(typ quant.Type, w []byte, cols, row0, row1 int, out []float32) error {
	rb := l.rowBytes(uint32(typ), int64(cols))
	if rb <= 0 {
		if l.rowBytes(uint32(typ), 256) <= 0 {
			return fmt.Errorf("native: dequantize %s rows: %w", typ, ErrUnsupported)
		}
		return fmt.Errorf("native: dequantize: %d columns are not a whole number of %s blocks", cols, typ)
	}
	if row0 < 0 || row1 < row0 || int64(row1)*rb > int64(len(w)) {
		return fmt.Errorf("native: dequantize: rows %d..%d are outside the %d rows of the weights", row0, row1, int64(len(w))/rb)
	}
	if len(out) != (row1-row0)*cols {
		return fmt.Errorf("native: dequantize: %d rows of %d need %d outputs, got %d", row1-row0, cols, (row1-row0)*cols, len(out))
	}
	if row0 == row1 {
		return nil
	}
	return status("dequantize", l.dequantRows(uint32(typ), ptr(w), int64(cols), int64(row0), int64(row1), ptr(out)))
}

// RMSNorm writes each dim-value row of x, divided by its root mean square
// (with eps) and multiplied by weight, into out (which may be x).
func (l *Lib) RMSNorm(out, x, weight []float32, dim int, eps float32) error {
	if dim <= 0 || len(weight) != dim || len(x)%dim != 0 || len(out) != len(x) {
		return fmt.Errorf("native: rmsnorm: %d inputs, %d outputs and %d weights do not make rows of %d", len(x), len(out), len(weight), dim)
	}
	if len(x) == 0 {
		return nil
	}
	return status("rmsnorm", l.rmsnorm(ptr(out), ptr(x), ptr(weight), int64(len(x)/dim), int64(dim), eps))
}

// RoPE rotates in place the first ropeDim values of each head of x, rows of
// heads*headDim values, row r at position pos[r]: adjacent pairs, or halves
// when neox. freqs, when not nil, holds ropeDim/2 divisors of the angles.
func (l *Lib) RoPE(x []float32, heads, headDim, ropeDim int, pos []int32, base, scale float32, freqs []float32, neox bool) error {
	row := heads * headDim
	if heads <= 0 || headDim <= 0 || ropeDim <= 0 || ropeDim > headDim || ropeDim%2 != 0 || len(x) != len(pos)*row {
		return fmt.Errorf("native: rope: %d values are not %d rows of %d heads × %d (rope dim %d, even, at most the head dim)", len(x), len(pos), heads, headDim, ropeDim)
	}
	if freqs != nil && len(freqs) != ropeDim/2 {
		return fmt.Errorf("native: rope: %d frequency factors, want %d", len(freqs), ropeDim/2)
	}
	if !(base > 0) || !(scale > 0) {
		return fmt.Errorf("native: rope: frequency base %g and scale %g must be positive", base, scale)
	}
	if len(pos) == 0 {
		return nil
	}
	var nx int32
	if neox {
		nx = 1
	}
	return status("rope", l.rope(ptr(x), int64(len(pos)), int64(heads), int64(headDim), int64(ropeDim), ptr(pos), base, scale, ptr(freqs), nx))
}

// SwiGLU writes silu(gate[i])*up[i] into out[i] (out may be gate or up).
func (l *Lib) SwiGLU(out, gate, up []float32) error {
	if len(gate) != len(out) || len(up) != len(out) {
		return fmt.Errorf("native: swiglu: %d outputs, %d gates, %d ups differ", len(out), len(gate), len(up))
	}
	if len(out) == 0 {
		return nil
	}
	return status("swiglu", l.swiglu(ptr(out), ptr(gate), ptr(up), int64(len(out))))
}

// Add adds y to x element by element.
func (l *Lib) Add(x, y []float32) error {
	if len(x) != len(y) {
		return fmt.Errorf("native: add: %d and %d values differ", len(x), len(y))
	}
	if len(x) == 0 {
		return nil
	}
	return status("add", l.add(ptr(x), ptr(y), int64(len(x))))
}
