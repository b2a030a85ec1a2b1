package backend

import (
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// Backend runs the steps of a forward pass on memory it owns. Activations
// are row-major: row i of an n-row buffer of width w is values
// [i*w, (i+1)*w). An operation on n rows uses the first rows of buffers that
// may hold more. Out and in buffers of one operation must not overlap unless
// its doc says so.
type Backend interface {
	// Name names the backend, as shown to users ("go", "cpu", "cuda").
	Name() string

	// Weight returns a handle on a weight matrix of rows × cols elements of
	// type t, stored in data in ggml's layout, with a bias of rows values
	// added to every product, or none when bias is nil. A backend with
	// memory of its own copies both now; the Go backend reads them in
	// place, so they must stay valid while the handle is used.
	Weight(t quant.Type, rows, cols int, data []byte, bias []float32) (Weight, error)
	// NewCache allocates a paged K/V pool shaped and typed by c.
	NewCache(c kvstore.Config) (Cache, error)
	// NewBuffer allocates an activation buffer of n float32 values.
	NewBuffer(n int) (Buffer, error)
	// Write copies src into dst from value off on.
	Write(dst Buffer, off int, src []float32)
	// Read copies len(dst) values of src from value off on into dst, once
	// every operation issued before it is done, and returns the first
	// failure of any operation since the last Read or Sync.
	Read(dst []float32, src Buffer, off int) error
	// Sync waits for every operation issued so far and returns the first
	// failure since the last Read or Sync.
	Sync() error

	// MatMul computes out[i] = w·x[i] (+ bias) for n rows: x rows have the
	// weight's cols values, out rows its rows values.
	MatMul(out Buffer, w Weight, x Buffer, n int)
	// MatMuls computes outs[j] = ws[j]·x, as MatMul does, for every j: one
	// input times several weights of its width (a layer's query, key and
	// value, or its gate and up), which a backend may compute as one
	// operation.
	MatMuls(outs []Buffer, ws []Weight, x Buffer, n int)
	// Embed writes row tokens[i] of the embedding matrix w into row i of
	// out, for every token.
	Embed(out Buffer, w Weight, tokens []int32)
	// RMSNorm writes each of n rows of dim values of x, divided by its root
	// mean square (plus eps) and multiplied by weight, into out. out may be
	// x.
	RMSNorm(out, x, weight Buffer, n, dim int, eps float32)
	// RoPE rotates, in place, each of the heads of row i of x (heads ×
	// r.HeadDim values) for position pos[i], for every row.
	RoPE(x Buffer, heads int, pos []int32, r *Rope)
	// SwiGLU sets gate[i] = silu(gate[i]) * up[i] for the first count
	// values.
	SwiGLU(gate, up Buffer, count int)
	// Add sets x[i] += y[i] for the first count values.
	Add(x, y Buffer, count int)
	// Scale sets x[i] *= s for the first count values.
	Scale(x Buffer, count int, s float32)
	// GeGLU sets gate[i] = gelu(gate[i]) * up[i] for the first count
	// values, with GELU's tanh approximation (Gemma's feed-forward).
	GeGLU(gate, up Buffer, count int)
	// Gather copies row rows[j] of src into row j of dst, rows of width
	// values.
	Gather(dst, src Buffer, rows []int32, width int)

	// WriteKV stores row i of k and of v (KVHeads × HeadDim values each) in
	// layer of cache slot slots[i] (block*BlockSize + slot within block), at
	// the cache's precisions, in row order.
	WriteKV(c Cache, layer int, k, v Buffer, slots []int32)
	// ReadKV decodes the K and V of layer in cache slot slots[i] into row i
	// of k and v: WriteKV's inverse, up to the cache's precision.
	ReadKV(k, v Buffer, c Cache, layer int, slots []int32)
	// Attention computes, for every row i of q (heads × HeadDim values, the
	// query heads grouped evenly over the cache's KV heads), the causal
	// attention softmax(q·Kᵀ/√HeadDim)·V over positions 0..r.Pos[i] of the
	// row's sequence in layer of the cache, read through its block table,
	// into row i of out. Each row's sums run in position order.
	Attention(out Buffer, c Cache, layer int, q Buffer, heads int, r *Rows)
}

// Buffer is activation memory a backend owns: a run of float32 values.
type Buffer interface {
	// Len returns the number of values it holds.
	Len() int
	// Free releases its memory; it must not be used again.
	Free()
}

// Weight is a weight matrix a backend can multiply by.
type Weight interface {
	// Shape returns its rows and columns.
	Shape() (rows, cols int)
	// Free releases its memory; it must not be used again.
	Free()
}

// Cache is a backend's paged K/V pool: Blocks blocks of BlockSize token
// slots, each spanning every layer. The cache manager moves whole blocks
// through kvcache.Storage (copy on write, swap, reset); the backend's
// WriteKV, ReadKV and Attention read and write slots. *kvstore.Store is the
// Go backend's Cache.
type Cache interface {
	kvcache.Storage
	// Config returns the pool's shape and precisions.
	Config() kvstore.Config
}

// Rope is a model's rotary position embedding. The angle of pair i of a
// head at position p is p/Scale · Base^(-2i/Dims), divided by Freqs[i] when
// Freqs is set; pairs are adjacent values (2i, 2i+1), or i and i+Dims/2
// with NeoX.
type Rope struct {
	HeadDim int       // values per head
	Dims    int       // leading values of each head that rotate; even
	Base    float32   // frequency base
	Scale   float32   // linear scaling factor: positions are divided by it
	NeoX    bool      // rotate the halves of the rotated values (NeoX, qwen2)
	Freqs   []float32 // per-pair frequency divisors (Llama 3.1's rope_freqs), or nil
}

// Rows tells Attention which cached positions each row of a step attends
// to, in flat int32 arrays (vLLM's attention metadata) that a native library
// can take as pointers. Sequence s has rows Seqs[s] to Seqs[s+1]-1,
// consecutive and in position order, and block table
// Tables[TableStart[s]:TableStart[s+1]]: its position p is in block
// table[p/BlockSize], slot p%BlockSize. The table must cover every position
// its rows attend to, and those positions must be in the cache.
type Rows struct {
	Pos        []int32 // Pos[i]: row i's position; it attends to 0..Pos[i]
	Seqs       []int32 // len(Seqs) = sequences+1; Seqs[0] = 0, the last = rows
	TableStart []int32 // len(TableStart) = sequences+1
	Tables     []int32 // every sequence's block table, one after another
	// Window, when positive, limits every row to its Window latest
	// positions (its own and Window-1 before): a sliding-window layer.
	Window int32
}
