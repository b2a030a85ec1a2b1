package kvstore

import (
	"encoding/binary"
	"fmt"
)

// Store holds the K and V tensors of every block, for every layer.
//
// Write, ReadK and ReadV may be called from several goroutines at once as
// long as no two calls write the same (layer, block, slot) and no block is
// read while a token of it is being written; the model's pattern (write a
// batch's rows, then read) satisfies that. Copy, Save, Load and Reset of a
// block must not run concurrently with a Write or Read of the same block.
//
// Index arguments out of range, and rows or destinations of the wrong length,
// are programming errors: Write, ReadK and ReadV panic with a message naming
// them. Nothing a user types reaches them unchecked.
type Store struct {
	cfg  Config
	row  int // KVHeads*HeadDim
	k, v plane
	pool *residualPool // nil unless keys are Int8 or Int4
}

// plane is the storage of one of K or V, all layers and blocks.
type plane interface {
	write(l, b, t int, x []float32)
	read(l, b, n int, dst []float32)
	copyBlock(dst, src int)
	save(b int, buf []byte) []byte
	// loadSize validates a saved block's bytes at the start of data and
	// returns how many it takes; load then installs them and cannot fail.
	loadSize(data []byte) (int, error)
	load(b int, data []byte)
	reset(b int)
}

// New allocates a store for c.
func New(c Config) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: c, row: c.KVHeads * c.HeadDim}
	s.k = newPlane(c, shapeOf(c, c.K, true), s)
	s.v = newPlane(c, shapeOf(c, c.V, false), s)
	return s, nil
}

func newPlane(c Config, sh shape, s *Store) plane {
	n := c.Layers * c.Blocks
	switch sh.prec {
	case F32:
		return &floatPlane{c: c, data: make([]float32, n*sh.data)}
	case F16, BF16:
		return &halfPlane{c: c, bf: sh.prec == BF16, data: make([]uint16, n*sh.data)}
	}
	if sh.key {
		s.pool = &residualPool{size: slotBytes(c)}
		return newKeyPlane(c, sh, s.pool)
	}
	p := &rowPlane{c: c, sh: sh, data: make([]byte, n*sh.data)}
	if sh.scale8 {
		p.sc8 = make([]uint8, n*sh.scales)
	} else {
		p.scale = make([]uint16, n*sh.scales)
	}
	if sh.prec == Int4 {
		row := c.KVHeads * c.HeadDim
		p.bufs.New = func() any { b := make([]float32, row); return &b }
	}
	return p
}

// Config returns the store's configuration, with KeyGroup and ValueGroup as
// given (0 stays 0).
func (s *Store) Config() Config { return s.cfg }

// Write stores one token's K and V rows for layer at (block, slot). Each row
// holds KVHeads*HeadDim values, head-major: row[h*HeadDim+d].
func (s *Store) Write(layer, block, slot int, k, v []float32) {
	c := &s.cfg
	if uint(layer) >= uint(c.Layers) || uint(block) >= uint(c.Blocks) || uint(slot) >= uint(c.BlockSize) || len(k) != s.row || len(v) != s.row {
		panic(fmt.Sprintf("kvstore: Write(layer %d, block %d, slot %d, %d keys, %d values) out of range: %d layers, %d blocks of %d slots, rows of %d",
			layer, block, slot, len(k), len(v), c.Layers, c.Blocks, c.BlockSize, s.row))
	}
	s.k.write(layer, block, slot, k)
	s.v.write(layer, block, slot, v)
}

// ReadK decodes the keys of a block's first n tokens for layer into dst,
// laid out [kvHead][token][dim]: dst[(h*n+t)*HeadDim+d]. dst must hold at
// least KVHeads*n*HeadDim values. Slots never written read as unspecified
// values.
func (s *Store) ReadK(layer, block, n int, dst []float32) {
	s.check("ReadK", layer, block, n, dst)
	s.k.read(layer, block, n, dst)
}

// ReadV decodes the values of a block's first n tokens for layer into dst,
// laid out as for ReadK.
func (s *Store) ReadV(layer, block, n int, dst []float32) {
	s.check("ReadV", layer, block, n, dst)
	s.v.read(layer, block, n, dst)
}

func (s *Store) check(op string, layer, block, n int, dst []float32) {
	c := &s.cfg
	if uint(layer) >= uint(c.Layers) || uint(block) >= uint(c.Blocks) || uint(n) > uint(c.BlockSize) || len(dst) < n*s.row {
		panic(fmt.Sprintf("kvstore: %s(layer %d, block %d, n %d, dst of %d) out of range: %d layers, %d blocks of %d slots, needs %d values",
			op, layer, block, n, len(dst), c.Layers, c.Blocks, c.BlockSize, n*s.row))
	}
}

// Copy makes block dst a copy of block src, all layers, K and V, including
// key residuals, so that both read back identically (copy-on-write). Copying
// a block onto itself does nothing. Indices out of range panic.
func (s *Store) Copy(dst, src int) {
	if uint(dst) >= uint(s.cfg.Blocks) || uint(src) >= uint(s.cfg.Blocks) {
		panic(fmt.Sprintf("kvstore: Copy(%d, %d) out of range: %d blocks", dst, src, s.cfg.Blocks))
	}
	if dst == src {
		return
	}
	s.k.copyBlock(dst, src)
	s.v.copyBlock(dst, src)
}

// Reset forgets which slots of block were written and frees its key residual
// slots. The cache manager should call it when it hands a block to a new
// owner: with Int8 or Int4 keys, a block written again without a Reset
// re-quantizes its full key groups with their old tokens (correct only when
// every slot is written again). For the other precisions it does nothing.
// An index out of range panics.
func (s *Store) Reset(block int) {
	if uint(block) >= uint(s.cfg.Blocks) {
		panic(fmt.Sprintf("kvstore: Reset(%d) out of range: %d blocks", block, s.cfg.Blocks))
	}
	s.k.reset(block)
	s.v.reset(block)
}

// Residuals returns the bytes of key residual slots held by partly filled
// key groups now, and the bytes of all slots the store has allocated (the
// pool keeps freed slots for reuse). A sequence whose last key group is
// partly filled in every layer holds ResidualBytes. Both are 0 unless keys
// are Int8 or Int4.
func (s *Store) Residuals() (inUse, allocated int) {
	if s.pool == nil {
		return 0, 0
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return s.pool.inUse * s.pool.size, s.pool.allocated * s.pool.size
}

// saveMagic starts every saved block. KVB2 was the layout before int4 v3
// (8-bit int4 scales and zero points); Load refuses it.
const saveMagic = "KVB3"

// headerLen is the saved header's length: magic, then eight uint32s.
const headerLen = 4 + 8*4

func (s *Store) header() [8]uint32 {
	c := s.cfg
	return [8]uint32{uint32(c.Layers), uint32(c.KVHeads), uint32(c.HeadDim), uint32(c.BlockSize),
		uint32(c.K), uint32(c.V), uint32(c.keyGroup()), uint32(c.valueGroup())}
}

var headerNames = [8]string{"layer count", "KV head count", "head dimension", "block size",
	"key precision", "value precision", "key group", "value group"}

// Save appends block's bytes, all layers, K and V, scales, zero points and
// key residual state, to buf and returns the extended buffer (swap out).
// The bytes are little-endian and start with a header of the store's shape,
// which Load checks. An index out of range panics.
func (s *Store) Save(block int, buf []byte) []byte {
	if uint(block) >= uint(s.cfg.Blocks) {
		panic(fmt.Sprintf("kvstore: Save(%d) out of range: %d blocks", block, s.cfg.Blocks))
	}
	buf = append(buf, saveMagic...)
	for _, v := range s.header() {
		buf = binary.LittleEndian.AppendUint32(buf, v)
	}
	buf = s.k.save(block, buf)
	return s.v.save(block, buf)
}

// Load replaces block's contents with bytes that Save wrote (swap in). It
// checks the header against the store's shape and the length and
// consistency of the data, and leaves the block unchanged on error.
func (s *Store) Load(block int, data []byte) error {
	if uint(block) >= uint(s.cfg.Blocks) {
		return fmt.Errorf("kvstore: Load: block %d out of range (store has %d blocks)", block, s.cfg.Blocks)
	}
	if len(data) >= headerLen && string(data[:3]) == saveMagic[:3] && data[3] != saveMagic[3] {
		return fmt.Errorf("kvstore: Load block %d: saved by another version's layout (header %q, this one writes %q): it cannot be read", block, data[:4], saveMagic)
	}
	if len(data) < headerLen || string(data[:4]) != saveMagic {
		return fmt.Errorf("kvstore: Load block %d: %d bytes do not start with a saved block header", block, len(data))
	}
	want := s.header()
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(data[4+4*i:]); got != w {
			return fmt.Errorf("kvstore: Load block %d: saved %s %d does not match the store's %d", block, headerNames[i], got, w)
		}
	}
	body := data[headerLen:]
	nk, err := s.k.loadSize(body)
	if err != nil {
		return fmt.Errorf("kvstore: Load block %d keys: %w", block, err)
	}
	nv, err := s.v.loadSize(body[nk:])
	if err != nil {
		return fmt.Errorf("kvstore: Load block %d values: %w", block, err)
	}
	if extra := len(body) - nk - nv; extra != 0 {
		return fmt.Errorf("kvstore: Load block %d: %d bytes left over after the block's data", block, extra)
	}
	s.k.load(block, body[:nk])
	s.v.load(block, body[nk:])
	return nil
}

// errShort is the error for saved data cut short.
func errShort(need, have int) error {
	return fmt.Errorf("saved data is truncated: need %d bytes, have %d", need, have)
}
