package native

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Device kinds, numbered as kvscope.h's enum kvs_device_kind.
const (
	DeviceHost  = 0 // this process's memory: libkvscope_cpu
	DeviceCUDA  = 1 // an NVIDIA GPU: libkvscope_cuda
	DeviceMetal = 2 // an Apple GPU: libkvscope_metal
)

// DeviceLibName returns the file name of the device library of kind
// ("cuda" or "metal") on this OS.
func DeviceLibName(kind string) string {
	if kind == "metal" {
		return "libkvscope_metal.dylib"
	}
	if runtime.GOOS == "darwin" {
		return "libkvscope_" + kind + ".dylib"
	}
	return "libkvscope_" + kind + ".so"
}

// devLib holds a library's device-ABI functions (kvscope.h's "devices"
// sections) and the compute functions called on device memory. Device
// pointers are uintptr: memory from kvs_malloc, never Go memory.
type devLib struct {
	kind        func() int32
	name        func(unsafe.Pointer, int64) int32
	malloc      func(int64, unsafe.Pointer) int32
	free        func(uintptr) int32
	h2d         func(uintptr, unsafe.Pointer, int64) int32
	d2h         func(unsafe.Pointer, uintptr, int64) int32
	d2d         func(uintptr, uintptr, int64) int32
	memset      func(uintptr, int32, int64) int32
	sync        func() int32
	lastError   func(unsafe.Pointer, int64) int32
	addBias     func(uintptr, uintptr, int64, int64) int32
	scale       func(uintptr, int64, float32) int32
	geglu       func(uintptr, uintptr, uintptr, int64) int32
	gather      func(uintptr, uintptr, uintptr, int64, int64) int32
	getRows     func(uint32, uintptr, int64, int64, uintptr, int64, uintptr) int32
	kvSupported func(int32, int32) int32
	kvRead      func(p unsafe.Pointer, layer int32, n int64, slots, rows, resid uintptr) int32
	kvWrite     func(p unsafe.Pointer, layer int32, n int64, slots, rows, resid uintptr) int32
	kvCopy      func(unsafe.Pointer, int32, int32) int32
	keyQuant    func(p unsafe.Pointer, n int64, groups, resid uintptr) int32
	keyDequant  func(p unsafe.Pointer, n int64, groups, resid uintptr) int32
	attnScratch func(int64, int32, int32, int32, int32) int64
	attention   func(k, v unsafe.Pointer, layer int32, n int64, heads, head0, head1, window int32, scale float32,
		q, nPos, tables, tableOff, kResid, scratch, out uintptr) int32

	emulated int32 // kvs_emulated: 0 (not exported), 1 for the CUDA library's HIP-CPU build (make cuda-emu), 2 with the sanitizers

	rowBytes func(uint32, int64) int64
	actBytes func(uint32, int64, int64) int64
	quantize func(uint32, uintptr, int64, int64, uintptr) int32
	matmul   func(uint32, uintptr, int64, int64, int64, int64, uintptr, uintptr, int64, uintptr) int32
	rmsnorm  func(uintptr, uintptr, uintptr, int64, int64, float32) int32
	rope     func(uintptr, int64, int64, int64, int64, uintptr, float32, float32, uintptr, int32) int32
	swiglu   func(uintptr, uintptr, uintptr, int64) int32
	add      func(uintptr, uintptr, int64) int32
}

// bindDevice registers the device functions of the library file, which
// open has loaded and checked (its ABI version first).
func bindDevice(file string) (*devLib, error) {
	h, err := purego.Dlopen(file, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("native: cannot load %s: %v", file, err)
	}
	d := &devLib{}
	for _, s := range []struct {
		fn   any
		name string
	}{
		{&d.kind, "kvs_device_kind"}, {&d.name, "kvs_device_name"}, {&d.malloc, "kvs_malloc"},
		{&d.free, "kvs_free"}, {&d.h2d, "kvs_memcpy_h2d"}, {&d.d2h, "kvs_memcpy_d2h"},
		{&d.d2d, "kvs_memcpy_d2d"}, {&d.memset, "kvs_memset"}, {&d.sync, "kvs_synchronize"},
		{&d.lastError, "kvs_last_error"}, {&d.addBias, "kvs_add_bias"}, {&d.scale, "kvs_scale"},
		{&d.geglu, "kvs_geglu"}, {&d.gather, "kvs_gather"}, {&d.getRows, "kvs_get_rows"},
		{&d.kvSupported, "kvs_kv_supported"}, {&d.kvRead, "kvs_kv_read"}, {&d.kvWrite, "kvs_kv_write"},
		{&d.kvCopy, "kvs_kv_copy_block"}, {&d.keyQuant, "kvs_key_quantize"}, {&d.keyDequant, "kvs_key_dequantize"}, {&d.attnScratch, "kvs_attention_scratch"},
		{&d.attention, "kvs_attention"}, {&d.rowBytes, "kvs_row_bytes"}, {&d.actBytes, "kvs_act_bytes"},
		{&d.quantize, "kvs_quantize_acts"}, {&d.matmul, "kvs_matmul"}, {&d.rmsnorm, "kvs_rmsnorm"},
		{&d.rope, "kvs_rope"}, {&d.swiglu, "kvs_swiglu"}, {&d.add, "kvs_add"},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("native: %s lacks the device function %s, so it is not a kvscope ABI %d library (rebuild it)", file, s.name, ABIVersion)
		}
		purego.RegisterFunc(s.fn, p)
	}
	// Only an emulation exports kvs_emulated (native/cuda/device.cu).
	if p, err := purego.Dlsym(h, "kvs_emulated"); err == nil {
		var emulated func() int32
		purego.RegisterFunc(&emulated, p)
		d.emulated = emulated()
	}
	return d, nil
}

// cString returns the NUL-terminated text at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// deviceName returns the library's device name, or the reason it has no
// usable device.
func (d *devLib) deviceName() (string, error) {
	buf := make([]byte, 256)
	rc := d.name(unsafe.Pointer(&buf[0]), int64(len(buf)))
	if rc != 0 {
		return "", fmt.Errorf("%s", cString(buf))
	}
	return cString(buf), nil
}

// errorText returns the library's last failure message.
func (d *devLib) errorText() string {
	buf := make([]byte, 512)
	d.lastError(unsafe.Pointer(&buf[0]), int64(len(buf)))
	return cString(buf)
}

// findLib returns the first of SearchPlaces holding the file name, with
// the place's reason.
func findLib(name string) (string, string, error) {
	places := SearchPlaces()
	if f, p, ok := find(places, name); ok {
		return f, p.Why, nil
	}
	return "", "", fmt.Errorf("native: %w: no %s in %q", ErrNotFound, name, SearchDirs())
}

// OpenDevice loads the device library of kind ("cuda" or "metal") from the
// first of SearchDirs that has it, checks its ABI version, its kind and
// that it has a usable device, and returns the device backend on it. The
// error says in one sentence why it cannot run: no library (wrapping
// ErrNotFound), a library of another version, or no device (no GPU, no
// driver).
func OpenDevice(kind string) (*Device, error) {
	want := map[string]int32{"cuda": DeviceCUDA, "metal": DeviceMetal}[kind]
	if want == 0 {
		return nil, fmt.Errorf("native: unknown device kind %q (want cuda or metal)", kind)
	}
	if kind == "metal" && runtime.GOOS != "darwin" {
		return nil, fmt.Errorf("native: Metal runs only on macOS")
	}
	file, from, err := findLib(DeviceLibName(kind))
	if err != nil {
		how := "make cuda"
		if kind == "metal" {
			how = "make metal"
		}
		return nil, fmt.Errorf("%w (build it with %s)", err, how)
	}
	return openDeviceFile(kind, want, file, from)
}

// OpenDeviceDir is OpenDevice on the library in dir alone.
func OpenDeviceDir(kind, dir string) (*Device, error) {
	want := map[string]int32{"cuda": DeviceCUDA, "metal": DeviceMetal}[kind]
	if want == 0 {
		return nil, fmt.Errorf("native: unknown device kind %q (want cuda or metal)", kind)
	}
	file := filepath.Join(dir, DeviceLibName(kind))
	if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("native: %w: no %s in %s", ErrNotFound, DeviceLibName(kind), dir)
	}
	return openDeviceFile(kind, want, file, "")
}

// openDeviceFile opens the device library file of kind (want: its
// kvs_device_kind), found as from says (a Place's Why, or "").
func openDeviceFile(kind string, want int32, file, from string) (*Device, error) {
	lib, err := open(file)
	if err != nil {
		return nil, err
	}
	lib.from = from
	d, err := bindDevice(file)
	if err != nil {
		return nil, err
	}
	if k := d.kind(); k != want {
		return nil, fmt.Errorf("native: %s is a device library of kind %d, not %s", file, k, kind)
	}
	name, err := d.deviceName()
	if err != nil {
		return nil, fmt.Errorf("native: %s has no usable device: %v", file, err)
	}
	return newDevice(lib, d, kind, name), nil
}

// NewHostDevice returns the device backend running on the CPU library lib
// (a host-kind device library: kvs_malloc is malloc, copies are memcpy).
// It is the CUDA backend's code path (device buffers, weights uploaded
// once, the K/V cache as device copies, every array a device pointer) on
// a machine without a GPU, for tests; the CPU backend (NewBackend) is the
// one to compute with.
func NewHostDevice(lib *Lib) (*Device, error) {
	d, err := bindDevice(lib.File())
	if err != nil {
		return nil, err
	}
	if k := d.kind(); k != DeviceHost {
		return nil, fmt.Errorf("native: %s is a device library of kind %d, not the host library", lib.File(), k)
	}
	name, err := d.deviceName()
	if err != nil {
		return nil, fmt.Errorf("native: %s: %v", lib.File(), err)
	}
	return newDevice(lib, d, "host", name), nil
}
