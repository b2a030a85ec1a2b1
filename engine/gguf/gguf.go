package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"unsafe"

	"kvscope/engine/quant"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the alignment of tensor data when a file does not set
// general.alignment.
const DefaultAlignment = 32

// maxDims is the most dimensions a ggml tensor can have.
const maxDims = 4

// maxNesting bounds how deeply arrays may nest inside arrays.
const maxNesting = 8

// ValueType is the type tag of a metadata value.
type ValueType uint32

// The metadata value types of the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String returns the specification's name for the type, such as "uint32".
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// fixedSize returns the encoded size of a scalar value of type t, or 0 for
// strings, arrays and unknown types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata key and its value. Value holds the Go type matching the
// value type: uint8, int8, uint16, int16, uint32, int32, float32, bool,
// string, uint64, int64 or float64; an array of scalars is a slice of that
// type ([]string, []int32, ...), and an array of arrays is []any.
type KV struct {
	Key   string
	Type  ValueType
	Value any
}

// TensorInfo describes one tensor of the file.
type TensorInfo struct {
	// Name is the tensor's name, such as "blk.0.attn_q.weight".
	Name string
	// Dims is the shape in ggml order: Dims[0] is the length of a row
	// (the fastest-varying dimension).
	Dims []uint64
	// Type is the element type.
	Type quant.Type
	// Offset is the position of the tensor's bytes within the data section.
	Offset uint64
	// Size is the tensor's size in bytes.
	Size uint64
}

// Elements returns the number of elements of the tensor.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is an opened GGUF file. Its methods are safe for concurrent use; the
// slices returned by TensorData are valid until Close.
type File struct {
	// Version is the GGUF version, 2 or 3.
	Version uint32
	// KVs are the metadata pairs in file order.
	KVs []KV
	// Tensors are the tensor descriptions in file order.
	Tensors []TensorInfo
	// Alignment is the alignment of the data section and of each tensor.
	Alignment uint64
	// DataOffset is the file offset where the data section starts.
	DataOffset uint64
	// Path is the file's path when Open mapped it ("" for Parse).
	Path string

	data    []byte // the whole file
	unmap   func() error
	kv      map[string]int
	tensors map[string]int
}

// Open maps the GGUF file at path and parses it. Close releases it.
func Open(path string) (*File, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.unmap = unmap
	f.Path = path
	return f, nil
}

// Fault returns an error naming the file when r, a value recovered from a
// panic, is a memory fault inside f's mapping: the file was truncated or
// rewritten on disk while in use, and a read of the missing pages faulted
// (a goroutine that sets debug.SetPanicOnFault gets such a panic instead
// of a crash). It returns nil for any other value.
func (f *File) Fault(r any) error {
	fe, ok := r.(interface{ Addr() uintptr })
	if !ok || len(f.data) == 0 {
		return nil
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
	if a := fe.Addr(); a < start || a >= start+uintptr(len(f.data)) {
		return nil
	}
	name := f.Path
	if name == "" {
		name = "the model file"
	}
	return fmt.Errorf("%s changed on disk while in use (it was truncated or overwritten); reading its weights failed, so the model stopped: load it again", name)
}

// Close releases the file's mapping. Tensor data must not be used after it.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	f.data = nil
	return err
}

// FormatError describes what is wrong with a GGUF file and where.
type FormatError struct {
	Offset int64  // byte offset in the file where the problem was found
	What   string // what was being read
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed GGUF at byte %d (%s): %s", e.Offset, e.What, e.Msg)
}

// reader walks the header with bounds checks; every failure is a FormatError.
type reader struct {
	b    []byte
	off  int
	what string
}

func (r *reader) fail(format string, args ...any) error {
	return &FormatError{Offset: int64(r.off), What: r.what, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) need(n int) error {
	if n < 0 || n > r.remaining() {
		return r.fail("needs %d bytes but only %d remain in the file (truncated?)", n, r.remaining())
	}
	return nil
}

func (r *reader) u8() (uint8, error) {
	if err := r.need(1); err != nil {
		return 0, err
	}
	v := r.b[r.off]
	r.off++
	return v, nil
}

func (r *reader) u16() (uint16, error) {
	if err := r.need(2); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v, nil
}

func (r *reader) u32() (uint32, error) {
	if err := r.need(4); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64() (uint64, error) {
	if err := r.need(8); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// count reads a uint64 count of items each at least minSize bytes long and
// checks that the rest of the file could hold them.
func (r *reader) count(minSize int) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()/minSize) {
		r.off -= 8
		return 0, r.fail("count %d is impossible: %d items of at least %d bytes cannot fit in the %d bytes left", n, n, minSize, r.remaining()-8)
	}
	return int(n), nil
}

func (r *reader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(r.remaining()) {
		r.off -= 8
		return "", r.fail("string length %d runs past the end of the file (%d bytes left)", n, r.remaining()-8)
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func (r *reader) scalar(t ValueType) (any, error) {
	switch t {
	case TypeUint8:
		return r.u8()
	case TypeInt8:
		v, err := r.u8()
		return int8(v), err
	case TypeUint16:
		return r.u16()
	case TypeInt16:
		v, err := r.u16()
		return int16(v), err
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		v, err := r.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := r.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := r.u8()
		if err == nil && v > 1 {
			r.off--
			return nil, r.fail("bool value %d is neither 0 nor 1", v)
		}
		return v == 1, err
	case TypeString:
		return r.str()
	case TypeUint64:
		return r.u64()
	case TypeInt64:
		v, err := r.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := r.u64()
		return math.Float64frombits(v), err
	}
	return nil, r.fail("unknown metadata value type %d", uint32(t))
}

func (r *reader) value(t ValueType, depth int) (any, error) {
	if t != TypeArray {
		return r.scalar(t)
	}
	if depth >= maxNesting {
		return nil, r.fail("arrays nested more than %d deep", maxNesting)
	}
	et32, err := r.u32()
	if err != nil {
		return nil, err
	}
	et := ValueType(et32)
	minSize := et.fixedSize()
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if minSize == 0 {
		r.off -= 4
		return nil, r.fail("unknown array element type %d", et32)
	}
	n, err := r.count(minSize)
	if err != nil {
		return nil, err
	}
	switch et {
	case TypeUint8:
		return readSlice(r, n, func() (uint8, error) { return r.u8() })
	case TypeInt8:
		return readSlice(r, n, func() (int8, error) { v, err := r.u8(); return int8(v), err })
	case TypeUint16:
		return readSlice(r, n, func() (uint16, error) { return r.u16() })
	case TypeInt16:
		return readSlice(r, n, func() (int16, error) { v, err := r.u16(); return int16(v), err })
	case TypeUint32:
		return readSlice(r, n, func() (uint32, error) { return r.u32() })
	case TypeInt32:
		return readSlice(r, n, func() (int32, error) { v, err := r.u32(); return int32(v), err })
	case TypeFloat32:
		return readSlice(r, n, func() (float32, error) { v, err := r.u32(); return math.Float32frombits(v), err })
	case TypeUint64:
		return readSlice(r, n, func() (uint64, error) { return r.u64() })
	case TypeInt64:
		return readSlice(r, n, func() (int64, error) { v, err := r.u64(); return int64(v), err })
	case TypeFloat64:
		return readSlice(r, n, func() (float64, error) { v, err := r.u64(); return math.Float64frombits(v), err })
	case TypeBool:
		return readSlice(r, n, func() (bool, error) {
			v, err := r.scalar(TypeBool)
			b, _ := v.(bool)
			return b, err
		})
	case TypeString:
		return readSlice(r, n, r.str)
	default: // TypeArray
		// Each element is itself an array: element type, count, values.
		return readSlice(r, n, func() (any, error) { return r.value(TypeArray, depth+1) })
	}
}

func readSlice[T any](r *reader, n int, next func() (T, error)) ([]T, error) {
	s := make([]T, n)
	for i := range s {
		v, err := next()
		if err != nil {
			return nil, err
		}
		s[i] = v
	}
	return s, nil
}

// Parse parses a whole GGUF file held in data. The File refers to data; it
// must not change while the File is used.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data, what: "header"}
	if len(data) < 4 || string(data[:4]) != Magic {
		n := min(len(data), 4)
		return nil, r.fail("not a GGUF file: starts with %q, want %q", data[:n], Magic)
	}
	r.off = 4
	version, err := r.u32()
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, &FormatError{Offset: 4, What: "header", Msg: "GGUF version 1 is obsolete and not supported; convert the model again with a current llama.cpp"}
	case version&0xffff == 0 && version>>16 != 0:
		return nil, &FormatError{Offset: 4, What: "header", Msg: "big-endian GGUF files are not supported"}
	case version != 2 && version != 3:
		return nil, &FormatError{Offset: 4, What: "header", Msg: fmt.Sprintf("unsupported GGUF version %d (want 2 or 3)", version)}
	}
	f := &File{Version: version, data: data, kv: map[string]int{}, tensors: map[string]int{}}

	// A tensor info takes at least 8 (name length) + 4 (dims) + 8 (a dim) + 4 (type) + 8 (offset) bytes.
	r.what = "tensor count"
	nTensors, err := r.count(32)
	if err != nil {
		return nil, err
	}
	// A key/value pair takes at least 8 (key length) + 4 (type) + 1 byte.
	r.what = "metadata count"
	nKV, err := r.count(13)
	if err != nil {
		return nil, err
	}

	f.KVs = make([]KV, 0, nKV)
	for i := range nKV {
		r.what = fmt.Sprintf("metadata pair %d", i)
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		r.what = fmt.Sprintf("metadata %q", key)
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		v, err := r.value(ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		if _, dup := f.kv[key]; dup {
			return nil, r.fail("duplicate metadata key %q", key)
		}
		f.kv[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Type: ValueType(t), Value: v})
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := toUint(v)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, &FormatError{Offset: int64(r.off), What: "metadata general.alignment", Msg: fmt.Sprintf("alignment %v is not a power of two up to 1 MiB", v)}
		}
		f.Alignment = a
	}

	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := range nTensors {
		r.what = fmt.Sprintf("tensor info %d", i)
		name, err := r.str()
		if err != nil {
			return nil, err
		}
		r.what = fmt.Sprintf("tensor %q", name)
		nd, err := r.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			r.off -= 4
			return nil, r.fail("%d dimensions (want 1 to %d)", nd, maxDims)
		}
		dims := make([]uint64, nd)
		elems := uint64(1)
		for d := range dims {
			if dims[d], err = r.u64(); err != nil {
				return nil, err
			}
			if dims[d] == 0 || dims[d] > uint64(len(data))*8 || elems > math.MaxUint64/dims[d] {
				r.off -= 8
				return nil, r.fail("dimension %d of size %d is impossible for a %d-byte file", d, dims[d], len(data))
			}
			elems *= dims[d]
		}
		tt, err := r.u32()
		if err != nil {
			return nil, err
		}
		typ := quant.Type(tt)
		if !typ.Known() {
			r.off -= 4
			return nil, r.fail("unknown tensor type %d", tt)
		}
		off, err := r.u64()
		if err != nil {
			return nil, err
		}
		bs := uint64(typ.BlockSize())
		if dims[0]%bs != 0 {
			return nil, r.fail("row length %d is not a multiple of the %s block size %d", dims[0], typ, bs)
		}
		if elems/bs > uint64(len(data))/uint64(typ.TypeSize()) {
			return nil, r.fail("%d elements of %s need more bytes than the %d-byte file holds", elems, typ, len(data))
		}
		if _, dup := f.tensors[name]; dup {
			return nil, r.fail("duplicate tensor name")
		}
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, TensorInfo{Name: name, Dims: dims, Type: typ, Offset: off, Size: elems / bs * uint64(typ.TypeSize())})
	}

	r.what = "data section"
	start := (uint64(r.off) + f.Alignment - 1) / f.Alignment * f.Alignment
	if nTensors > 0 && start > uint64(len(data)) {
		return nil, r.fail("the data section would start at byte %d, past the end of the %d-byte file", start, len(data))
	}
	f.DataOffset = start
	dataLen := uint64(len(data)) - min(start, uint64(len(data)))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return nil, &FormatError{Offset: int64(start), What: fmt.Sprintf("tensor %q", t.Name), Msg: fmt.Sprintf("data offset %d is not aligned to %d", t.Offset, f.Alignment)}
		}
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return nil, &FormatError{Offset: int64(start), What: fmt.Sprintf("tensor %q", t.Name), Msg: fmt.Sprintf("data at offset %d, %d bytes, lies outside the %d-byte data section (truncated file?)", t.Offset, t.Size, dataLen)}
		}
	}
	// Tensors must not share bytes, so that the sum of their sizes (and so
	// whatever a loader makes from them) is bounded by the file's size.
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return f.Tensors[order[i]].Offset < f.Tensors[order[j]].Offset })
	for i := 1; i < len(order); i++ {
		a, b := &f.Tensors[order[i-1]], &f.Tensors[order[i]]
		if a.Offset+a.Size > b.Offset {
			return nil, &FormatError{Offset: int64(start), What: fmt.Sprintf("tensor %q", b.Name), Msg: fmt.Sprintf("data at offset %d overlaps tensor %q (offset %d, %d bytes)", b.Offset, a.Name, a.Offset, a.Size)}
		}
	}
	return f, nil
}

// TensorData returns the bytes of a tensor of this file, without copying.
func (f *File) TensorData(t *TensorInfo) []byte {
	s := f.DataOffset + t.Offset
	return f.data[s : s+t.Size : s+t.Size]
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Get returns the value of a metadata key (see KV for its Go types).
func (f *File) Get(key string) (any, bool) {
	i, ok := f.kv[key]
	if !ok {
		return nil, false
	}
	return f.KVs[i].Value, true
}

// Keys returns the metadata keys in sorted order.
func (f *File) Keys() []string {
	keys := make([]string, 0, len(f.kv))
	for k := range f.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Get(key)
	s, ok := v.(string)
	return s, ok
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Get(key)
	b, ok := v.(bool)
	return b, ok
}

// Uint returns an integer value of any integer type that is not negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return toUint(v)
}

// Int returns an integer value of any integer type that fits in an int64.
func (f *File) Int(key string) (int64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	u, ok := toUint(v)
	if !ok || u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// Float returns a numeric value of any type as a float64.
func (f *File) Float(key string) (float64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := f.Int(key); ok {
		return float64(i), true
	}
	if u, ok := toUint(v); ok {
		return float64(u), true
	}
	return 0, false
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Get(key)
	s, ok := v.([]string)
	return s, ok
}

// Float32s returns an array of float32 values.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Get(key)
	s, ok := v.([]float32)
	return s, ok
}

// Int32s returns an array of integers of any 32-bit-or-narrower integer
// type as int32 values.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Get(key)
	switch s := v.(type) {
	case []int32:
		return s, true
	case []uint32:
		return convert[uint32, int32](s), true
	case []int8:
		return convert[int8, int32](s), true
	case []uint8:
		return convert[uint8, int32](s), true
	case []int16:
		return convert[int16, int32](s), true
	case []uint16:
		return convert[uint16, int32](s), true
	}
	return nil, false
}

func convert[From, To int8 | uint8 | int16 | uint16 | int32 | uint32](s []From) []To {
	out := make([]To, len(s))
	for i, v := range s {
		out[i] = To(v)
	}
	return out
}

func toUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// errEmpty is returned for a zero-length file.
var errEmpty = errors.New("the file is empty, not a GGUF model")

// mapFile maps the regular file at path. Anything else (a directory, FIFO,
// device or socket) is refused after a stat, before it is opened, so that a
// FIFO never blocks the caller; the opened file is checked again in case
// path changed in between.
func mapFile(path string) ([]byte, func() error, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := regular(path, st); err != nil {
		return nil, nil, err
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	if st, err = fd.Stat(); err != nil {
		return nil, nil, err
	}
	if err := regular(path, st); err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 {
		return nil, nil, fmt.Errorf("%s: %w", path, errEmpty)
	}
	return mmap(fd, st.Size())
}

// regular returns an error naming path unless st describes a regular file.
func regular(path string, st os.FileInfo) error {
	m := st.Mode()
	what := "not a regular file"
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		what = "a directory"
	case m&os.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		what = "a socket"
	case m&os.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("%s is %s, not a GGUF file: a model must be a regular file", path, what)
}
