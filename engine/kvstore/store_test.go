package kvstore

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"kvscope/engine/quant"
)

// exactRound returns what an exact precision must read back for x, and
// whether p is exact (a pure per-value rounding).
func exactRound(p Precision, x float32) (float32, bool) {
	switch p {
	case F32:
		return x, true
	case F16:
		return quant.F16ToF32(quant.F32ToF16(x)), true
	case BF16:
		return quant.BF16ToF32(quant.F32ToBF16(x)), true
	}
	return 0, false
}

// checkRows compares got with what precision p may return for want.
func checkRows(t *testing.T, what string, c Config, p Precision, key bool, got, want [][]float32) {
	t.Helper()
	checkRowsScaled(t, what, c, p, key, got, want, 1)
}

// checkRowsScaled is checkRows with the error bounds multiplied by f.
func checkRowsScaled(t *testing.T, what string, c Config, p Precision, key bool, got, want [][]float32, f float64) {
	t.Helper()
	bounds := errBounds(c, p, key, want)
	bad := 0
	for tk := range want {
		for i, w := range want[tk] {
			g := got[tk][i]
			if r, exact := exactRound(p, w); exact {
				if math.Float32bits(g) != math.Float32bits(r) {
					if bad++; bad <= 3 {
						t.Errorf("%s token %d value %d: read %v, want exactly %v (from %v)", what, tk, i, g, r, w)
					}
				}
				continue
			}
			if e := math.Abs(float64(g - w)); !(e <= f*bounds[tk][i]) {
				if bad++; bad <= 3 {
					t.Errorf("%s token %d value %d: read %v for %v, error %.3g over the bound %.3g", what, tk, i, g, w, e, bounds[tk][i])
				}
			}
		}
	}
}

// flat returns rows concatenated.
func flat(rows [][]float32) []float32 {
	var out []float32
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// maxRelRMS is a loose ceiling on each precision's relative RMS error on the
// tests' key-like data, so that a layout regression shows even within the
// per-value bounds.
var maxRelRMS = map[Precision]float64{F32: 0, F16: 5e-4, BF16: 4e-3, Q8_0: 2e-2, Int8: 1e-2, Int4: 0.15, FP8: 4e-2}

func TestRoundTrip(t *testing.T) {
	shapes := []struct {
		name string
		c    Config
	}{
		{"stories260K B32", stories(32, 3, 0, 0)},
		{"stories260K B16 KG8", Config{Layers: 5, KVHeads: 4, HeadDim: 8, BlockSize: 16, Blocks: 2, KeyGroup: 8}},
		{"head64 B32", Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockSize: 32, Blocks: 2}},
		{"odd dims B20 KG8 VG5", Config{Layers: 2, KVHeads: 3, HeadDim: 5, BlockSize: 20, Blocks: 2, KeyGroup: 8, ValueGroup: 5}},
		{"head1 B1", Config{Layers: 1, KVHeads: 1, HeadDim: 1, BlockSize: 1, Blocks: 3}},
		{"head33 B256", Config{Layers: 1, KVHeads: 2, HeadDim: 33, BlockSize: 256, Blocks: 2}},
	}
	for _, sh := range shapes {
		for _, p := range allPrecisions {
			t.Run(sh.name+"/"+p.String(), func(t *testing.T) {
				c := sh.c
				c.K, c.V = p, p
				s, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				keys, vals := gen(c, 42, c.BlockSize)
				b := c.Blocks - 1
				fill(s, b, keys, vals, 0, c.BlockSize)
				for l := range c.Layers {
					wk, wv := keys, vals
					if l > 0 {
						wk, wv = nil, nil
						for i := range keys {
							wk, wv = append(wk, shift(keys[i], l)), append(wv, shift(vals[i], l))
						}
					}
					gk, gv := readAll(s, l, b, c.BlockSize)
					checkRows(t, fmt.Sprintf("layer %d keys", l), c, p, true, gk, wk)
					checkRows(t, fmt.Sprintf("layer %d values", l), c, p, false, gv, wv)
					if l == 0 {
						ek, ev := relRMS(flat(gk), flat(wk)), relRMS(flat(gv), flat(wv))
						if ek > maxRelRMS[p] || ev > maxRelRMS[p] {
							t.Errorf("relative RMS error keys %.3g, values %.3g, over %.3g", ek, ev, maxRelRMS[p])
						}
						t.Logf("relative RMS error: keys %.3g, values %.3g", ek, ev)
					}
				}
				if in, _ := s.Residuals(); in != 0 {
					t.Errorf("%d residual bytes in use after every block filled, want 0", in)
				}
			})
		}
	}
}

// TestPerChannelKeys shows why keys are quantized per channel: on key-like
// data with outlier channels, quantizing per channel (K) keeps the ordinary
// channels far more accurate than quantizing per token (V), where an outlier
// sets the scale of its whole group.
func TestPerChannelKeys(t *testing.T) {
	for _, p := range []Precision{Int8, Int4} {
		c := stories(32, 1, p, p)
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := gen(c, 3, 32)
		fill(s, 0, keys, keys, 0, 32)
		gk, gv := readAll(s, 0, 0, 32)
		ordinary := func(rows [][]float32) []float32 {
			var out []float32
			for _, r := range rows {
				for i, v := range r {
					if i%7 != 3 { // keyGen's outlier channels are i%7 == 3
						out = append(out, v)
					}
				}
			}
			return out
		}
		ek, ev := relRMS(ordinary(gk), ordinary(keys)), relRMS(ordinary(gv), ordinary(keys))
		t.Logf("%v on the ordinary key channels: per channel %.3g, per token %.3g", p, ek, ev)
		if ek > ev/2 {
			t.Errorf("%v: per-channel error %.3g is not under half the per-token error %.3g", p, ek, ev)
		}
	}
}

func TestPartialBlocks(t *testing.T) {
	cases := []struct {
		name string
		c    Config
	}{
		{"B32", stories(32, 4, Int8, F16)},
		{"B32", stories(32, 4, Int4, F16)},
		{"B32 KG16", Config{Layers: 3, KVHeads: 4, HeadDim: 8, BlockSize: 32, Blocks: 4, K: Int4, V: Int4, KeyGroup: 16}},
		{"B20 KG8", Config{Layers: 2, KVHeads: 2, HeadDim: 6, BlockSize: 20, Blocks: 4, K: Int8, V: Q8_0, KeyGroup: 8}},
		{"B3", Config{Layers: 2, KVHeads: 1, HeadDim: 8, BlockSize: 3, Blocks: 4, K: Int4, V: FP8}},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/"+tc.c.K.String(), func(t *testing.T) {
			c := tc.c
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			B, KG := c.BlockSize, c.keyGroup()
			keys, vals := gen(c, 9, B)
			// seen[t] holds every read of token t's keys (layer 0) while
			// its group was partial; after[t] the reads once it was full.
			final := make([][][]float32, B)
			for n := 1; n <= B; n++ {
				fill(s, 2, keys, vals, n-1, n)
				gk, _ := readAll(s, 0, 2, n)
				groupLo := (n - 1) / KG * KG
				groupFull := n == B || n%KG == 0
				for tk := range n {
					inPartial := tk >= groupLo && !groupFull
					if inPartial {
						for i, w := range keys[tk] {
							if want := quant.F16ToF32(quant.F32ToF16(w)); math.Float32bits(gk[tk][i]) != math.Float32bits(want) {
								t.Fatalf("after %d tokens, token %d key %d reads %v, want its f16 residual %v exactly", n, tk, i, gk[tk][i], want)
							}
						}
					} else {
						final[tk] = append(final[tk], gk[tk])
					}
				}
				inUse, _ := s.Residuals()
				if want := map[bool]int{true: 0, false: ResidualBytes(c)}[groupFull]; inUse != want {
					t.Fatalf("after %d tokens: %d residual bytes in use, want %d", n, inUse, want)
				}
			}
			// Once its group is full, a token reads the same quantized
			// values from then on, and they are not all its f16 values.
			quantized := 0
			for tk := range B {
				for _, r := range final[tk][1:] {
					if !sameBits(r, final[tk][0]) {
						t.Fatalf("token %d's keys changed after its group was quantized", tk)
					}
				}
				for i, w := range keys[tk] {
					if final[tk][0][i] != quant.F16ToF32(quant.F32ToF16(w)) {
						quantized++
					}
				}
			}
			if quantized == 0 {
				t.Error("no key differs from its f16 value after the block filled: keys were never quantized")
			}
			gk, _ := readAll(s, 0, 2, B)
			checkRows(t, "keys", c, c.K, true, gk, keys)
		})
	}
}

// readBlock returns every layer's K and V reads of block b's first n tokens.
func readBlock(s *Store, b, n int) []float32 {
	var out []float32
	for l := range s.Config().Layers {
		k, v := readAll(s, l, b, n)
		out = append(append(out, flat(k)...), flat(v)...)
	}
	return out
}

func TestCopySaveLoad(t *testing.T) {
	for _, p := range allPrecisions {
		for _, kg := range []int{0, 16} {
			t.Run(fmt.Sprintf("%v/KG%d", p, kg), func(t *testing.T) {
				c := Config{Layers: 3, KVHeads: 4, HeadDim: 8, BlockSize: 32, Blocks: 5, K: p, V: p, KeyGroup: kg}
				s, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				keys, vals := gen(c, 5, 32)
				other, _ := gen(c, 6, 32)
				fill(s, 3, other, other, 0, 32) // block 3 holds something else first
				fill(s, 0, keys, vals, 0, 20)   // 20 of 32 tokens: a partial block
				s.Copy(1, 0)
				saved := s.Save(0, nil)
				if err := s.Load(3, saved); err != nil {
					t.Fatal(err)
				}
				want := readBlock(s, 0, 20)
				for _, b := range []int{1, 3} {
					if got := readBlock(s, b, 20); !sameBits(got, want) {
						t.Errorf("block %d after copy/load reads differently from the partial block 0", b)
					}
				}
				if p.keyResidual() {
					if in, _ := s.Residuals(); in != 3*ResidualBytes(c) {
						t.Errorf("%d residual bytes in use for 3 partial blocks, want %d", in, 3*ResidualBytes(c))
					}
				}
				// Finishing all three the same way must give the same blocks.
				for _, b := range []int{0, 1, 3} {
					fill(s, b, keys, vals, 20, 32)
				}
				want = readBlock(s, 0, 32)
				for _, b := range []int{1, 3} {
					if got := readBlock(s, b, 32); !sameBits(got, want) {
						t.Errorf("block %d, finished after copy/load, reads differently from block 0", b)
					}
				}
				if in, _ := s.Residuals(); in != 0 {
					t.Errorf("%d residual bytes in use after every block filled, want 0", in)
				}
				// Save/Load of a full block, and Copy over a partial one.
				fill(s, 4, keys, vals, 0, 7)
				s.Copy(4, 0)
				if got := readBlock(s, 4, 32); !sameBits(got, want) {
					t.Error("copy of a full block over a partial one reads differently")
				}
				if in, _ := s.Residuals(); in != 0 {
					t.Errorf("%d residual bytes in use after a full block was copied over the partial one, want 0", in)
				}
				if err := s.Load(2, s.Save(0, nil)); err != nil {
					t.Fatal(err)
				}
				if got := readBlock(s, 2, 32); !sameBits(got, want) {
					t.Error("full block after save/load reads differently")
				}
			})
		}
	}
}

func TestLoadErrors(t *testing.T) {
	c := Config{Layers: 2, KVHeads: 2, HeadDim: 8, BlockSize: 20, Blocks: 3, K: Int4, V: Int8, KeyGroup: 8}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	keys, vals := gen(c, 1, 20)
	fill(s, 0, keys, vals, 0, 12) // group 0 full, group 1 partial, group 2 empty
	fill(s, 2, keys, vals, 0, 20)
	good := s.Save(0, nil)
	before := readBlock(s, 2, 20)

	other, _ := New(Config{Layers: 2, KVHeads: 2, HeadDim: 8, BlockSize: 20, Blocks: 3, K: Int8, V: Int8, KeyGroup: 8})
	otherSaved := other.Save(0, nil)

	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	kp := s.k.(*keyPlane)
	flagAt := headerLen + kp.layerFixed() // layer 0, group 0's residual flag
	maskAt := headerLen + kp.sh.bytes()   // layer 0's mask word
	kScaleAt := headerLen + kp.sh.data    // layer 0's first key metadata (int4: head 0, group 0)
	D := c.HeadDim                        // its scale codes' low bytes, zero codes', then three bit planes
	vp := s.v.(*rowPlane)
	vScaleAt := len(good) - c.Layers*vp.sh.bytes() + vp.sh.data // layer 0's first value scale
	cases := []struct {
		name  string
		block int
		data  []byte
		want  string
	}{
		{"block out of range", 3, good, "out of range"},
		{"negative block", -1, good, "out of range"},
		{"empty", 2, nil, "header"},
		{"bad magic", 2, mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "header"},
		{"other precision", 2, otherSaved, "key precision"},
		{"truncated keys", 2, good[:headerLen+10], "truncated"},
		{"truncated values", 2, good[:len(good)-1], "truncated"},
		{"trailing byte", 2, append(append([]byte(nil), good...), 0), "left over"},
		{"residual missing", 2, mutate(func(b []byte) []byte {
			// group 0 is full (no residual), group 1 partial: drop its residual
			f := flagAt + 1
			b[f] = 0
			return append(b[:f+1], b[f+1+kp.pool.size:]...)
		}), "missing"},
		{"residual on full group", 2, mutate(func(b []byte) []byte { b[flagAt] = 1; return b }), "residual"},
		{"bad flag", 2, mutate(func(b []byte) []byte { b[flagAt] = 7; return b }), "flag"},
		{"mask past block", 2, mutate(func(b []byte) []byte { b[maskAt+3] |= 0x10; return b }), "past the block size"},
		{"key scale infinite", 2, mutate(func(b []byte) []byte { b[kScaleAt+5] = 0xf0; b[kScaleAt+2*D] |= 1 << 5; return b }), "scale code 0x1f0"},
		{"key zero point NaN", 2, mutate(func(b []byte) []byte {
			b[kScaleAt+D+2] = 0xff
			b[kScaleAt+2*D+1] |= 1 << 2
			b[kScaleAt+2*D+2] &^= 1 << 2
			return b
		}), "zero point code 0x1ff"},
		{"key zero point NaN, negative", 2, mutate(func(b []byte) []byte {
			b[kScaleAt+D+3] = 0xf0
			b[kScaleAt+2*D+1] |= 1 << 3
			b[kScaleAt+2*D+2] |= 1 << 3
			return b
		}), "zero point code 0x3f0"},
		{"value scale NaN", 2, mutate(func(b []byte) []byte { b[vScaleAt+1] = 0xff; return b }), "scale code 0xff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Load(tc.block, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: error %v, want one mentioning %q", err, tc.want)
			}
			if got := readBlock(s, 2, 20); !sameBits(got, before) {
				t.Fatal("a failed Load changed the block")
			}
		})
	}
}

func TestReset(t *testing.T) {
	c := stories(32, 2, Int4, Int4)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	keys, vals := gen(c, 11, 32)
	fill(s, 1, keys, vals, 0, 32)

	// Without Reset, writing slot 5 again re-quantizes the full group.
	newKeys, newVals := gen(c, 12, 1)
	fill(s, 1, [][]float32{5: newKeys[0]}, [][]float32{5: newVals[0]}, 5, 6)
	want := append([][]float32(nil), keys...)
	want[5] = newKeys[0]
	gk, _ := readAll(s, 0, 1, 32)
	// The other tokens are rounded twice, so allow twice the error.
	checkRowsScaled(t, "rewritten keys", c, Int4, true, gk, want, 2)

	// After Reset the block starts empty: one token reads back as f16.
	fill(s, 1, keys, vals, 0, 20)
	s.Reset(1)
	if in, _ := s.Residuals(); in != 0 {
		t.Errorf("%d residual bytes in use after Reset, want 0", in)
	}
	fill(s, 1, newKeys, newVals, 0, 1)
	gk, _ = readAll(s, 0, 1, 1)
	for i, w := range newKeys[0] {
		if want := quant.F16ToF32(quant.F32ToF16(w)); gk[0][i] != want {
			t.Fatalf("after Reset, key %d reads %v, want its f16 value %v", i, gk[0][i], want)
		}
	}
}

func TestIndexPanics(t *testing.T) {
	s, err := New(stories(4, 2, Int4, F16))
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 32)
	dst := make([]float32, 32*4)
	cases := []struct {
		name string
		f    func()
	}{
		{"Write layer", func() { s.Write(5, 0, 0, row, row) }},
		{"Write negative block", func() { s.Write(0, -1, 0, row, row) }},
		{"Write slot", func() { s.Write(0, 0, 4, row, row) }},
		{"Write short row", func() { s.Write(0, 0, 0, row[:31], row) }},
		{"ReadK n", func() { s.ReadK(0, 0, 5, make([]float32, 32*5)) }},
		{"ReadV short dst", func() { s.ReadV(0, 0, 4, dst[:100]) }},
		{"ReadK block", func() { s.ReadK(0, 2, 1, dst) }},
		{"Copy", func() { s.Copy(2, 0) }},
		{"Save", func() { s.Save(-1, nil) }},
		{"Reset", func() { s.Reset(9) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, "kvstore:") || !strings.Contains(msg, "out of range") {
					t.Fatalf("recovered %v, want a kvstore out-of-range panic", r)
				}
			}()
			tc.f()
		})
	}
}

// TestConcurrent writes distinct (block, slot)s and reads blocks from several
// goroutines at once; run with -race. Reads must equal a sequential store's.
func TestConcurrent(t *testing.T) {
	for _, kv := range [][2]Precision{{Int4, Int8}, {F16, F16}, {Q8_0, FP8}} {
		t.Run(kv[0].String()+"/"+kv[1].String(), func(t *testing.T) {
			c := Config{Layers: 2, KVHeads: 4, HeadDim: 8, BlockSize: 16, Blocks: 6, K: kv[0], V: kv[1], KeyGroup: 8}
			par, _ := New(c)
			seq, _ := New(c)
			keys, vals := gen(c, 21, 16)
			for b := range c.Blocks {
				fill(seq, b, keys, vals, 0, 16)
			}
			var wg sync.WaitGroup
			// Two goroutines per block, taking alternate slots.
			for b := range c.Blocks {
				for part := range 2 {
					wg.Go(func() {
						for tk := part; tk < 16; tk += 2 {
							for l := range c.Layers {
								par.Write(l, b, tk, shift(keys[tk], l), shift(vals[tk], l))
							}
						}
					})
				}
			}
			wg.Wait()
			want := readBlock(seq, 0, 16)
			// Every block from several goroutines, block 0 from all.
			for g := range 4 {
				wg.Go(func() {
					for _, b := range []int{0, 1 + g} {
						if got := readBlock(par, b, 16); !sameBits(got, want) {
							t.Errorf("block %d read concurrently differs from the sequential store", b)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestFP8(t *testing.T) {
	// Every finite code round-trips.
	for c := range 256 {
		v := fp8Table[c]
		if v != v {
			if c&0x7f != 0x7f {
				t.Errorf("code %#x decodes to NaN", c)
			}
			continue
		}
		if got := fp8Encode(v); got != uint8(c) {
			t.Errorf("fp8Encode(%v) = %#x, want %#x", v, got, c)
		}
	}
	// Known values of E4M3FN.
	for _, tc := range []struct {
		code uint8
		v    float32
	}{{0x7e, 448}, {0x01, 1.0 / 512}, {0x08, 1.0 / 64}, {0x38, 1}, {0xb8, -1}, {0x3c, 1.5}} {
		if fp8Table[tc.code] != tc.v {
			t.Errorf("code %#x decodes to %v, want %v", tc.code, fp8Table[tc.code], tc.v)
		}
	}
	// Every value rounds to the nearest code, ties to even; past 448 saturates.
	nearest := func(x float32) uint8 {
		best, bestErr := uint8(0), math.Inf(1)
		for c := range 256 {
			v := fp8Table[c]
			if v != v || (c == 0x80) {
				continue
			}
			e := math.Abs(float64(v) - float64(x))
			if e < bestErr || (e == bestErr && c&1 == 0) {
				best, bestErr = uint8(c), e
			}
		}
		return best
	}
	for i := -5000; i <= 5000; i++ {
		x := float32(i) * 0.0931
		if i%2 == 0 {
			x = float32(i) * 1.3e-5
		}
		want := nearest(x)
		if x >= 448 {
			want = 0x7e
		} else if x <= -448 {
			want = 0xfe
		}
		got := fp8Encode(x)
		if fp8Table[got] != fp8Table[want] {
			t.Fatalf("fp8Encode(%v) = %v (%#x), nearest is %v (%#x)", x, fp8Table[got], got, fp8Table[want], want)
		}
	}
	for _, x := range []float32{1e9, float32(math.Inf(1))} {
		if got := fp8Encode(x); got != 0x7e {
			t.Errorf("fp8Encode(%v) = %#x, want 0x7e (saturated)", x, got)
		}
	}
	if got := fp8Encode(float32(math.NaN())); got != 0 {
		t.Errorf("fp8Encode(NaN) = %#x, want 0", got)
	}
}

// TestHugeValues checks that values past f16's range saturate instead of
// producing NaN or infinite scales.
func TestHugeValues(t *testing.T) {
	for _, p := range []Precision{Q8_0, Int8, Int4, FP8} {
		c := stories(4, 1, p, p)
		s, _ := New(c)
		row := make([]float32, 32)
		for i := range row {
			row[i] = float32(i-16) * 1e7
		}
		for tk := range 4 {
			s.Write(0, 0, tk, row, row)
		}
		gk, gv := readAll(s, 0, 0, 4)
		for _, v := range append(flat(gk), flat(gv)...) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%v: huge input read back as %v", p, v)
			}
		}
	}
}

// TestResidualPeak prefills 100 tokens layer by layer, as a batched forward
// pass does, and checks that residual memory never exceeds one partial key
// group per layer written so far plus the one being filled.
func TestResidualPeak(t *testing.T) {
	for _, p := range []Precision{Int8, Int4} {
		c := stories(32, 4, p, F16)
		s, _ := New(c)
		slot := ResidualBytes(c) / c.Layers
		keys, vals := gen(c, 4, 100)
		for l := range c.Layers {
			for tk := range 100 {
				s.Write(l, tk/32, tk%32, keys[tk], vals[tk])
				if in, _ := s.Residuals(); in > (l+1)*slot {
					t.Fatalf("%v: layer %d token %d: %d residual bytes held, want at most %d", p, l, tk, in, (l+1)*slot)
				}
			}
		}
		in, alloc := s.Residuals()
		if in != ResidualBytes(c) || alloc > ResidualBytes(c)+slot {
			t.Errorf("%v: after the prefill %d residual bytes held and %d allocated, want %d and at most %d", p, in, alloc, ResidualBytes(c), ResidualBytes(c)+slot)
		}
	}
}

func TestH2F(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		if got, want := math.Float32bits(h2f(h)), math.Float32bits(quant.F16ToF32(h)); got != want {
			t.Fatalf("h2f(%#04x) = %#08x, want %#08x", h, got, want)
		}
	}
}

// FuzzLoad feeds Load corrupted and truncated saved blocks: it must return
// an error or load them, never panic, and a loaded block must save back to
// the same bytes.
func FuzzLoad(f *testing.F) {
	c := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockSize: 12, Blocks: 2, K: Int4, V: FP8, KeyGroup: 8}
	s, err := New(c)
	if err != nil {
		f.Fatal(err)
	}
	keys, vals := gen(c, 2, 12)
	fill(s, 0, keys, vals, 0, 10)
	saved := s.Save(0, nil)
	f.Add(saved)
	f.Add(saved[:len(saved)/2])
	f.Add(saved[:headerLen])
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := s.Load(1, data); err != nil {
			return
		}
		if again := s.Save(1, nil); string(again) != string(data) {
			t.Fatalf("block loaded from %d bytes saves back as %d different bytes", len(data), len(again))
		}
	})
}

// TestLoadCorrupt flips bytes of saved blocks and cuts them short, for every
// precision: Load must never panic.
func TestLoadCorrupt(t *testing.T) {
	for _, p := range allPrecisions {
		c := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockSize: 12, Blocks: 2, K: p, V: p, KeyGroup: 8}
		s, _ := New(c)
		keys, vals := gen(c, 3, 12)
		fill(s, 0, keys, vals, 0, 10)
		saved := s.Save(0, nil)
		rng := newKeyGen(uint64(p), 1).rng
		for i := range 300 {
			data := append([]byte(nil), saved...)
			if i%3 == 0 {
				data = data[:rng.IntN(len(data))]
			} else {
				data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
			}
			if err := s.Load(1, data); err == nil {
				if again := s.Save(1, nil); string(again) != string(data) {
					t.Fatalf("%v: a corrupted block loaded but saves back differently", p)
				}
			}
		}
	}
}

// TestLoadKeyBaseScale checks saved symmetric (int8, fp8) keys: a base
// scale code past E5M3's largest finite one is refused, while the 4-bit
// multipliers after it may take any value.
func TestLoadKeyBaseScale(t *testing.T) {
	for _, p := range []Precision{Int8, FP8} {
		c := Config{Layers: 1, KVHeads: 2, HeadDim: 6, BlockSize: 4, Blocks: 2, K: p, V: F16}
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		keys, vals := gen(c, 5, 4)
		fill(s, 0, keys, vals, 0, 4)
		saved := s.Save(0, nil)
		kp := s.k.(*keyPlane)
		base := headerLen + kp.sh.data + keyScaleBytes(c.HeadDim) // head 1's base
		for _, tc := range []struct {
			at   int
			code byte
			ok   bool
		}{{base, 0xf7, true}, {base, 0xf8, false}, {base + 1, 0xff, true}, {base - 1, 0xff, true}} {
			data := append([]byte(nil), saved...)
			data[tc.at] = tc.code
			err := s.Load(1, data)
			if (err == nil) != tc.ok {
				t.Errorf("%v: byte %d set to %#x: Load error %v, want ok %v", p, tc.at-headerLen-kp.sh.data, tc.code, err, tc.ok)
			}
		}
	}
}
