package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"kvscope/engine/kvstore"
)

// attnCase is a cache filled with random K/V for some sequences, and
// queries for a step's rows.
type attnCase struct {
	be              Backend
	st              *kvstore.Store
	heads           int
	q, out          Buffer
	grouped, single Rows // the same rows as sequences, and each row alone
	tables          [][]int32
	seqRows         [][]int32 // positions of each sequence's rows
}

// newAttnCase fills a store with random keys and values for sequences of
// the given lengths, in scattered blocks, and makes rows: for sequence s,
// positions lens[s]-rows[s] .. lens[s]-1.
func newAttnCase(t testing.TB, p kvstore.Precision, bs, heads, kvHeads, hd int, lens, rows []int) *attnCase {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(bs)))
	blocks := 0
	for _, n := range lens {
		blocks += (n + bs - 1) / bs
	}
	st, err := kvstore.New(kvstore.Config{Layers: 2, KVHeads: kvHeads, HeadDim: hd, BlockSize: bs, Blocks: blocks, K: p, V: p})
	if err != nil {
		t.Fatal(err)
	}
	perm := rng.Perm(blocks)
	c := &attnCase{be: Go(), st: st, heads: heads}
	row := kvHeads * hd
	k, v := make([]float32, row), make([]float32, row)
	nrows := 0
	for s, n := range lens {
		var table []int32
		for range (n + bs - 1) / bs {
			table = append(table, int32(perm[0]))
			perm = perm[1:]
		}
		c.tables = append(c.tables, table)
		for pos := range n {
			for l := range 2 {
				for i := range row {
					k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				st.Write(l, int(table[pos/bs]), pos%bs, k, v)
			}
		}
		var ps []int32
		for pos := n - rows[s]; pos < n; pos++ {
			ps = append(ps, int32(pos))
		}
		c.seqRows = append(c.seqRows, ps)
		nrows += rows[s]
	}
	for s, table := range c.tables {
		c.grouped.Seqs = append(c.grouped.Seqs, int32(len(c.grouped.Pos)))
		c.grouped.TableStart = append(c.grouped.TableStart, int32(len(c.grouped.Tables)))
		c.grouped.Tables = append(c.grouped.Tables, table...)
		for _, pos := range c.seqRows[s] {
			c.grouped.Pos = append(c.grouped.Pos, pos)
			c.single.Seqs = append(c.single.Seqs, int32(len(c.single.Pos)))
			c.single.TableStart = append(c.single.TableStart, int32(len(c.single.Tables)))
			c.single.Tables = append(c.single.Tables, table[:int(pos)/bs+1]...)
			c.single.Pos = append(c.single.Pos, pos)
		}
	}
	for _, r := range []*Rows{&c.grouped, &c.single} {
		r.Seqs = append(r.Seqs, int32(len(r.Pos)))
		r.TableStart = append(r.TableStart, int32(len(r.Tables)))
	}
	qv := make([]float32, nrows*heads*hd)
	for i := range qv {
		qv[i] = float32(rng.NormFloat64())
	}
	c.q, _ = c.be.NewBuffer(len(qv))
	c.out, _ = c.be.NewBuffer(len(qv))
	c.be.Write(c.q, 0, qv)
	return c
}

func (c *attnCase) run(t testing.TB, layer int, r *Rows) []float32 {
	t.Helper()
	c.be.Attention(c.out, c.st, layer, c.q, c.heads, r)
	got := make([]float32, c.out.Len())
	if err := c.be.Read(got, c.out, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

// reference is softmax(q·Kᵀ/√d)·V for row i in float64, reading the cache
// one token at a time.
func (c *attnCase) reference(layer int, r *Rows, i int) []float64 {
	cfg := c.st.Config()
	hd, kvh, bs := cfg.HeadDim, cfg.KVHeads, cfg.BlockSize
	s := 0
	for int(r.Seqs[s+1]) <= i {
		s++
	}
	table := r.Tables[r.TableStart[s]:r.TableStart[s+1]]
	nPos := int(r.Pos[i]) + 1
	q := make([]float32, c.heads*hd)
	_ = c.be.Read(q, c.q, i*c.heads*hd)
	kb, vb := make([]float32, kvh*bs*hd), make([]float32, kvh*bs*hd)
	out := make([]float64, c.heads*hd)
	scores := make([]float64, nPos)
	for h := range c.heads {
		g := h / (c.heads / kvh)
		mx := math.Inf(-1)
		for p := range nPos {
			c.st.ReadK(layer, int(table[p/bs]), bs, kb)
			var dot float64
			for d := range hd {
				dot += float64(q[h*hd+d]) * float64(kb[(g*bs+p%bs)*hd+d])
			}
			scores[p] = dot / math.Sqrt(float64(hd))
			mx = max(mx, scores[p])
		}
		var sum float64
		for p := range scores {
			scores[p] = math.Exp(scores[p] - mx)
			sum += scores[p]
		}
		for p := range nPos {
			c.st.ReadV(layer, int(table[p/bs]), bs, vb)
			for d := range hd {
				out[h*hd+d] += scores[p] / sum * float64(vb[(g*bs+p%bs)*hd+d])
			}
		}
	}
	return out
}

// TestAttentionOncePerSequence: decoding a sequence's blocks once for all
// its rows gives the same bits as attending row by row, for every
// precision (int8/int4 keys include partly filled key groups) and block
// size, and both match a float64 reference.
func TestAttentionOncePerSequence(t *testing.T) {
	for _, p := range []kvstore.Precision{kvstore.F32, kvstore.F16, kvstore.Q8_0, kvstore.Int8, kvstore.Int4} {
		for _, bs := range []int{1, 4, 16} {
			t.Run(fmt.Sprintf("%s/block%d", p, bs), func(t *testing.T) {
				// A prefill chunk of 13 rows, two decodes, and a chunk of 3
				// rows that starts mid-block.
				c := newAttnCase(t, p, bs, 8, 2, 16, []int{13, 40, 7, 21}, []int{13, 1, 1, 3})
				for layer := range 2 {
					grouped := c.run(t, layer, &c.grouped)
					single := c.run(t, layer, &c.single)
					for i := range grouped {
						if math.Float32bits(grouped[i]) != math.Float32bits(single[i]) {
							t.Fatalf("layer %d value %d: %v decoding once per sequence, %v row by row", layer, i, grouped[i], single[i])
						}
					}
					width := c.heads * c.st.Config().HeadDim
					for i := range c.grouped.Pos {
						want := c.reference(layer, &c.grouped, i)
						for j, w := range want {
							if g := grouped[i*width+j]; math.Abs(float64(g)-w) > 1e-5 {
								t.Fatalf("layer %d row %d value %d: %v, reference %v", layer, i, j, g, w)
							}
						}
					}
				}
			})
		}
	}
}

// BenchmarkAttentionPrefill times one layer's attention for a prompt chunk
// of 128 rows on the TinyLlama shape (32 query heads over 4 KV heads of 64,
// f16 K/V in blocks of 16), at the start of a context and after 896 cached
// tokens, decoding each block once for the chunk ("per-sequence") and once
// per row ("per-row", what attention did before).
func BenchmarkAttentionPrefill(b *testing.B) {
	for _, ctx := range []int{128, 1024} {
		c := newAttnCase(b, kvstore.F16, 16, 32, 4, 64, []int{ctx}, []int{128})
		for _, mode := range []struct {
			name string
			r    *Rows
		}{{"per-sequence", &c.grouped}, {"per-row", &c.single}} {
			b.Run(fmt.Sprintf("context%d/%s", ctx, mode.name), func(b *testing.B) {
				for b.Loop() {
					c.be.Attention(c.out, c.st, 0, c.q, c.heads, mode.r)
				}
			})
		}
	}
}
