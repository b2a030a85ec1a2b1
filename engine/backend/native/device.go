package native

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"kvscope/engine/backend"
	"kvscope/engine/quant"
)

// Device is engine/backend's interface on a device library (CUDA, Metal,
// or, for tests, the CPU library as a host-kind device): it owns its
// memory. Weights are uploaded once when Weight is called, activation
// buffers and the K/V cache (NewCache) live on the device, and every
// operation runs there on device pointers; per step only token ids,
// positions, slots, block tables and gather rows go up (each uploaded once
// and reused while it does not change) and only what Read asks for (the
// logits) comes down. Operations queue on the library's stream; their
// failures show at the next Read or Sync.
//
// A weight type the library has no kernel for is converted to F16 when it
// is uploaded (Fallbacks says so); a K/V precision it does not store is
// refused by NewCache with the reason.
type Device struct {
	lib     *Lib
	d       *devLib
	kind    string // "cuda", "metal", or "host" (the CPU library, for tests)
	devName string

	mu        sync.Mutex // one operation at a time: the library has one stream
	err       error      // the first failure since the last Read or Sync
	fallbacks map[string]bool
	ints      map[string]*upload   // the last int arrays uploaded, by role
	qx        devMem               // quantized activations
	scratch   devMem               // attention scratch
	freqs     map[*float32]*upload // RoPE frequency factors, by slice
}

func newDevice(lib *Lib, d *devLib, kind, name string) *Device {
	return &Device{lib: lib, d: d, kind: kind, devName: name, fallbacks: map[string]bool{},
		ints: map[string]*upload{}, freqs: map[*float32]*upload{}}
}

// Name is the device kind: "cuda", "metal", or "host-device" for the CPU
// library run as a device.
func (b *Device) Name() string {
	if b.kind == "host" {
		return "host-device"
	}
	return b.kind
}

// DeviceName names the device as its library does.
func (b *Device) DeviceName() string { return b.devName }

// Emulated reports whether the library is the CUDA library built on
// HIP-CPU (make cuda-emu), whose kernels run on the CPU: for testing the
// CUDA code without a GPU, never for speed. DeviceName says so too.
func (b *Device) Emulated() bool { return b.d.emulated != 0 }

// File returns the library's path.
func (b *Device) File() string { return b.lib.File() }

// Fallbacks lists, in no order, what the backend did in another way than
// asked (weights converted to F16).
func (b *Device) Fallbacks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for f := range b.fallbacks {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// host reports whether the library computes on host memory, where calls
// on disjoint outputs may run in parallel goroutines.
func (b *Device) host() bool { return b.kind == "host" }

// fail records an operation's failure for the next Read or Sync; the
// caller holds b.mu.
func (b *Device) fail(op string, err error) {
	if b.err == nil {
		b.err = fmt.Errorf("%s backend: %s: %w", b.Name(), op, err)
	}
}

// check records a library status as a failure of op; the caller holds
// b.mu. It reports whether rc was KVS_OK.
func (b *Device) check(op string, rc int32) bool {
	if rc == 0 {
		return true
	}
	err := status(op, rc)
	if rc == -4 {
		err = fmt.Errorf("native: %s: device failure: %s", op, b.d.errorText())
	}
	b.fail(op, err)
	return false
}

func (b *Device) takeErr() error {
	err := b.err
	b.err = nil
	return err
}

// alloc returns bytes of device memory.
func (b *Device) alloc(bytes int64) (uintptr, error) {
	var p uintptr
	if rc := b.d.malloc(max(bytes, 1), unsafe.Pointer(&p)); rc != 0 {
		msg := "out of range"
		if rc == -4 {
			msg = b.d.errorText()
		}
		return 0, fmt.Errorf("%s backend: cannot allocate %d bytes of device memory: %s", b.Name(), bytes, msg)
	}
	return p, nil
}

// devMem is a growable device scratch allocation.
type devMem struct {
	p    uintptr
	size int64
}

// ensure makes m hold at least n bytes; the caller holds b.mu.
func (b *Device) ensure(m *devMem, n int64) bool {
	if m.size >= n {
		return true
	}
	if m.p != 0 {
		b.d.free(m.p)
		m.p, m.size = 0, 0
	}
	p, err := b.alloc(n + n/4)
	if err != nil {
		b.fail("scratch", err)
		return false
	}
	m.p, m.size = p, n+n/4
	return true
}

// upload is the last int array uploaded for one role (tokens, positions,
// slots, ...): a step's arrays serve every layer, so each goes up once.
type upload struct {
	mem  devMem
	last []byte
}

// uploadInts copies the bytes of vals (int32s or int64s) to the device for
// role, unless they equal the last upload for it, and returns the device
// copy; 0 after a failure. The caller holds b.mu.
func uploadInts[T int32 | int64](b *Device, role string, vals []T) uintptr {
	u := b.ints[role]
	if u == nil {
		u = &upload{}
		b.ints[role] = u
	}
	if len(vals) == 0 {
		vals = make([]T, 1) // a valid pointer for zero rows
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), len(vals)*int(unsafe.Sizeof(vals[0])))
	if u.mem.p != 0 && slices.Equal(u.last, raw) {
		return u.mem.p
	}
	if !b.ensure(&u.mem, int64(len(raw))) {
		return 0
	}
	if !b.check("upload "+role, b.d.h2d(u.mem.p, unsafe.Pointer(&raw[0]), int64(len(raw)))) {
		u.last = u.last[:0]
		return 0
	}
	u.last = append(u.last[:0], raw...)
	return u.mem.p
}

// ---------------------------------------------------------------- buffers

// devBuffer is an activation buffer in device memory.
type devBuffer struct {
	b *Device
	p uintptr
	n int
}

func (x *devBuffer) Len() int { return x.n }

func (x *devBuffer) Free() {
	if x.p != 0 {
		x.b.d.free(x.p)
		x.p = 0
	}
}

// NewBuffer allocates n float32 values of device memory, zeroed.
func (b *Device) NewBuffer(n int) (backend.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("%s backend: a buffer of %d values", b.Name(), n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.alloc(int64(n) * 4)
	if err != nil {
		return nil, err
	}
	if rc := b.d.memset(p, 0, int64(max(n, 1))*4); rc != 0 {
		b.d.free(p)
		return nil, status("memset", rc)
	}
	return &devBuffer{b: b, p: p, n: n}, nil
}

// buf returns x as this backend's buffer holding at least n values, or
// records why not; the caller holds b.mu.
func (b *Device) buf(op string, x backend.Buffer, n int) (uintptr, bool) {
	db, ok := x.(*devBuffer)
	switch {
	case !ok || db.b != b:
		b.fail(op, fmt.Errorf("given a %T buffer, not one of this backend's", x))
	case db.p == 0:
		b.fail(op, fmt.Errorf("given a freed buffer"))
	case n < 0 || db.n < n:
		b.fail(op, fmt.Errorf("a buffer of %d values used for %d", db.n, n))
	default:
		return db.p, true
	}
	return 0, false
}

// Write copies src into dst from value off on.
func (b *Device) Write(dst backend.Buffer, off int, src []float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < 0 {
		b.fail("write", fmt.Errorf("offset %d", off))
		return
	}
	p, ok := b.buf("write", dst, off+len(src))
	if !ok || len(src) == 0 {
		return
	}
	b.check("write", b.d.h2d(p+uintptr(off)*4, unsafe.Pointer(&src[0]), int64(len(src))*4))
}

// Read copies len(dst) values of src from value off on into dst once every
// operation before it is done, and returns the first failure since the
// last Read or Sync.
func (b *Device) Read(dst []float32, src backend.Buffer, off int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < 0 {
		b.fail("read", fmt.Errorf("offset %d", off))
	} else if p, ok := b.buf("read", src, off+len(dst)); ok && len(dst) > 0 {
		b.check("read", b.d.d2h(unsafe.Pointer(&dst[0]), p+uintptr(off)*4, int64(len(dst))*4))
	}
	return b.takeErr()
}

// Sync waits for every operation issued so far and returns the first
// failure since the last Read or Sync.
func (b *Device) Sync() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.check("synchronize", b.d.sync())
	return b.takeErr()
}

// ---------------------------------------------------------------- weights

// devWeight is a weight matrix (and bias) in device memory.
type devWeight struct {
	b          *Device
	t          quant.Type // as stored on the device (F16 for a converted type)
	rows, cols int
	p, bias    uintptr
}

func (w *devWeight) Shape() (rows, cols int) { return w.rows, w.cols }

func (w *devWeight) Free() {
	for _, p := range []*uintptr{&w.p, &w.bias} {
		if *p != 0 {
			w.b.d.free(*p)
			*p = 0
		}
	}
}

// supported reports whether the library multiplies and decodes type t.
func (b *Device) supported(t quant.Type, cols int) bool {
	return b.d.rowBytes(uint32(t), int64(cols)) > 0 && b.d.actBytes(uint32(t), int64(cols), 1) >= 0
}

// uploadChunk is how many bytes of a weight go up at a time, through a Go
// buffer: the model's file is mapped, and a fault reading it is
// recoverable in Go, not in C.
const uploadChunk = 4 << 20

// Weight uploads the matrix (and bias) to device memory. A type the
// library has no kernel for is decoded in Go and uploaded as F16.
func (b *Device) Weight(t quant.Type, rows, cols int, data []byte, bias []float32) (backend.Weight, error) {
	rb, err := t.RowBytes(cols)
	if err != nil || rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("%s backend: a %d×%d %s weight: %v", b.Name(), rows, cols, t, err)
	}
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%s backend: %d rows of %d %s elements take %d bytes, the weight has %d", b.Name(), rows, cols, t, rows*rb, len(data))
	}
	if bias != nil && len(bias) != rows {
		return nil, fmt.Errorf("%s backend: a bias of %d values for %d rows", b.Name(), len(bias), rows)
	}
	st := t
	if !b.supported(t, cols) {
		if !b.supported(quant.F16, cols) {
			return nil, fmt.Errorf("%s backend: no kernel for %s or F16 weights of %d columns", b.Name(), t, cols)
		}
		st = quant.F16
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if st != t {
		b.fallbacks[fmt.Sprintf("%s weights are converted to F16 (no %s kernel in the %s library)", t, t, b.Name())] = true
	}
	size := b.d.rowBytes(uint32(st), int64(cols)) * int64(rows)
	w := &devWeight{b: b, t: st, rows: rows, cols: cols}
	if w.p, err = b.alloc(size); err != nil {
		return nil, err
	}
	chunk := make([]byte, 0, uploadChunk)
	var row []float32
	if st != t {
		row = make([]float32, cols)
	}
	per := max(1, uploadChunk/int(size/int64(rows)))
	for r0 := 0; r0 < rows; r0 += per {
		r1 := min(rows, r0+per)
		chunk = chunk[:0]
		if st == t {
			chunk = append(chunk, data[r0*rb:r1*rb]...)
		} else {
			for r := r0; r < r1; r++ {
				if err := quant.Dequantize(t, data[r*rb:(r+1)*rb], row); err != nil {
					w.Free()
					return nil, fmt.Errorf("%s backend: converting %s weights: %w", b.Name(), t, err)
				}
				for _, v := range row {
					chunk = binary.LittleEndian.AppendUint16(chunk, quant.F32ToF16(v))
				}
			}
		}
		off := uintptr(int64(r0) * (size / int64(rows)))
		if rc := b.d.h2d(w.p+off, unsafe.Pointer(&chunk[0]), int64(len(chunk))); rc != 0 {
			w.Free()
			return nil, fmt.Errorf("%s backend: uploading a weight: %v", b.Name(), status("copy", rc))
		}
	}
	if bias != nil {
		if w.bias, err = b.alloc(int64(rows) * 4); err != nil {
			w.Free()
			return nil, err
		}
		if rc := b.d.h2d(w.bias, unsafe.Pointer(&bias[0]), int64(rows)*4); rc != 0 {
			w.Free()
			return nil, fmt.Errorf("%s backend: uploading a bias: %v", b.Name(), status("copy", rc))
		}
	}
	return w, nil
}

// weight returns w as this backend's weight, or records why not.
func (b *Device) weight(op string, w backend.Weight) (*devWeight, bool) {
	dw, ok := w.(*devWeight)
	if !ok || dw.b != b || dw.p == 0 {
		b.fail(op, fmt.Errorf("given a %T weight that is not a live one of this backend's", w))
		return nil, false
	}
	return dw, true
}

// MatMuls runs one MatMul for each weight.
func (b *Device) MatMuls(outs []backend.Buffer, ws []backend.Weight, x backend.Buffer, n int) {
	for j, w := range ws {
		b.MatMul(outs[j], w, x, n)
	}
}

// MatMul computes out[i] = w·x[i] (+ bias) for n rows on the device,
// quantizing the activations first for quantized weights.
func (b *Device) MatMul(out backend.Buffer, w backend.Weight, x backend.Buffer, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dw, ok := b.weight("matmul", w)
	if !ok || n <= 0 {
		return
	}
	xp, ok1 := b.buf("matmul", x, n*dw.cols)
	op, ok2 := b.buf("matmul", out, n*dw.rows)
	if !ok1 || !ok2 {
		return
	}
	t, rows, cols := uint32(dw.t), int64(dw.rows), int64(dw.cols)
	ab := b.d.actBytes(t, cols, int64(n))
	if ab < 0 {
		b.check("matmul", int32(ab))
		return
	}
	var qx uintptr
	if ab > 0 {
		if !b.ensure(&b.qx, ab) {
			return
		}
		qx = b.qx.p
		if !b.check("quantize activations", b.d.quantize(t, xp, cols, int64(n), qx)) {
			return
		}
	}
	b.lib.split() // the host library's threads
	rc := b.d.matmul(t, dw.p, rows, cols, 0, rows, xp, qx, int64(n), op)
	if b.check("matmul", rc) && dw.bias != 0 {
		b.check("bias", b.d.addBias(op, dw.bias, int64(n), rows))
	}
}

// Embed decodes rows tokens[i] of w into the rows of out.
func (b *Device) Embed(out backend.Buffer, w backend.Weight, tokens []int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dw, ok := b.weight("embed", w)
	if !ok || len(tokens) == 0 {
		return
	}
	op, ok := b.buf("embed", out, len(tokens)*dw.cols)
	if !ok {
		return
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= dw.rows {
			b.fail("embed", fmt.Errorf("token %d (row %d) is outside the %d rows", t, i, dw.rows))
			return
		}
	}
	ids := uploadInts(b, "tokens", tokens)
	if ids != 0 {
		b.check("embed", b.d.getRows(uint32(dw.t), dw.p, int64(dw.rows), int64(dw.cols), ids, int64(len(tokens)), op))
	}
}

// RMSNorm normalizes n rows of dim values on the device.
func (b *Device) RMSNorm(out, x, weight backend.Buffer, n, dim int, eps float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 || dim <= 0 {
		return
	}
	op, ok1 := b.buf("rmsnorm", out, n*dim)
	xp, ok2 := b.buf("rmsnorm", x, n*dim)
	wp, ok3 := b.buf("rmsnorm", weight, dim)
	if ok1 && ok2 && ok3 {
		b.check("rmsnorm", b.d.rmsnorm(op, xp, wp, int64(n), int64(dim), eps))
	}
}

// RoPE rotates every head of each row of x on the device.
func (b *Device) RoPE(x backend.Buffer, heads int, pos []int32, r *backend.Rope) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(pos) == 0 {
		return
	}
	if heads <= 0 || r.HeadDim <= 0 || r.Dims <= 0 || r.Dims > r.HeadDim || r.Dims%2 != 0 || !(r.Base > 0) || !(r.Scale > 0) ||
		(r.Freqs != nil && len(r.Freqs) != r.Dims/2) {
		b.fail("rope", fmt.Errorf("heads %d, head dim %d, rotated %d, base %g, scale %g, %d frequency factors", heads, r.HeadDim, r.Dims, r.Base, r.Scale, len(r.Freqs)))
		return
	}
	xp, ok := b.buf("rope", x, len(pos)*heads*r.HeadDim)
	if !ok {
		return
	}
	pp := uploadInts(b, "positions", pos)
	if pp == 0 {
		return
	}
	var fp uintptr
	if len(r.Freqs) > 0 {
		// Uploaded once per slice (and again should its values change).
		u := b.freqs[&r.Freqs[0]]
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&r.Freqs[0])), 4*len(r.Freqs))
		if u == nil || !slices.Equal(u.last, raw) {
			if u == nil {
				u = &upload{}
				b.freqs[&r.Freqs[0]] = u
			}
			if !b.ensure(&u.mem, int64(len(raw))) || !b.check("rope", b.d.h2d(u.mem.p, unsafe.Pointer(&raw[0]), int64(len(raw)))) {
				u.last = u.last[:0]
				return
			}
			u.last = append(u.last[:0], raw...)
		}
		fp = u.mem.p
	}
	neox := int32(btoi(r.NeoX))
	b.check("rope", b.d.rope(xp, int64(len(pos)), int64(heads), int64(r.HeadDim), int64(r.Dims), pp, r.Base, r.Scale, fp, neox))
}

// elementwise checks and runs an operation on count values of a and b.
func (b *Device) elementwise(op string, x, y backend.Buffer, count int, f func(xp, yp uintptr) int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if count <= 0 {
		return
	}
	xp, ok1 := b.buf(op, x, count)
	yp, ok2 := b.buf(op, y, count)
	if ok1 && ok2 {
		b.check(op, f(xp, yp))
	}
}

// SwiGLU sets gate[i] = silu(gate[i]) * up[i] on the device.
func (b *Device) SwiGLU(gate, up backend.Buffer, count int) {
	b.elementwise("swiglu", gate, up, count, func(g, u uintptr) int32 { return b.d.swiglu(g, g, u, int64(count)) })
}

// GeGLU sets gate[i] = gelu(gate[i]) * up[i] on the device.
func (b *Device) GeGLU(gate, up backend.Buffer, count int) {
	b.elementwise("geglu", gate, up, count, func(g, u uintptr) int32 { return b.d.geglu(g, g, u, int64(count)) })
}

// Add sets x[i] += y[i] on the device.
func (b *Device) Add(x, y backend.Buffer, count int) {
	b.elementwise("add", x, y, count, func(xp, yp uintptr) int32 { return b.d.add(xp, yp, int64(count)) })
}

// Scale sets x[i] *= s on the device.
func (b *Device) Scale(x backend.Buffer, count int, s float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if count <= 0 {
		return
	}
	if xp, ok := b.buf("scale", x, count); ok {
		b.check("scale", b.d.scale(xp, int64(count), s))
	}
}

// Gather copies rows rows[j] of src into rows j of dst on the device.
func (b *Device) Gather(dst, src backend.Buffer, rows []int32, width int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(rows) == 0 || width <= 0 {
		return
	}
	sb, ok := src.(*devBuffer)
	if !ok {
		b.fail("gather", fmt.Errorf("given a %T buffer", src))
		return
	}
	for _, r := range rows {
		if r < 0 || (int(r)+1)*width > sb.n {
			b.fail("gather", fmt.Errorf("row %d of width %d is outside a buffer of %d values", r, width, sb.n))
			return
		}
	}
	dp, ok1 := b.buf("gather", dst, len(rows)*width)
	sp, ok2 := b.buf("gather", src, 0)
	if !ok1 || !ok2 {
		return
	}
	if rp := uploadInts(b, "gather", rows); rp != 0 {
		b.check("gather", b.d.gather(dp, sp, rp, int64(len(rows)), int64(width)))
	}
}

// describe returns one line naming the backend, its device and library.
func (b *Device) describe() string {
	return fmt.Sprintf("%s (%s, %s)", b.Name(), strings.TrimSpace(b.devName), b.lib.Where())
}
