package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"kvscope/engine/quant"
)

// maxTensorName is the longest tensor name ggml accepts (GGML_MAX_NAME is 64
// bytes, including the terminating zero).
const maxTensorName = 63

// maxData bounds the data section, so that offsets and sizes never overflow.
const maxData = 1 << 62

// invalidType is the ValueType NewKV gives a value that has no GGUF type, so
// that Write reports it.
const invalidType ValueType = math.MaxUint32

// WriteTensor is one tensor for Write: its name, its shape in ggml order
// (Dims[0] is the row length), its element type and its bytes, exactly
// Type.RowBytes(Dims[0]) times the number of rows.
type WriteTensor struct {
	Name string
	Dims []uint64
	Type quant.Type
	Data []byte
}

// Layout is where a GGUF file's parts go, as Plan computes it.
type Layout struct {
	// Header holds the encoded magic, version, metadata and tensor infos,
	// padded with zeros to the start of the data section.
	Header []byte
	// Tensors are the tensors with Offset (from the start of the data
	// section) and Size set. Each offset is a multiple of Alignment.
	Tensors []TensorInfo
	// Alignment is the alignment of the data section and of each tensor.
	Alignment uint64
	// Size is the length of the whole file: the header, then each tensor's
	// bytes followed by zeros up to the next multiple of Alignment.
	Size uint64
}

// ValueTypeOf returns the metadata value type of a Go value, with KV's
// mapping of Go types to value types: uint8 ... float64 and string for
// scalars, a slice of one of them for an array, and []any for an array of
// arrays. It reports false for any other Go type.
func ValueTypeOf(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string,
		[]uint64, []int64, []float64, []any:
		return TypeArray, true
	}
	return invalidType, false
}

// NewKV returns the pair key = value with the value type that value's Go type
// maps to (see ValueTypeOf). A value of any other Go type (int, say) gets a
// type that Write rejects with an error naming the key.
func NewKV(key string, value any) KV {
	t, _ := ValueTypeOf(value)
	return KV{Key: key, Type: t, Value: value}
}

// WriteTensors returns f's tensors as Write takes them, their data still
// f's bytes: a file is rewritten with other metadata by
// Write(w, kvs, f.WriteTensors()).
func (f *File) WriteTensors() []WriteTensor {
	out := make([]WriteTensor, len(f.Tensors))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		out[i] = WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: f.TensorData(ti)}
	}
	return out
}

// Write writes a GGUF version 3 file holding the metadata kvs and the
// tensors, in the given order, to w. Tensor data is aligned to the
// general.alignment of kvs (an unsigned integer power of two up to 1 MiB),
// or to DefaultAlignment without it. Input that could not make a valid file
// gives an error naming the key or tensor at fault (see Plan); nothing is
// written then.
func Write(w io.Writer, kvs []KV, tensors []WriteTensor) error {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}
	}
	l, err := Plan(kvs, infos)
	if err != nil {
		return err
	}
	for i, t := range tensors {
		if uint64(len(t.Data)) != l.Tensors[i].Size {
			return fmt.Errorf("gguf: tensor %q: %d bytes of data, but %d %s elements of shape %v take %d",
				t.Name, len(t.Data), l.Tensors[i].Elements(), t.Type, t.Dims, l.Tensors[i].Size)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if _, err := bw.Write(l.Header); err != nil {
		return err
	}
	pos := uint64(0) // position in the data section
	var zeros [1 << 12]byte
	pad := func(to uint64) error {
		for pos < to {
			n := min(to-pos, uint64(len(zeros)))
			if _, err := bw.Write(zeros[:n]); err != nil {
				return err
			}
			pos += n
		}
		return nil
	}
	for i, t := range tensors {
		if err := pad(l.Tensors[i].Offset); err != nil {
			return err
		}
		if _, err := bw.Write(t.Data); err != nil {
			return err
		}
		pos += uint64(len(t.Data))
	}
	if err := pad(l.Size - uint64(len(l.Header))); err != nil {
		return err
	}
	return bw.Flush()
}

// Plan lays out a GGUF version 3 file holding the metadata kvs and tensors
// described by tensors (whose Offset and Size are ignored), in the given
// order, and encodes its header. A caller that fills tensor bytes itself
// (into one buffer of Size bytes, say) writes Header first and each tensor
// at len(Header)+Offset; Write does this for tensors it is given.
//
// Plan checks everything the reader checks, so that the file parses: each
// value has the value type its KV names and the Go type that type maps to
// (see KV), arrays nest at most 8 deep, keys and tensor names are unique,
// general.alignment is a valid alignment, tensors have 1 to 4 non-zero
// dimensions, a known type and a row length that is a whole number of the
// type's blocks, and tensor names are at most 63 bytes, as ggml requires.
func Plan(kvs []KV, tensors []TensorInfo) (*Layout, error) {
	e := &encoder{}
	e.b = append(e.b, Magic...)
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))

	align := uint64(DefaultAlignment)
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if seen[kv.Key] {
			return nil, fmt.Errorf("gguf: duplicate metadata key %q", kv.Key)
		}
		seen[kv.Key] = true
		if err := checkValue(kv.Type, kv.Value, 0); err != nil {
			return nil, fmt.Errorf("gguf: metadata %q: %w", kv.Key, err)
		}
		if kv.Key == "general.alignment" {
			a, ok := toUint(kv.Value)
			if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
				return nil, fmt.Errorf("gguf: metadata general.alignment: %v (%s) is not a power of two up to 1 MiB", kv.Value, kv.Type)
			}
			align = a
		}
		e.str(kv.Key)
		e.u32(uint32(kv.Type))
		e.value(kv.Value)
	}

	l := &Layout{Tensors: make([]TensorInfo, len(tensors)), Alignment: align}
	names := make(map[string]bool, len(tensors))
	off := uint64(0)
	for i, t := range tensors {
		size, err := checkTensor(t.Name, t.Dims, t.Type)
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("gguf: duplicate tensor name %q", t.Name)
		}
		names[t.Name] = true
		off = alignUp(off, align)
		l.Tensors[i] = TensorInfo{Name: t.Name, Dims: append([]uint64(nil), t.Dims...), Type: t.Type, Offset: off, Size: size}
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		if size > maxData-off {
			return nil, fmt.Errorf("gguf: tensor %q: the data section would exceed 2^62 bytes", t.Name)
		}
		off += size
	}
	for uint64(len(e.b))%align != 0 {
		e.b = append(e.b, 0)
	}
	l.Header = e.b
	l.Size = uint64(len(e.b)) + alignUp(off, align)
	return l, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// checkTensor checks a tensor's name, shape and type and returns its size in
// bytes.
func checkTensor(name string, dims []uint64, typ quant.Type) (uint64, error) {
	if name == "" {
		return 0, fmt.Errorf("gguf: a tensor has an empty name")
	}
	if len(name) > maxTensorName {
		return 0, fmt.Errorf("gguf: tensor name %q is %d bytes long; ggml allows at most %d", name, len(name), maxTensorName)
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return 0, fmt.Errorf("gguf: tensor %q has %d dimensions (want 1 to %d)", name, len(dims), maxDims)
	}
	if !typ.Known() {
		return 0, fmt.Errorf("gguf: tensor %q has unknown type %s", name, typ)
	}
	elems := uint64(1)
	for i, d := range dims {
		if d == 0 {
			return 0, fmt.Errorf("gguf: tensor %q: dimension %d is 0", name, i)
		}
		if elems > math.MaxUint64/d {
			return 0, fmt.Errorf("gguf: tensor %q: shape %v has more than 2^64 elements", name, dims)
		}
		elems *= d
	}
	bs := uint64(typ.BlockSize())
	if dims[0]%bs != 0 {
		return 0, fmt.Errorf("gguf: tensor %q: row length %d is not a multiple of the %s block size %d", name, dims[0], typ, bs)
	}
	blocks, ts := elems/bs, uint64(typ.TypeSize())
	if blocks > math.MaxUint64/ts {
		return 0, fmt.Errorf("gguf: tensor %q: shape %v takes more than 2^64 bytes", name, dims)
	}
	return blocks * ts, nil
}

// checkValue checks that v is a value of type t whose arrays nest at most
// maxNesting deep (depth is the nesting of v itself).
func checkValue(t ValueType, v any, depth int) error {
	if t == invalidType {
		return fmt.Errorf("a value of Go type %T has no GGUF value type", v)
	}
	if t > TypeFloat64 {
		return fmt.Errorf("unknown value type %d", uint32(t))
	}
	got, ok := ValueTypeOf(v)
	if !ok {
		return fmt.Errorf("a value of Go type %T cannot be stored as %s", v, t)
	}
	if got != t {
		return fmt.Errorf("value type is %s but the value is a Go %T (%s)", t, v, got)
	}
	if t != TypeArray {
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested more than %d deep", maxNesting)
	}
	nested, ok := v.([]any)
	if !ok {
		return nil
	}
	for i, x := range nested {
		if xt, ok := ValueTypeOf(x); !ok || xt != TypeArray {
			return fmt.Errorf("element %d of an array of arrays is a Go %T, not an array", i, x)
		}
		if err := checkValue(TypeArray, x, depth+1); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

// encoder appends little-endian GGUF encodings to b.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }

func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// value appends a value checked by checkValue: a scalar's bytes, or an
// array's element type, count and elements.
func (e *encoder) value(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		e.bool(x)
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case []uint8:
		array(e, TypeUint8, x, e.u8)
	case []int8:
		array(e, TypeInt8, x, func(v int8) { e.u8(uint8(v)) })
	case []uint16:
		array(e, TypeUint16, x, e.u16)
	case []int16:
		array(e, TypeInt16, x, func(v int16) { e.u16(uint16(v)) })
	case []uint32:
		array(e, TypeUint32, x, e.u32)
	case []int32:
		array(e, TypeInt32, x, func(v int32) { e.u32(uint32(v)) })
	case []float32:
		array(e, TypeFloat32, x, func(v float32) { e.u32(math.Float32bits(v)) })
	case []bool:
		array(e, TypeBool, x, e.bool)
	case []string:
		array(e, TypeString, x, e.str)
	case []uint64:
		array(e, TypeUint64, x, e.u64)
	case []int64:
		array(e, TypeInt64, x, func(v int64) { e.u64(uint64(v)) })
	case []float64:
		array(e, TypeFloat64, x, func(v float64) { e.u64(math.Float64bits(v)) })
	case []any:
		array(e, TypeArray, x, e.value)
	}
}

func array[T any](e *encoder, et ValueType, s []T, put func(T)) {
	e.u32(uint32(et))
	e.u64(uint64(len(s)))
	for _, v := range s {
		put(v)
	}
}
