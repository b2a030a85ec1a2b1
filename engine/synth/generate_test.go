package synth

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/engine/quant"
)

// TestHalvesMatchQuantize checks that the F16 and BF16 table lookup writes
// exactly the bytes of drawing values and quantizing them.
func TestHalvesMatchQuantize(t *testing.T) {
	tests := []struct {
		typ   quant.Type
		sigma float64
		n     int
	}{
		{quant.F16, 1, 64},
		{quant.F16, 0.0221, 99},
		{quant.F16, 1e-6, 8}, // subnormal halves
		{quant.BF16, 0.5, 64},
		{quant.BF16, 3e-3, 7},
	}
	tables := &halfTables{}
	for _, tc := range tests {
		got := make([]byte, 2*tc.n)
		halves(got, rand.NewPCG(5, 6), tables.get(tc.typ, tc.sigma))
		x := make([]float32, tc.n)
		uniform(x, rand.NewPCG(5, 6), tc.sigma)
		want := make([]byte, 2*tc.n)
		if err := quant.Quantize(tc.typ, x, want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s sigma %g: table bytes differ from quantized draws", tc.typ, tc.sigma)
		}
	}
	if len(tables.tbl) != len(tests) {
		t.Errorf("%d tables for %d type and sigma pairs", len(tables.tbl), len(tests))
	}
	tables.get(quant.F16, 1)
	if len(tables.tbl) != len(tests) {
		t.Errorf("a table was made again")
	}
}

func TestNoMinus128(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	tests := []uint64{0, 0x8080808080808080, 0x0080008000800080, 0x7f81807f00ff8001, 0xffffffffffffffff}
	for range 1000 {
		u := r.Uint64()
		// Plant 0x80 bytes often.
		for b := range 8 {
			if r.IntN(3) == 0 {
				u = u&^(0xff<<(8*b)) | 0x80<<(8*b)
			}
		}
		tests = append(tests, u)
	}
	for _, u := range tests {
		want := u
		for b := range 8 {
			if byte(u>>(8*b)) == 0x80 {
				want &^= 0xff << (8 * b)
			}
		}
		if got := noMinus128(u); got != want {
			t.Fatalf("noMinus128(%#016x) = %#016x, want %#016x", u, got, want)
		}
	}
}

// TestPooled fills a tensor from block pools and checks that every block is
// one of its pool's, that the pools differ by scale, and that the values
// have the scale asked for.
func TestPooled(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q5_0, quant.Q4_1} { // TestPooledModel covers a K-quant
		const cols, rows, quiet = 1024, 300, 20
		sigma := 1 / 32.0
		rowBytes, _ := typ.RowBytes(cols)
		spec := tensorSpec{info: gguf.TensorInfo{Name: "w", Dims: []uint64{cols, rows}, Type: typ, Size: uint64(rows * rowBytes)}, sigma: sigma, quiet: quiet, pooled: true}
		data := make([]byte, rows*rowBytes)
		if err := fill(data, []tensorSpec{spec}, 9); err != nil {
			t.Fatal(err)
		}
		again := make([]byte, len(data))
		fill(again, []tensorSpec{spec}, 9)
		if !bytes.Equal(data, again) {
			t.Fatalf("%s: the same seed gave different bytes", typ)
		}
		loud, _ := newBlockPool(poolKey{typ, sigma}, 9)
		soft, _ := newBlockPool(poolKey{typ, sigma * quietScale}, 9)
		members := func(p *blockPool) map[string]bool {
			m := map[string]bool{}
			for i := 0; i < len(p.data); i += p.blockBytes {
				m[string(p.data[i:i+p.blockBytes])] = true
			}
			return m
		}
		inLoud, inSoft := members(loud), members(soft)
		distinct := map[string]bool{}
		for i := 0; i < len(data); i += loud.blockBytes {
			b := string(data[i : i+loud.blockBytes])
			pool := inLoud
			if i < quiet*rowBytes {
				pool = inSoft
			}
			if !pool[b] {
				t.Fatalf("%s: block at byte %d is not from its pool", typ, i)
			}
			distinct[b] = true
		}
		if n := len(distinct); n < 1000 {
			t.Errorf("%s: only %d distinct blocks", typ, n)
		}
		x := make([]float32, cols*(rows-quiet))
		if err := quant.Dequantize(typ, data[quiet*rowBytes:], x); err != nil {
			t.Fatal(err)
		}
		var s2 float64
		for _, v := range x {
			s2 += float64(v) * float64(v)
		}
		if rms := math.Sqrt(s2 / float64(len(x))); math.Abs(rms/sigma-1) > 0.05 {
			t.Errorf("%s: values have RMS %.4g, want %.4g", typ, rms, sigma)
		}
	}
}
