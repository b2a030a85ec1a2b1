package kvstore

// Raw describes the storage of one of K or V, all layers and blocks, so that
// native kernels (engine/backend/native) can read blocks in place and write
// token rows with the bytes Write would produce. The slices are the store's
// own memory: reading them follows Store's rules (no block read while a token
// of it is written), and writing them is for kernels that reproduce Write
// exactly. Layer l, block b's share starts at (l*Blocks+b)*DataPerBlock in
// the data slice and (l*Blocks+b)*ScalesPerBlock in Scale and Scale8; the
// layouts are the package doc's.
type Raw struct {
	Prec Precision
	// Key is true for Int8/Int4/FP8 keys: quantized per channel over key
	// groups of Group tokens (Groups a block), with f16 residual slots
	// (Resid).
	Key bool
	// RowBytes is the bytes of one (head, token) row of quantized data.
	RowBytes int
	// Group and Groups: values per group of a token's row and groups per
	// token (row planes), or tokens per key group and groups per block (keys).
	Group, Groups int
	// DataPerBlock and ScalesPerBlock count the elements of data and Scale
	// (or bytes of Scale8) for each (layer, block).
	DataPerBlock, ScalesPerBlock int

	F32    []float32 // data of an F32 plane
	U16    []uint16  // data of an F16 or BF16 plane (bits)
	Bytes  []byte    // data of a quantized plane
	Scale  []uint16  // f16 scales of a Q8_0 plane
	Scale8 []uint8   // E5M3 scales of an Int8 or FP8 plane; an Int4 plane's codes (int4 v3: signed E5M2 value scales, or key metadata)

	// Resid returns the residual slot of layer l, block b, key group g
	// ([kvHead][tokenInGroup][dim], for Int8 the high bytes of the f16
	// values, for Int4 whole little-endian f16 values; FP8 as Int8), or nil when the
	// group is quantized or empty. Nil unless Key.
	Resid func(l, b, g int) []byte
}

// RawK returns the description of the keys' storage.
func (s *Store) RawK() Raw { return rawOf(s.k, shapeOf(s.cfg, s.cfg.K, true)) }

// RawV returns the description of the values' storage.
func (s *Store) RawV() Raw { return rawOf(s.v, shapeOf(s.cfg, s.cfg.V, false)) }

func rawOf(p plane, sh shape) Raw {
	r := Raw{Prec: sh.prec, Key: sh.key, RowBytes: sh.rowBytes, Group: sh.group, Groups: sh.groups,
		DataPerBlock: sh.data, ScalesPerBlock: sh.scales}
	switch p := p.(type) {
	case *floatPlane:
		r.F32 = p.data
	case *halfPlane:
		r.U16 = p.data
	case *rowPlane:
		r.Bytes, r.Scale, r.Scale8 = p.data, p.scale, p.sc8
	case *keyPlane:
		r.Bytes, r.Scale8 = p.data, p.scale
		r.Resid = func(l, b, g int) []byte { return *p.residual(l, b, g) }
	}
	return r
}
