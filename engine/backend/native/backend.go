package native

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// Backend is the native CPU library behind engine/backend's interface. It
// is a host backend: buffers, weights and the K/V pool are the Go backend's
// (Go slices, the mapped file's bytes, a *kvstore.Store), so it hands to C
// only the operations it computes faster (matmul, RMSNorm, RoPE, SwiGLU,
// add, K/V writes, paged attention) and leaves the rest (embedding rows,
// gathers, reads) to Go. A weight type or K/V precision the library lacks
// falls back to Go for that tensor or pool, and Fallbacks says which.
type Backend struct {
	backend.Backend // the Go backend: handles and the operations kept in Go
	lib             *Lib

	mu        sync.Mutex
	err       error           // the first failure since the last Read or Sync
	fallbacks map[string]bool // what fell back to Go, once each
	goTypes   map[quant.Type]bool
	goWrites  map[kvstore.Precision]bool
	packed    map[packKey]*Packed // by the bytes packed, so a tied matrix is packed once
	arena     Arena               // the packed weights' memory
}

// packKey names a packed matrix by its first byte's address and its shape.
type packKey struct {
	addr       uintptr
	typ        quant.Type
	rows, cols int
}

// NewBackend returns the backend computing with lib.
func NewBackend(lib *Lib) *Backend {
	return &Backend{Backend: backend.Go(), lib: lib, fallbacks: map[string]bool{},
		goTypes: map[quant.Type]bool{}, goWrites: map[kvstore.Precision]bool{}, packed: map[packKey]*Packed{}}
}

// Weight copies the matrix's bytes (and bias) into memory of its own before
// handing them to C. The model's file is memory-mapped: a read of a page the
// file lost on disk (truncated or rewritten while in use) faults, and a
// fault inside C code kills the process, where Go code can recover it
// (debug.SetPanicOnFault). With a copy, a change on disk cannot reach the
// computation at all. Weights of a type the library packs (Q4_0, Q5_0,
// Q8_0, Q4_K, Q5_K, Q6_K) are not copied as they are: they are packed here,
// at load (Lib.Pack, its reads of the file in Go, split among GOMAXPROCS
// goroutines; a fault is the error returned), C reads only the packed
// form, and the mapped pages of the file's bytes are given back to the
// system (releaseMapped), so that the process holds one copy of the
// weights. The file's bytes still serve Go's Embed, paged in again as rows
// are read. Data that is the same bytes as an earlier weight's (a tied
// embedding and output) shares its packed copy.
func (b *Backend) Weight(t quant.Type, rows, cols int, data []byte, bias []float32) (backend.Weight, error) {
	own := data
	var p *Packed
	var key packKey
	if b.lib.Packable(t) && len(data) > 0 {
		key = packKey{uintptr(unsafe.Pointer(unsafe.SliceData(data))), t, rows, cols}
		b.mu.Lock()
		p = b.packed[key]
		b.mu.Unlock()
		if p == nil {
			var err error
			if p, err = b.lib.PackIn(&b.arena, t, data, rows, cols); err != nil {
				return nil, err
			}
			releaseMapped(data)
			b.mu.Lock()
			b.packed[key] = p
			b.mu.Unlock()
		}
	} else {
		own = make([]byte, len(data))
		copy(own, data)
	}
	var ob []float32
	if bias != nil {
		ob = append([]float32(nil), bias...)
	}
	w, err := b.Backend.Weight(t, rows, cols, own, ob)
	if err != nil {
		return nil, err
	}
	nw := &weight{Weight: w, b: b, key: key}
	nw.packed.Store(p)
	return nw, nil
}

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Lib returns the library the backend computes with.
func (b *Backend) Lib() *Lib { return b.lib }

// Fallbacks lists, in no order, what this backend handed back to Go
// because the library lacks it (a weight type, a K/V precision's writes).
func (b *Backend) Fallbacks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for f := range b.fallbacks {
		out = append(out, f)
	}
	return out
}

// fail records an operation's failure for the next Read or Sync.
func (b *Backend) fail(op string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = fmt.Errorf("native %s: %w", op, err)
	}
}

func (b *Backend) takeErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.err
	b.err = nil
	return err
}

// Read copies values out (see backend.Backend) and reports the first
// failure since the last Read or Sync.
func (b *Backend) Read(dst []float32, src backend.Buffer, off int) error {
	if err := b.takeErr(); err != nil {
		return err
	}
	return b.Backend.Read(dst, src, off)
}

// Sync reports the first failure since the last Read or Sync.
func (b *Backend) Sync() error { return b.takeErr() }

// weight is the backend's Weight: the Go backend's (the file's bytes in
// place, for Embed and the Go fallback) and, for a type the library packs,
// the packed copy MatMul multiplies.
type weight struct {
	backend.Weight
	packed atomic.Pointer[Packed]
	b      *Backend
	key    packKey // in b.packed, while packed is not nil
}

// Free drops the packed copy and the Go handle.
func (w *weight) Free() {
	if w.packed.Swap(nil) != nil {
		w.b.mu.Lock()
		delete(w.b.packed, w.key)
		w.b.mu.Unlock()
	}
	w.Weight.Free()
}

// goWeight returns the Go backend's handle behind w.
func goWeight(w backend.Weight) backend.Weight {
	if nw, ok := w.(*weight); ok {
		return nw.Weight
	}
	return w
}

// Embed decodes embedding rows in Go.
func (b *Backend) Embed(out backend.Buffer, w backend.Weight, tokens []int32) {
	b.Backend.Embed(out, goWeight(w), tokens)
}

// MatMul multiplies in C (on the packed copy of the weights made at load,
// for the types the library packs), or in Go for a weight type the library
// lacks.
func (b *Backend) MatMul(out backend.Buffer, w backend.Weight, x backend.Buffer, n int) {
	gw := goWeight(w)
	t, rows, cols, data, bias := backend.HostWeight(gw)
	b.mu.Lock()
	inGo := b.goTypes[t]
	b.mu.Unlock()
	if !inGo {
		o := backend.HostFloats(out)[:n*rows]
		xs := backend.HostFloats(x)[:n*cols]
		var err error
		if nw, ok := w.(*weight); ok && nw.packed.Load() != nil {
			err = b.lib.MatMulPacked(nw.packed.Load(), xs, n, o)
		} else {
			err = b.lib.MatMul(t, data, rows, cols, xs, n, o)
		}
		switch {
		case err == nil:
			addBias(o, rows, bias)
			return
		case errors.Is(err, ErrUnsupported):
			b.mu.Lock()
			b.goTypes[t] = true
			b.fallbacks[fmt.Sprintf("%s weights multiply in Go", t)] = true
			b.mu.Unlock()
		default:
			b.fail("matmul", err)
			return
		}
	}
	b.Backend.MatMul(out, gw, x, n)
}

// MatMuls multiplies x by every weight in one call into the library when
// each has a packed copy and their types round activations alike
// (Lib.MatMulPackedN: the threads split all their rows together); else
// it runs one MatMul each.
func (b *Backend) MatMuls(outs []backend.Buffer, ws []backend.Weight, x backend.Buffer, n int) {
	var pa [MaxPackedN]*Packed
	var oa [MaxPackedN][]float32
	ps, po := pa[:0], oa[:0]
	for j, w := range ws {
		nw, ok := w.(*weight)
		if !ok || nw.packed.Load() == nil || len(ps) == MaxPackedN {
			break
		}
		p := nw.packed.Load()
		ps, po = append(ps, p), append(po, backend.HostFloats(outs[j])[:n*p.rows])
	}
	if len(ps) < len(ws) || !SameActs(ps) {
		for j, w := range ws {
			b.MatMul(outs[j], w, x, n)
		}
		return
	}
	if err := b.lib.MatMulPackedN(ps, backend.HostFloats(x)[:n*ps[0].cols], n, po); err != nil {
		b.fail("matmul", err)
		return
	}
	for j, w := range ws {
		_, rows, _, _, bias := backend.HostWeight(goWeight(w))
		addBias(po[j], rows, bias)
	}
}

// addBias adds bias (nil: none) to each rows-value row of o.
func addBias(o []float32, rows int, bias []float32) {
	for r := 0; r < len(o) && bias != nil; r += rows {
		row := o[r : r+rows]
		for i, v := range bias {
			row[i] += v
		}
	}
}

// RMSNorm normalizes n rows of dim values in C.
func (b *Backend) RMSNorm(out, x, weight backend.Buffer, n, dim int, eps float32) {
	o, xs := backend.HostFloats(out)[:n*dim], backend.HostFloats(x)[:n*dim]
	if err := b.lib.RMSNorm(o, xs, backend.HostFloats(weight)[:dim], dim, eps); err != nil {
		b.fail("rmsnorm", err)
	}
}

// RoPE rotates in C.
func (b *Backend) RoPE(x backend.Buffer, heads int, pos []int32, r *backend.Rope) {
	xs := backend.HostFloats(x)[:len(pos)*heads*r.HeadDim]
	if err := b.lib.RoPE(xs, heads, r.HeadDim, r.Dims, pos, r.Base, r.Scale, r.Freqs, r.NeoX); err != nil {
		b.fail("rope", err)
	}
}

// SwiGLU runs in C, split among the library's threads when there is
// enough of it.
func (b *Backend) SwiGLU(gate, up backend.Buffer, count int) {
	g, u := backend.HostFloats(gate)[:count], backend.HostFloats(up)[:count]
	if err := b.lib.SwiGLU(g, g, u); err != nil {
		b.fail("swiglu", err)
	}
}

// Add runs in C.
func (b *Backend) Add(x, y backend.Buffer, count int) {
	if err := b.lib.Add(backend.HostFloats(x)[:count], backend.HostFloats(y)[:count]); err != nil {
		b.fail("add", err)
	}
}

// WriteKV writes in C, or in Go for keys the library does not quantize
// (int8 and int4 keys, quantized across a block's tokens).
func (b *Backend) WriteKV(c backend.Cache, layer int, k, v backend.Buffer, slots []int32) {
	st := backend.HostStore(c)
	cfg := st.Config()
	row := cfg.KVHeads * cfg.HeadDim
	b.mu.Lock()
	inGo := b.goWrites[cfg.K] || b.goWrites[cfg.V]
	b.mu.Unlock()
	if !inGo {
		err := b.lib.WriteKV(st, layer, backend.HostFloats(k)[:len(slots)*row], backend.HostFloats(v)[:len(slots)*row], slots)
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrUnsupported):
			b.mu.Lock()
			b.goWrites[cfg.K], b.goWrites[cfg.V] = true, true
			b.fallbacks[fmt.Sprintf("K %s / V %s writes run in Go", cfg.K, cfg.V)] = true
			b.mu.Unlock()
		default:
			b.fail("K/V write", err)
			return
		}
	}
	b.Backend.WriteKV(c, layer, k, v, slots)
}

// Attention runs in C, reading K and V in place from the store's blocks.
func (b *Backend) Attention(out backend.Buffer, c backend.Cache, layer int, q backend.Buffer, heads int, r *backend.Rows) {
	st := backend.HostStore(c)
	cfg := st.Config()
	w := heads * cfg.HeadDim
	scale := float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	err := b.lib.AttentionRows(st, layer, heads, int(r.Window), scale, backend.HostFloats(q)[:len(r.Pos)*w], r.Pos, r.Seqs, r.TableStart, r.Tables, backend.HostFloats(out)[:len(r.Pos)*w])
	if err != nil {
		b.fail("attention", err)
	}
}
