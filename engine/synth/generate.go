package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
)

// chunkValues is about how many values one unit of work fills: tensors are
// cut into chunks of whole rows, each with its own random stream, so the
// bytes do not depend on how many goroutines fill them.
const chunkValues = 1 << 16

// fileTypes maps a weight type to llama.cpp's general.file_type
// (llama_ftype) for a file whose matrices are all of that type.
var fileTypes = map[quant.Type]uint32{
	quant.F32: 0, quant.F16: 1, quant.Q4_0: 2, quant.Q4_1: 3, quant.Q8_0: 7,
	quant.Q5_0: 8, quant.Q5_1: 9, quant.Q2_K: 10, quant.Q3_K: 11, quant.Q4_K: 14,
	quant.Q5_K: 16, quant.Q6_K: 18, quant.IQ4_NL: 25, quant.BF16: 32,
}

// chatTemplate is a plain-text chat template: the vocabulary has no chat
// tokens, so turns are marked with words.
const chatTemplate = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

// quietScale scales the output rows of the special and byte tokens.
const quietScale = 0.1

// tensorSpec is one tensor to make: its description, the standard deviation
// of its random values (0: a norm weight, all ones) and how many of its first
// rows are scaled by quietScale, and whether its blocks come from a pool.
type tensorSpec struct {
	info      gguf.TensorInfo
	sigma     float64
	quiet     int       // first rows scaled by quietScale
	quietTail int       // last rows scaled by quietScale
	pooled    bool      // made of blocks from a blockPool
	values    []float32 // fixed values of an F32 tensor (rope_freqs), instead of random ones
}

// poolMinParams is the size from which a model in a type without a direct
// draw is made of pooled blocks (see blockPool).
const poolMinParams = 1 << 26

// pooled reports whether matrices of type t in a model of shape s are made
// of pooled blocks.
func (s Shape) pooled(t quant.Type, params int64) bool {
	switch t {
	case quant.Q4_0, quant.Q8_0, quant.F16, quant.BF16, quant.F32:
		return false
	}
	return params >= poolMinParams
}

// tensors lists a model's tensors: the embeddings, each block's, the output
// norm and matrix, and Llama 3's RoPE factors.
func (s Shape) tensors() []tensorSpec {
	d, ff, q, kv := uint64(s.Dim), uint64(s.FFDim), uint64(s.Heads*s.HeadDim()), uint64(s.KVHeads*s.HeadDim())
	// The weights of the matrices, to choose pooling (see Generate).
	params := int64(max(0, s.Layers)) * int64(2*d*q+2*d*kv+3*d*ff)
	params += int64(s.Vocab) * int64(d)
	if !s.Tied {
		params += int64(s.Vocab) * int64(d)
	}
	layer := -1
	matrix := func(name string, cols, rows uint64, sigma float64) tensorSpec {
		t := s.matrixType(name, layer, int(cols))
		return tensorSpec{info: gguf.TensorInfo{Name: name, Dims: []uint64{cols, rows}, Type: t}, sigma: sigma, pooled: s.pooled(t, params)}
	}
	norm := func(name string) tensorSpec {
		return tensorSpec{info: gguf.TensorInfo{Name: name, Dims: []uint64{d}, Type: quant.F32}}
	}
	// Biases are small random values.
	bias := func(name string, n uint64) tensorSpec {
		return tensorSpec{info: gguf.TensorInfo{Name: name, Dims: []uint64{n}, Type: quant.F32}, sigma: 0.1}
	}
	// A matrix's values have standard deviation 1/sqrt(its row length), so
	// that each output of a matrix times a unit-RMS vector has variance 1
	// and activations keep the same scale through every layer. Embeddings
	// have unit variance, like the normalized activations.
	fanIn := func(n uint64) float64 { return 1 / math.Sqrt(float64(n)) }
	//
	// The output rows of the special and byte tokens are 10 times smaller:
	// their logits stay near 0 while those of the word pieces spread with
	// standard deviation 1, so sampling (top-k, min-p) and greedy decoding
	// pick words, not stray bytes, and generation ends by length, not EOS.
	quiet, quietTail := minVocab, 0
	if s.Pre != "" {
		quiet, quietTail = 256, bpeSpecials
	}
	embed := matrix("token_embd.weight", d, uint64(s.Vocab), 1)
	if s.Tied {
		// The embedding table is the output matrix too: scaled as one.
		embed.sigma, embed.quiet, embed.quietTail = fanIn(d), quiet, quietTail
	}
	specs := []tensorSpec{embed}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		layer = l
		specs = append(specs,
			norm(p+"attn_norm.weight"),
			matrix(p+"attn_q.weight", d, q, fanIn(d)),
			matrix(p+"attn_k.weight", d, kv, fanIn(d)),
			matrix(p+"attn_v.weight", d, kv, fanIn(d)),
		)
		if s.Biases {
			specs = append(specs, bias(p+"attn_q.bias", q), bias(p+"attn_k.bias", kv), bias(p+"attn_v.bias", kv))
		}
		specs = append(specs,
			matrix(p+"attn_output.weight", q, d, fanIn(q)),
			norm(p+"ffn_norm.weight"),
			matrix(p+"ffn_gate.weight", d, ff, fanIn(d)),
			matrix(p+"ffn_up.weight", d, ff, fanIn(d)),
			matrix(p+"ffn_down.weight", ff, d, fanIn(ff)),
		)
	}
	layer = -1
	specs = append(specs, norm("output_norm.weight"))
	if !s.Tied {
		out := matrix("output.weight", d, uint64(s.Vocab), fanIn(d))
		out.quiet, out.quietTail = quiet, quietTail
		specs = append(specs, out)
	}
	if s.Llama3Rope > 0 {
		f := llama3Factors(s.HeadDim(), s.ropeBase(), s.Llama3Rope)
		specs = append(specs, tensorSpec{info: gguf.TensorInfo{Name: "rope_freqs.weight", Dims: []uint64{uint64(len(f))}, Type: quant.F32}, values: f})
	}
	return specs
}

// ropeBase returns RopeBase, 10000 when unset.
func (s Shape) ropeBase() float32 {
	if s.RopeBase == 0 {
		return 10000
	}
	return s.RopeBase
}

// llama3Factors returns Llama 3's RoPE frequency divisors for head
// dimension dim, as llama.cpp's converter computes them (low frequency
// factor 1, high 4, original context 8192): 1 for short wavelengths,
// factor for long ones, and a smooth blend between.
func llama3Factors(dim int, base, factor float32) []float32 {
	const low, high, orig = 1.0, 4.0, 8192.0
	f := make([]float32, dim/2)
	for i := range f {
		freq := 1 / math.Pow(float64(base), float64(2*i)/float64(dim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < orig/high:
			f[i] = 1
		case wavelen > orig/low:
			f[i] = factor
		default:
			smooth := (orig/wavelen - low) / (high - low)
			f[i] = float32(1 / ((1-smooth)/float64(factor) + smooth))
		}
	}
	return f
}

// metadata returns the file's metadata: what model.ReadConfig and
// tokenizer.FromGGUF read, and the general.* keys llama.cpp writes.
func (s Shape) metadata(v vocab) []gguf.KV {
	u32 := func(n int) uint32 { return uint32(n) }
	a := s.arch()
	kvs := []gguf.KV{
		gguf.NewKV("general.architecture", a),
		gguf.NewKV("general.name", s.Name),
	}
	if ft, ok := fileTypes[s.Type]; ok {
		if s.Medium {
			ft++ // Q4_K_M and Q5_K_M follow Q4_K_S and Q5_K_S
		}
		kvs = append(kvs, gguf.NewKV("general.file_type", ft))
	}
	if s.Type != quant.F32 && s.Type != quant.F16 && s.Type != quant.BF16 {
		kvs = append(kvs, gguf.NewKV("general.quantization_version", uint32(2)))
	}
	eps := s.NormEps
	if eps == 0 {
		eps = 1e-5
	}
	kvs = append(kvs,
		gguf.NewKV(a+".vocab_size", u32(s.Vocab)),
		gguf.NewKV(a+".context_length", u32(s.Context)),
		gguf.NewKV(a+".embedding_length", u32(s.Dim)),
		gguf.NewKV(a+".block_count", u32(s.Layers)),
		gguf.NewKV(a+".feed_forward_length", u32(s.FFDim)),
		gguf.NewKV(a+".rope.dimension_count", u32(s.HeadDim())),
		gguf.NewKV(a+".attention.head_count", u32(s.Heads)),
		gguf.NewKV(a+".attention.head_count_kv", u32(s.KVHeads)),
		gguf.NewKV(a+".attention.layer_norm_rms_epsilon", eps),
		gguf.NewKV(a+".rope.freq_base", s.ropeBase()),
	)
	if s.Pre != "" {
		return append(kvs,
			gguf.NewKV("tokenizer.ggml.model", "gpt2"),
			gguf.NewKV("tokenizer.ggml.pre", s.Pre),
			gguf.NewKV("tokenizer.ggml.tokens", v.tokens),
			gguf.NewKV("tokenizer.ggml.token_type", v.types),
			gguf.NewKV("tokenizer.ggml.merges", v.merges),
			gguf.NewKV("tokenizer.ggml.bos_token_id", uint32(s.Vocab-bpeSpecials)),
			gguf.NewKV("tokenizer.ggml.eos_token_id", uint32(s.Vocab-bpeSpecials+1)),
			gguf.NewKV("tokenizer.ggml.add_bos_token", s.Pre == "llama-bpe"),
			gguf.NewKV("tokenizer.chat_template", chatTemplate),
		)
	}
	return append(kvs,
		gguf.NewKV("tokenizer.ggml.model", "llama"),
		gguf.NewKV("tokenizer.ggml.pre", "default"),
		gguf.NewKV("tokenizer.ggml.tokens", v.tokens),
		gguf.NewKV("tokenizer.ggml.scores", v.scores),
		gguf.NewKV("tokenizer.ggml.token_type", v.types),
		gguf.NewKV("tokenizer.ggml.unknown_token_id", uint32(unkID)),
		gguf.NewKV("tokenizer.ggml.bos_token_id", uint32(bosID)),
		gguf.NewKV("tokenizer.ggml.eos_token_id", uint32(eosID)),
		gguf.NewKV("tokenizer.ggml.add_bos_token", true),
		gguf.NewKV("tokenizer.ggml.add_eos_token", false),
		gguf.NewKV("tokenizer.ggml.add_space_prefix", true),
		gguf.NewKV("tokenizer.chat_template", chatTemplate),
	)
}

// Generate makes a complete GGUF file of shape s with random weights,
// in memory. The same shape and seed give the same bytes whatever
// GOMAXPROCS is, and on any machine for F32, F16, BF16, Q4_0 and Q8_0 (the
// quantizers of other types do float arithmetic that may round differently
// where the compiler fuses multiply-adds, as on arm64).
//
// Matrices hold random values of mean 0 and standard deviation 1/sqrt(row
// length) (1 for the embeddings), so that activations keep their scale
// through every layer; the output rows of the special and byte tokens are 10
// times smaller, so that a sampler picks word pieces. Norm weights are 1.
// Q4_0 and Q8_0 blocks are drawn directly (random quants, one scale per
// row); other types are drawn uniformly and encoded with quant.Quantize,
// except that models of 2^26 weights or more in the slow-to-quantize types
// (K-quants, Q4_1, Q5_0, Q5_1, IQ4_NL) are made of blocks picked at random
// from 4096 quantized ones. The work is spread over GOMAXPROCS goroutines:
// TinyLlama's 1.1 billion weights take 0.3 s in Q4_0 or Q4_K and 1 s in
// Q8_0 on two cores, most of it the kernel handing out fresh memory.
//
// The vocabulary is an SPM vocabulary of s.Vocab tokens, or a byte-level
// BPE one when s.Pre is set (see the package documentation); the metadata
// is what llama.cpp writes for the architecture, with a plain-text chat
// template ("user: ...").
func Generate(s Shape, seed uint64) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	specs := s.tensors()
	infos := make([]gguf.TensorInfo, len(specs))
	for i, sp := range specs {
		infos[i] = sp.info
	}
	v := buildVocab(s.Vocab)
	if s.Pre != "" {
		v = buildBPEVocab(s.Vocab)
	}
	l, err := gguf.Plan(s.metadata(v), infos)
	if err != nil {
		return nil, fmt.Errorf("synth: shape %q: %w", s.Name, err)
	}
	if l.Size > maxFileBytes {
		return nil, fmt.Errorf("synth: shape %q: the file would take %d bytes, more than %d", s.Name, l.Size, int64(maxFileBytes))
	}
	buf := make([]byte, l.Size)
	copy(buf, l.Header)
	data := buf[len(l.Header):]
	for i := range specs {
		specs[i].info = l.Tensors[i]
	}
	if err := fill(data, specs, seed); err != nil {
		return nil, fmt.Errorf("synth: shape %q: %w", s.Name, err)
	}
	return buf, nil
}

// Open generates a model (see Generate) and parses it. The File holds the
// generated bytes; it needs no Close.
func Open(s Shape, seed uint64) (*gguf.File, error) {
	b, err := Generate(s, seed)
	if err != nil {
		return nil, err
	}
	return gguf.Parse(b)
}

// chunk is one unit of work: rows [row0, row1) of tensor t, the n-th chunk
// of that tensor.
type chunk struct {
	t, n, row0, row1 int
}

// filler holds what every goroutine of fill reads.
type filler struct {
	data  []byte // the data section
	specs []tensorSpec
	seed  uint64
	pools map[poolKey]*blockPool // for pooled tensors, made before filling
}

// worker holds one goroutine's scratch space.
type worker struct {
	x      []float32
	tables halfTables
}

// fill writes every tensor's values into the data section, in parallel.
func fill(data []byte, specs []tensorSpec, seed uint64) error {
	f := &filler{data: data, specs: specs, seed: seed, pools: map[poolKey]*blockPool{}}
	var chunks []chunk
	for t, sp := range specs {
		cols := int(sp.info.Dims[0])
		rows := int(sp.info.Elements()) / cols
		per := max(1, chunkValues/cols)
		for n, r := 0, 0; r < rows; n, r = n+1, r+per {
			chunks = append(chunks, chunk{t, n, r, min(rows, r+per)})
		}
		if sp.pooled {
			sigmas := []float64{sp.sigma}
			if sp.quiet > 0 || sp.quietTail > 0 {
				sigmas = append(sigmas, sp.sigma*quietScale)
			}
			for _, sigma := range sigmas {
				k := poolKey{sp.info.Type, sigma}
				if f.pools[k] == nil {
					p, err := newBlockPool(k, seed)
					if err != nil {
						return fmt.Errorf("tensor %s: %w", sp.info.Name, err)
					}
					f.pools[k] = p
				}
			}
		}
	}
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		err     error
	)
	for range min(runtime.GOMAXPROCS(0), len(chunks)) {
		wg.Go(func() {
			w := &worker{}
			for {
				i := int(next.Add(1)) - 1
				if i >= len(chunks) {
					return
				}
				if e := f.chunk(w, chunks[i]); e != nil {
					errOnce.Do(func() { err = e })
					return
				}
			}
		})
	}
	wg.Wait()
	return err
}

// chunk draws one chunk's values and encodes them in place.
func (f *filler) chunk(w *worker, c chunk) error {
	sp := &f.specs[c.t]
	typ, cols := sp.info.Type, int(sp.info.Dims[0])
	rowBytes, err := typ.RowBytes(cols)
	if err != nil {
		return err
	}
	if cap(w.x) < cols {
		w.x = make([]float32, cols)
	}
	x := w.x[:cols]
	s1 := splitmix64(f.seed ^ splitmix64(uint64(c.t)+1))
	r := rand.NewPCG(s1, splitmix64(s1^uint64(c.n)))
	rows := int(sp.info.Elements()) / cols
	for row := c.row0; row < c.row1; row++ {
		start := int(sp.info.Offset) + row*rowBytes
		dst := f.data[start : start+rowBytes]
		sigma := sp.sigma
		if row < sp.quiet || row >= rows-sp.quietTail {
			sigma *= quietScale
		}
		switch {
		case sp.values != nil:
			copy(x, sp.values[row*cols:])
		case sigma == 0:
			for i := range x {
				x[i] = 1
			}
		case sp.pooled:
			f.pools[poolKey{typ, sigma}].row(dst, r)
			continue
		case typ == quant.Q4_0:
			randomQ4_0(dst, r, sigma)
			continue
		case typ == quant.Q8_0:
			randomQ8_0(dst, r, sigma)
			continue
		case typ == quant.F16 || typ == quant.BF16:
			halves(dst, r, w.tables.get(typ, sigma))
			continue
		default:
			uniform(x, r, sigma)
		}
		if err := quant.Quantize(typ, x, dst); err != nil {
			return fmt.Errorf("tensor %s: %w", sp.info.Name, err)
		}
	}
	return nil
}

// poolBits is the log2 of the number of blocks in a blockPool.
const poolBits = 12

// poolKey names a blockPool: its type and standard deviation.
type poolKey struct {
	typ   quant.Type
	sigma float64
}

// blockPool is a set of 2^poolBits blocks of one type, quantized from
// uniform draws. Large models in types without a direct draw (the K-quants,
// Q4_1, Q5_0, Q5_1, IQ4_NL) are made of blocks picked at random from a pool:
// quantizing every block would take seconds per billion weights. The
// matrices are then random but built of repeated blocks, which does not
// matter for what such models are for, timing.
type blockPool struct {
	blockBytes int
	data       []byte
}

// newBlockPool makes the pool k, the same for the same seed.
func newBlockPool(k poolKey, seed uint64) (*blockPool, error) {
	n := k.typ.BlockSize() << poolBits
	x := make([]float32, n)
	s1 := splitmix64(seed ^ splitmix64(math.Float64bits(k.sigma)))
	uniform(x, rand.NewPCG(s1, splitmix64(s1^uint64(k.typ))), k.sigma)
	p := &blockPool{blockBytes: k.typ.TypeSize(), data: make([]byte, k.typ.TypeSize()<<poolBits)}
	if err := quant.Quantize(k.typ, x, p.data); err != nil {
		return nil, err
	}
	return p, nil
}

// row fills dst with blocks of the pool picked at random, five picks per
// 64-bit draw.
func (p *blockPool) row(dst []byte, r *rand.PCG) {
	const perDraw = 64 / poolBits
	var u uint64
	for i, k := 0, 0; i < len(dst); i, k = i+p.blockBytes, k+1 {
		if k%perDraw == 0 {
			u = r.Uint64()
		}
		j := int(u&(1<<poolBits-1)) * p.blockBytes
		u >>= poolBits
		copy(dst[i:i+p.blockBytes], p.data[j:j+p.blockBytes])
	}
}

// uniform fills x with values drawn uniformly with mean 0 and standard
// deviation sigma: uniform on [-a, a) has standard deviation a/sqrt(3).
// Each 64-bit draw gives four values.
func uniform(x []float32, r *rand.PCG, sigma float64) {
	k := uniformScale(sigma)
	for i := 0; i < len(x); i += 4 {
		u := r.Uint64()
		for j := i; j < min(len(x), i+4); j++ {
			x[j] = float32(int16(u)) * k
			u >>= 16
		}
	}
}

// halfTables holds, for each type and standard deviation met so far, the
// 16-bit encodings of the 65536 values uniform draws (see uniform).
type halfTables struct {
	key [][2]float64 // type, sigma
	tbl []*[1 << 16]uint16
}

// get returns the table of type t (F16 or BF16) for sigma, making it on
// first use.
func (h *halfTables) get(t quant.Type, sigma float64) *[1 << 16]uint16 {
	key := [2]float64{float64(t), sigma}
	for i, k := range h.key {
		if k == key {
			return h.tbl[i]
		}
	}
	conv := quant.F32ToF16
	if t == quant.BF16 {
		conv = quant.F32ToBF16
	}
	k := uniformScale(sigma)
	tbl := new([1 << 16]uint16)
	for u := range tbl {
		tbl[u] = conv(float32(int16(u)) * k)
	}
	h.key = append(h.key, key)
	h.tbl = append(h.tbl, tbl)
	return tbl
}

// halves fills a row of F16 or BF16 values with the bytes uniform and
// quant.Quantize would give for the same draws, by table lookup: converting
// each value is the slow part.
func halves(dst []byte, r *rand.PCG, tbl *[1 << 16]uint16) {
	n := len(dst) / 2
	for i := 0; i < n; i += 4 {
		u := r.Uint64()
		for j := i; j < min(n, i+4); j++ {
			binary.LittleEndian.PutUint16(dst[2*j:], tbl[uint16(u)])
			u >>= 16
		}
	}
}

// uniformScale is the factor that turns a signed 16-bit draw into a value of
// standard deviation sigma.
func uniformScale(sigma float64) float32 { return float32(sigma * math.Sqrt(3) / 32768) }

// Root mean squares of the quantized values of a random block: q-8 for q
// uniform in 0..15 (Q4_0), and a uniform int8 with -128 made 0 (Q8_0).
var (
	rmsQ4 = math.Sqrt(344.0 / 16)      // mean of k² for k in -8..7
	rmsQ8 = math.Sqrt(1381760.0 / 256) // sum of k² for k in -127..127, over 256
)

// randomQ4_0 fills a row of Q4_0 blocks with random quants and one scale,
// of random sign per block (which cancels the quants' mean of -1/2), so that
// the values have standard deviation sigma. Drawing blocks directly is ten
// times faster than quantizing drawn values, and it is a random model all
// the same.
func randomQ4_0(dst []byte, r *rand.PCG, sigma float64) {
	d := quant.F32ToF16(float32(sigma / rmsQ4))
	var signs uint64
	for i := 0; i < len(dst); i += 18 {
		if i%(64*18) == 0 {
			signs = r.Uint64()
		}
		binary.LittleEndian.PutUint16(dst[i:], d^uint16(signs&1)<<15)
		signs >>= 1
		binary.LittleEndian.PutUint64(dst[i+2:], r.Uint64())
		binary.LittleEndian.PutUint64(dst[i+10:], r.Uint64())
	}
}

// randomQ8_0 fills a row of Q8_0 blocks with random quants, uniform in
// -127..127 with 0 twice as likely (an int8 of -128, which llama.cpp's
// quantizer never writes and some SIMD kernels mishandle, becomes 0), and
// one positive scale, so that the values have standard deviation sigma.
func randomQ8_0(dst []byte, r *rand.PCG, sigma float64) {
	d := quant.F32ToF16(float32(sigma / rmsQ8))
	for i := 0; i < len(dst); i += 34 {
		binary.LittleEndian.PutUint16(dst[i:], d)
		for j := i + 2; j < i+34; j += 8 {
			binary.LittleEndian.PutUint64(dst[j:], noMinus128(r.Uint64()))
		}
	}
}

// noMinus128 returns u with every byte 0x80 (int8 -128) made 0.
func noMinus128(u uint64) uint64 {
	const lo7, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	x := u ^ hi // bytes that were 0x80 are now 0
	// The high bit of each byte of zero is set where x's byte is 0.
	zero := ^((x&lo7 + lo7) | x | lo7)
	return u &^ (zero >> 7 * 0xff)
}

// splitmix64 is SplitMix64's output function: it spreads nearby seeds (a
// tensor index, a chunk number) over unrelated generator states.
func splitmix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
