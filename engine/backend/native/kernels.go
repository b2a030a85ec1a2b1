package native

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"kvscope/engine/quant"
	"kvscope/internal/par"
)

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
// writing out[b*rows+r] = dot(row r, vector b), as quant.MatMul does. The
// library splits the rows among GOMAXPROCS threads. An unimplemented type gives an error
// wrapping ErrUnsupported.
func (l *Lib) MatMul(typ quant.Type, w []byte, rows, cols int, x []float32, n int, out []float32) error {
	if rows < 0 || cols <= 0 || n < 0 {
		return fmt.Errorf("native: matmul: bad shape %d rows × %d columns × %d vectors", rows, cols, n)
	}
	rb := l.rowBytes(uint32(typ), int64(cols))
	if l.actBytes(uint32(typ), int64(cols), int64(n)) == -1 {
		return fmt.Errorf("native: matmul of %s weights: %w", typ, ErrUnsupported)
	}
	if rb <= 0 {
		return fmt.Errorf("native: matmul: %d columns are not a whole number of %s blocks", cols, typ)
	}
	if int64(len(w)) != int64(rows)*rb {
		return fmt.Errorf("native: matmul: %d rows of %d %s elements take %d bytes, weights have %d", rows, cols, typ, int64(rows)*rb, len(w))
	}
	err := l.product(typ, rows, cols, x, n, out, func(qx []byte) int32 {
		rc, _, _ := purego.SyscallN(l.matmulSym, uintptr(typ), uintptr(ptr(w)), uintptr(rows), uintptr(cols), 0, uintptr(rows),
			uintptr(ptr(x)), uintptr(ptr(qx)), uintptr(n), uintptr(ptr(out)))
		return int32(rc)
	})
	runtime.KeepAlive(w)
	return err
}

// product checks the activations and outputs of a product of rows×cols
// weights of typ by n vectors, rounds the activations once and runs call,
// the product of all rows, with the library's threads set to GOMAXPROCS.
func (l *Lib) product(typ quant.Type, rows, cols int, x []float32, n int, out []float32, call func(qx []byte) int32) error {
	if len(x) != n*cols || len(out) != n*rows {
		return fmt.Errorf("native: matmul: %d vectors of %d and %d rows need %d activations and %d outputs, got %d and %d", n, cols, rows, n*cols, n*rows, len(x), len(out))
	}
	ab := l.actBytes(uint32(typ), int64(cols), int64(n))
	if ab < 0 {
		return status("matmul", int32(ab))
	}
	if rows == 0 || n == 0 {
		return nil
	}
	l.split()
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
		rc, _, _ := purego.SyscallN(l.quantizeSym, uintptr(typ), uintptr(ptr(x)), uintptr(cols), uintptr(n), uintptr(ptr(qx)))
		if rc := int32(rc); rc != 0 {
			return status("quantize activations", rc)
		}
	}
	return status("matmul", call(qx))
}

// Packed is a weight matrix in the library's packed layout (kvscope.h's
// kvs_pack: rows interleaved in groups of 16), which MatMulPacked
// multiplies several times faster than the file's layout, with the same
// bits as MatMul.
type Packed struct {
	typ        quant.Type
	rows, cols int
	data       []byte // 64-byte aligned
	mem        any    // what owns data's memory (a *Packed or an arena's chunk)
}

// MaxPackedN is the most matrices MatMulPackedN takes (kvscope.h's
// KVS_MULTI_MAX).
const MaxPackedN = 8

// SameActs reports whether MatMulPackedN can multiply ps together: 2 to
// MaxPackedN matrices of the same columns whose types round activations
// alike (all K-quants, or all 32-element types).
func SameActs(ps []*Packed) bool {
	if len(ps) < 2 || len(ps) > MaxPackedN {
		return false
	}
	for _, p := range ps {
		if p.cols != ps[0].cols || (p.typ.BlockSize() == 256) != (ps[0].typ.BlockSize() == 256) {
			return false
		}
	}
	return true
}

// MatMulPackedN multiplies the same n vectors x by each of ps (SameActs)
// into outs[i] (n×rows of ps[i]), with the bits of one MatMulPacked each,
// in one call: the activations rounded once, and the matrices' rows split
// among the library's threads together (a layer's query, key and value
// products, which one at a time leave the small key and value matrices
// too short to split well).
func (l *Lib) MatMulPackedN(ps []*Packed, x []float32, n int, outs [][]float32) error {
	if !SameActs(ps) || len(outs) != len(ps) {
		return fmt.Errorf("native: matmul of %d packed matrices into %d outputs: they need 2 to %d, of the same columns, rounding activations alike", len(ps), len(outs), MaxPackedN)
	}
	if n < 0 {
		return fmt.Errorf("native: matmul: %d vectors", n)
	}
	var (
		types [MaxPackedN]uint32
		data  [MaxPackedN]unsafe.Pointer
		rows  [MaxPackedN]int64
		out   [MaxPackedN]unsafe.Pointer
	)
	for i, p := range ps {
		if len(outs[i]) != n*p.rows {
			return fmt.Errorf("native: matmul: %d vectors of %d rows need %d outputs, got %d", n, p.rows, n*p.rows, len(outs[i]))
		}
		types[i], data[i], rows[i], out[i] = uint32(p.typ), ptr(p.data), int64(p.rows), ptr(outs[i])
	}
	p0 := ps[0]
	err := l.product(p0.typ, p0.rows, p0.cols, x, n, outs[0], func(qx []byte) int32 {
		rc, _, _ := purego.SyscallN(l.matmulPNSym, uintptr(len(ps)), uintptr(unsafe.Pointer(&types)), uintptr(unsafe.Pointer(&data)),
			uintptr(unsafe.Pointer(&rows)), uintptr(p0.cols), uintptr(ptr(qx)), uintptr(n), uintptr(unsafe.Pointer(&out)))
		return int32(rc)
	})
	runtime.KeepAlive(ps)
	runtime.KeepAlive(outs)
	return err
}

// Arena hands out memory for packed weights from large huge-page
// allocations, one after another, so that a model's many matrices do not
// each round up to whole 2 MiB pages (on TinyLlama that rounding held 250
// MB more than the weights). A chunk is unmapped once no Packed in it is
// reachable. Its methods are safe for concurrent use.
type Arena struct {
	mu  sync.Mutex
	cur *arenaChunk
	off int
}

// mappedBytes counts the bytes of allocPacked's mappings not yet unmapped.
var mappedBytes atomic.Int64

// MappedBytes returns how many bytes of memory mappings the backends hold
// for packed weights and read probes (on Linux; 0 elsewhere, where they are
// Go heap). A mapping is unmapped once the collector finds its owner (the
// packed matrix, or the chunk of an Arena) unreachable: after a model is
// closed, or a load is stopped, and a collection has run.
func MappedBytes() int64 { return mappedBytes.Load() }

// arenaChunk is one allocation of an Arena.
type arenaChunk struct{ b []byte }

// arenaChunkBytes is an Arena's allocation size (a larger matrix gets a
// chunk of its own size). Only the pages written are resident, so a
// chunk's unused end costs at most one huge page.
const arenaChunkBytes = 64 << 20

// alloc returns size bytes, 64-byte aligned, and the chunk owning them.
func (a *Arena) alloc(size int) ([]byte, *arenaChunk) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := (size + 63) &^ 63
	if a.cur == nil || a.off+n > len(a.cur.b) {
		c := &arenaChunk{}
		c.b = allocPacked(max(n, arenaChunkBytes), c)
		a.cur, a.off = c, 0
	}
	b := a.cur.b[a.off : a.off+size : a.off+size]
	a.off += n
	return b, a.cur
}

// Packable reports whether Pack takes weights of type t: Q4_0, Q5_0, Q8_0,
// Q4_K, Q5_K and Q6_K.
func (l *Lib) Packable(t quant.Type) bool { return l.packedBytes(uint32(t), 16, 256) > 0 }

// scratchPool holds Pack's copies of the file's rows (*[]byte), so that a
// model's load reuses a few instead of leaving hundreds to the collector.
var scratchPool sync.Pool

// packScratch is about how many bytes of the file's rows each packing
// goroutine copies at a time before the library packs them: a few hundred
// KB, so that the copy is still in L2 when it is packed.
const packScratch = 256 << 10

// Pack returns the packed form of w (rows×cols weights of type typ, as for
// MatMul), split among GOMAXPROCS goroutines. w may be a mapped file: each
// goroutine copies a run of rows in Go, where a fault reading the mapping
// (the file truncated or rewritten on disk) is recoverable, then the
// library packs the copy. Such a fault is returned as an error naming the
// address. A type without a packed form gives an error wrapping
// ErrUnsupported.
func (l *Lib) Pack(typ quant.Type, w []byte, rows, cols int) (p *Packed, err error) {
	return l.PackIn(nil, typ, w, rows, cols)
}

// PackIn is Pack with the packed copy's memory taken from a (nil: memory
// of its own).
func (l *Lib) PackIn(a *Arena, typ quant.Type, w []byte, rows, cols int) (p *Packed, err error) {
	if !l.Packable(typ) {
		return nil, fmt.Errorf("native: packing %s weights: %w", typ, ErrUnsupported)
	}
	size := l.packedBytes(uint32(typ), int64(rows), int64(cols))
	rb := l.rowBytes(uint32(typ), int64(cols))
	if size <= 0 || rb <= 0 {
		return nil, fmt.Errorf("native: pack: %d rows of %d %s elements do not make a weight matrix", rows, cols, typ)
	}
	if int64(len(w)) != int64(rows)*rb {
		return nil, fmt.Errorf("native: pack: %d rows of %d %s elements take %d bytes, weights have %d", rows, cols, typ, int64(rows)*rb, len(w))
	}
	p = &Packed{typ: typ, rows: rows, cols: cols}
	if a != nil {
		p.data, p.mem = a.alloc(int(size))
	} else {
		p.data, p.mem = allocPacked(int(size), p), nil
	}
	groups := (rows + packRows - 1) / packRows
	nw := min(runtime.GOMAXPROCS(0), groups)
	if size < 1<<20 {
		nw = 1
	}
	per := max(1, packScratch/(packRows*int(rb))) // groups a copy
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			p, err = nil, fmt.Errorf("native: pack: reading the %s weights faulted at %#x (was the model file truncated or rewritten on disk?)", typ, fe.Addr())
		}
	}()
	var failed atomic.Int32
	par.Run(nw, func(k int) {
		g0, g1 := groups*k/nw, groups*(k+1)/nw
		sp, _ := scratchPool.Get().(*[]byte)
		if sp == nil {
			sp = new([]byte)
		}
		defer scratchPool.Put(sp)
		if need := min(per, max(g1-g0, 1)) * packRows * int(rb); cap(*sp) < need {
			*sp = make([]byte, need)
		}
		scratch := (*sp)[:cap(*sp)]
		for g := g0; g < g1; g += per {
			ge := min(g+per, g1)
			src := w[g*packRows*int(rb) : min(ge*packRows, rows)*int(rb)]
			n := copy(scratch, src)
			if rc := l.pack(uint32(typ), int64(rows), int64(cols), int64(g), int64(ge), ptr(scratch[:n]), ptr(p.data)); rc != 0 {
				failed.Store(rc)
			}
		}
	})
	runtime.KeepAlive(p)
	if rc := failed.Load(); rc != 0 {
		return nil, status("pack", rc)
	}
	return p, nil
}

// heapAligned returns size bytes of the Go heap, 64-byte aligned.
func heapAligned(size int) []byte {
	buf := make([]byte, size+63)
	off := int((64 - uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%64) % 64)
	return buf[off : off+size : off+size]
}

// packRows is kvscope.h's KVS_PACK_ROWS.
const packRows = 16

// Shape returns the packed matrix's type, rows and columns.
func (p *Packed) Shape() (typ quant.Type, rows, cols int) { return p.typ, p.rows, p.cols }

// MatMulPacked is MatMul on packed weights: out[b*rows+r] = dot(row r,
// vector b) for the n vectors x[n][cols], the same bits as MatMul on the
// weights p was packed from.
func (l *Lib) MatMulPacked(p *Packed, x []float32, n int, out []float32) error {
	if n < 0 {
		return fmt.Errorf("native: matmul: %d vectors", n)
	}
	err := l.product(p.typ, p.rows, p.cols, x, n, out, func(qx []byte) int32 {
		rc, _, _ := purego.SyscallN(l.matmulPSym, uintptr(p.typ), uintptr(ptr(p.data)), uintptr(p.rows), uintptr(p.cols), 0, uintptr(p.rows),
			uintptr(ptr(qx)), uintptr(n), uintptr(ptr(out)))
		return int32(rc)
	})
	runtime.KeepAlive(p)
	return err
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
	l.split()
	return status("swiglu", l.swiglu(ptr(out), ptr(gate), ptr(up), int64(len(out))))
}

// Add adds y to x element by element.
func (l *Lib) Add(x, y []float32) error {
	l.split()
	if len(x) != len(y) {
		return fmt.Errorf("native: add: %d and %d values differ", len(x), len(y))
	}
	if len(x) == 0 {
		return nil
	}
	return status("add", l.add(ptr(x), ptr(y), int64(len(x))))
}

// Sum64 returns the sum, modulo 2^64, of the words of w, read with the SIMD
// path's widest loads and split among the library's GOMAXPROCS threads: a
// read as fast as this machine reads memory, the bound `kvscope bench`
// sets beside every matrix-vector product (which reads its weights once).
func (l *Lib) Sum64(w []uint64) (uint64, error) {
	l.split()
	var s uint64
	rc := l.sum64(ptr(w), int64(len(w)), unsafe.Pointer(&s))
	runtime.KeepAlive(w)
	return s, status("sum64", rc)
}

// ReadProbe is 256 MiB that Read reads with the library's threads (in
// huge pages where the system gives them, as the packed weights are),
// filled once, so that a benchmark can measure again and again.
type ReadProbe struct {
	l *Lib
	w []uint64
}

// NewReadProbe allocates and fills a ReadProbe.
func (l *Lib) NewReadProbe() *ReadProbe {
	const size = 256 << 20
	p := &ReadProbe{l: l}
	b := allocPacked(size, p) // unmapped once p is unreachable
	p.w = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), size/8)
	for i := range p.w {
		p.w[i] = uint64(i)
	}
	return p
}

// Read returns, in bytes per second, how fast the library's threads read
// memory in one Sum64 pass over the probe.
func (p *ReadProbe) Read() (float64, error) {
	t0 := time.Now()
	if _, err := p.l.Sum64(p.w); err != nil {
		return 0, err
	}
	return float64(8*len(p.w)) / time.Since(t0).Seconds(), nil
}

// WeightBytes returns the bytes of host memory the CPU backend holds for a
// rows×cols weight matrix of type typ whose file bytes are fileBytes: its
// packed copy for a type the library packs (the mapped file's pages are
// given back), else its copy of the file's bytes.
func (l *Lib) WeightBytes(typ quant.Type, rows, cols int, fileBytes int64) int64 {
	if l.Packable(typ) {
		if n := l.packedBytes(uint32(typ), int64(rows), int64(cols)); n > 0 {
			return n
		}
	}
	return fileBytes
}
