package native

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"kvscope/engine/backend"
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// TestDeviceBandwidth measures, when KVSCOPE_DEVICE_BENCH=1, the device
// backend's decode attention kernel and a Q4_0 GEMV in GB/s of K/V or
// weights read, beside the device's copy bandwidth (a device-to-device copy:
// bytes read plus bytes written, per second) measured in the same run.
// native/cuda/check.sh runs it with KVSCOPE_BACKEND=cuda; without, it runs
// small sizes on the CPU library as a check of the measurement itself.
func TestDeviceBandwidth(t *testing.T) {
	if os.Getenv("KVSCOPE_DEVICE_BENCH") == "" {
		t.Skip("set KVSCOPE_DEVICE_BENCH=1 to measure the device backend's bandwidth")
	}
	d := hostDevice(t)
	big := !d.host()
	scale := 1
	if big {
		scale = 16
	}
	t.Logf("%s on %s", d.Name(), d.DeviceName())

	// timeIt runs f iters times, then waits for the device.
	timeIt := func(iters int, f func()) time.Duration {
		f() // warm up
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range iters {
			f()
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start) / time.Duration(iters)
	}
	gbs := func(bytes int64, per time.Duration) float64 { return float64(bytes) / per.Seconds() / 1e9 }

	// Copy bandwidth.
	size := int64(32<<20) * int64(scale)
	src, err := d.alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.d.free(src)
	defer d.d.free(dst)
	d.d.memset(src, 1, size)
	per := timeIt(10, func() { d.d.d2d(dst, src, size) })
	copyBW := gbs(2*size, per)
	fmt.Printf("device copy: %d MiB in %v: %.1f GB/s (read + write)\n", size>>20, per, copyBW)

	// Decode attention: one row over a long context, TinyLlama/Llama-3-like
	// heads (32 query heads over 8 KV heads of 128).
	for _, p := range []kvstore.Precision{kvstore.F16, kvstore.Q8_0} {
		ctx := 2048 * scale
		cfg := kvstore.Config{Layers: 1, KVHeads: 8, HeadDim: 128, BlockSize: 16, Blocks: ctx / 16, K: p, V: p}
		c, err := d.NewCache(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dc := c.(*devCache)
		for i, pl := range []devPlane{dc.k, dc.v} { // any values: the time does not depend on them
			for j, base := range []uintptr{pl.data, pl.scale, pl.zero} {
				if base != 0 {
					d.d.memset(base, 0x11, dc.sizes[i][j]*int64(cfg.Blocks))
				}
			}
		}
		heads := 32
		q, _ := d.NewBuffer(heads * cfg.HeadDim)
		out, _ := d.NewBuffer(heads * cfg.HeadDim)
		table := make([]int32, cfg.Blocks)
		for i := range table {
			table[i] = int32(i)
		}
		rows := &backend.Rows{Pos: []int32{int32(ctx - 1)}, Seqs: []int32{0, 1}, TableStart: []int32{0, int32(len(table))}, Tables: table}
		per := timeIt(20, func() { d.Attention(out, c, 0, q, heads, rows) })
		bytes := int64(kvstore.BlockBytes(cfg)) * int64(cfg.Blocks) // K and V, every block
		bw := gbs(bytes, per)
		fmt.Printf("decode attention, %s K/V, %d positions, 32/8 heads of 128: %v, %.1f GB/s of K/V, %.0f%% of the copy bandwidth\n",
			p, ctx, per, bw, 100*bw/copyBW)
		q.Free()
		out.Free()
	}

	// Q4_0 GEMV (and GEMM) on a weight far larger than the caches.
	rows, cols := 1024*scale, 4096
	if big {
		rows, cols = 16384, 8192
	}
	rb, _ := quant.Q4_0.RowBytes(cols)
	w := make([]byte, rows*rb)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < len(w); b += 18 { // scales of 1/64: finite
		binary.LittleEndian.PutUint16(w[b:], quant.F32ToF16(1.0/64))
	}
	h, err := d.Weight(quant.Q4_0, rows, cols, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	for _, n := range []int{1, 8, 64} {
		x, _ := d.NewBuffer(n * cols)
		out, _ := d.NewBuffer(n * rows)
		per := timeIt(20, func() { d.MatMul(out, h, x, n) })
		bw := gbs(int64(len(w)), per)
		fmt.Printf("Q4_0 %s %d×%d, %d vector(s): %v, %.1f GB/s of weights, %.0f%% of the copy bandwidth\n",
			map[bool]string{true: "GEMV", false: "GEMM"}[n <= 8], rows, cols, n, per, bw, 100*bw/copyBW)
		x.Free()
		out.Free()
	}
}
