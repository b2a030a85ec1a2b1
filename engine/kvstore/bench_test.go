package kvstore

import (
	"fmt"
	"testing"
)

// benchShapes are stories260K's K/V shape and a TinyLlama-like one.
var benchShapes = []struct {
	name               string
	layers, heads, dim int
}{
	{"h4d8", 5, 4, 8},
	{"h4d64", 22, 4, 64},
}

// BenchmarkWrite measures one token's K and V rows written to one layer, at
// block size 32, cycling through the slots of a few blocks (Int8 and Int4
// keys quantize a key group every 16th write).
func BenchmarkWrite(b *testing.B) {
	for _, sh := range benchShapes {
		for _, p := range allPrecisions {
			b.Run(fmt.Sprintf("%s/%v", sh.name, p), func(b *testing.B) {
				c := Config{Layers: 1, KVHeads: sh.heads, HeadDim: sh.dim, BlockSize: 32, Blocks: 8, K: p, V: p}
				s, _ := New(c)
				keys, vals := gen(c, 1, 32)
				b.SetBytes(int64(2 * 4 * sh.heads * sh.dim))
				i := 0
				for b.Loop() {
					t, blk := i%32, (i/32)%8
					if t == 0 {
						s.Reset(blk) // as the cache manager does when it reuses a block
					}
					s.Write(0, blk, t, keys[t], vals[t])
					i++
				}
			})
		}
	}
}

// BenchmarkReadK measures decoding a full block's keys for one layer.
func BenchmarkReadK(b *testing.B) {
	for _, sh := range benchShapes {
		for _, p := range allPrecisions {
			b.Run(fmt.Sprintf("%s/%v", sh.name, p), func(b *testing.B) {
				c := Config{Layers: 1, KVHeads: sh.heads, HeadDim: sh.dim, BlockSize: 32, Blocks: 1, K: p, V: p}
				s, _ := New(c)
				keys, vals := gen(c, 1, 32)
				fill(s, 0, keys, vals, 0, 32)
				dst := make([]float32, sh.heads*32*sh.dim)
				b.SetBytes(int64(4 * len(dst)))
				for b.Loop() {
					s.ReadK(0, 0, 32, dst)
				}
			})
		}
	}
}
