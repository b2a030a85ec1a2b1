package model

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvscope/engine/backend"
	"kvscope/engine/backend/native"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
	"kvscope/internal/testshared"
)

// deviceBackend returns the device backend the tests run on: CUDA (or
// Metal) when KVSCOPE_BACKEND names it (native/cuda/check.sh, on a machine
// with a GPU), the CUDA library emulated on the CPU under TestEmulatedCUDA,
// else the device code path over the CPU library's host memory
// (native.NewHostDevice), skipping when that is not built.
func deviceBackend(t *testing.T) *native.Device {
	t.Helper()
	if emulatedCUDA != nil {
		return emulatedCUDA
	}
	if k := os.Getenv(native.BackendEnv); k == "cuda" || k == "metal" {
		d, err := native.OpenDevice(k)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lib, err := native.Load("")
	if err != nil {
		t.Skipf("the native library is not built (make native): %v", err)
	}
	d, err := native.NewHostDevice(lib)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// emulatedCUDA is the device deviceBackend returns while TestEmulatedCUDA
// runs.
var emulatedCUDA *native.Device

// TestEmulatedCUDA runs TestDeviceBackend and TestNativeWideGroups on the
// CUDA library's own sources built on HIP-CPU, whose kernels run on the CPU
// (make cuda-emu, native/README.md), skipping when it is not built.
func TestEmulatedCUDA(t *testing.T) {
	d, err := native.OpenEmulated()
	if errors.Is(err, native.ErrNotFound) && os.Getenv(native.EmuDirEnv) == "" {
		t.Skipf("the CUDA library emulated on the CPU is not built (make cuda-emu): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	emulatedCUDA = d
	defer func() { emulatedCUDA = nil }()
	t.Run("DeviceBackend", TestDeviceBackend)
	t.Run("NativeWideGroups", TestNativeWideGroups)
}

// loadOn opens a shared model on be.
func loadOn(t *testing.T, be backend.Backend, rel string) *Model {
	t.Helper()
	m, err := Load(testshared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Use(be); err != nil {
		t.Fatal(err)
	}
	return m
}

// devSeq makes a cache on the model's backend for one sequence of up to
// maxTokens, its blocks in the order given (or 0, 1, 2, ...).
func devSeq(t *testing.T, m *Model, bs, maxTokens int, k, v kvstore.Precision) (backend.Cache, []int) {
	t.Helper()
	n := (maxTokens + bs - 1) / bs
	kv, err := m.NewCache(m.CacheConfig(bs, n, k, v))
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int, n)
	for i := range blocks {
		blocks[i] = i
	}
	return kv, blocks
}

// devForward runs tokens at positions start.. through kv and returns every
// row's logits.
func devForward(t *testing.T, m *Model, kv backend.Cache, blocks, tokens []int, start int) [][]float32 {
	t.Helper()
	var b Batch
	for i, tok := range tokens {
		b.Add(tok, start+i, blocks, true)
	}
	logits, err := m.Forward(kv, &b)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestDeviceBackend runs the model's accuracy and invariance tests on the
// device backend with its caches made by NewCache: device memory, moved
// by device copies. Here that is the device code path over the CPU
// library's host memory; with KVSCOPE_BACKEND=cuda it is the GPU. The
// bounds are those of TestStoriesGreedy, TestStoriesTeacherForced,
// TestParity and TestParityArchitectures.
func TestDeviceBackend(t *testing.T) {
	be := deviceBackend(t)
	t.Logf("%s on %s (%s)", be.Name(), be.DeviceName(), be.File())
	defer func() {
		if fb := be.Fallbacks(); len(fb) > 0 {
			t.Logf("fallbacks: %v", fb)
		}
	}()

	t.Run("StoriesGreedy", func(t *testing.T) {
		m := loadOn(t, be, "models/stories260K.gguf")
		for _, c := range testshared.Greedy(t, testshared.Path(t, "reference/stories260K-greedy.txt")) {
			kv, blocks := devSeq(t, m, 16, 256, kvstore.F16, kvstore.F16)
			logits := devForward(t, m, kv, blocks, c.PromptIDs, 0)
			next := sample.Greedy(logits[len(logits)-1])
			var got []int
			for pos := len(c.PromptIDs); len(got) < len(c.OutputIDs); pos++ {
				got = append(got, next)
				next = sample.Greedy(devForward(t, m, kv, blocks, []int{next}, pos)[0])
			}
			for i := range got {
				if got[i] != c.OutputIDs[i] {
					t.Fatalf("%q: token %d: got %d, want %d", c.Prompt, i, got[i], c.OutputIDs[i])
				}
			}
		}
	})

	t.Run("StoriesTeacherForced", func(t *testing.T) {
		m := loadOn(t, be, "models/stories260K.gguf")
		ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))
		want := testshared.Logits(t, testshared.Path(t, "reference/stories260K-textA.logits.f32"), m.Vocab)
		kv, blocks := devSeq(t, m, 16, len(ids), kvstore.F16, kvstore.F16)
		got := devForward(t, m, kv, blocks, ids, 0)
		rms, kl, err := testshared.Compare(got, want)
		if err != nil {
			t.Fatal(err)
		}
		ppl := perplexity(got, ids)
		t.Logf("textA: RMS %.3g of std, KL %.3g, perplexity %.4f", rms, kl, ppl)
		if rms > 1e-3 || math.Abs(ppl-3.6615) > 0.001 {
			t.Errorf("RMS %.3g of std (want ≤ 1e-3), perplexity %.4f (want 3.6615 ± 0.001)", rms, ppl)
		}
	})

	t.Run("Parity", func(t *testing.T) {
		ids := testshared.IDs(t, testshared.Path(t, "models/parity/parity.ids"))
		gpt2 := testshared.IDs(t, testshared.Path(t, "models/parity/parity-gpt2.ids"))
		bpe := testshared.IDs(t, testshared.Path(t, "models/parity/parity-bpe.ids"))
		for _, name := range []string{"f32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M",
			"Q5_K_M", "Q6_K", "IQ4_NL", "qwen2-Q8_0", "llama3-Q8_0", "qwen3-Q8_0", "phi3-F32", "phi3-Q8_0", "gemma3-F32", "gemma3-Q8_0"} {
			t.Run(name, func(t *testing.T) {
				m := loadOn(t, be, "models/parity/parity-"+name+".gguf")
				in := ids
				switch {
				case strings.HasPrefix(name, "qwen2"):
					in = gpt2
				case strings.HasPrefix(name, "llama3"), strings.HasPrefix(name, "qwen3"):
					in = bpe
				}
				want := testshared.Logits(t, filepath.Join(testshared.Dir(), "models", "parity", "parity-"+name+".logits.f32"), m.Vocab)
				kv, blocks := devSeq(t, m, 16, len(in), kvstore.F16, kvstore.F16)
				rms, kl, err := testshared.Compare(devForward(t, m, kv, blocks, in, 0), want)
				if err != nil {
					t.Fatal(err)
				}
				// TestParity's bounds, and TestParityArchitectures' for
				// the newer architectures.
				maxRMS, maxKL := 0.03, 1e-4
				if strings.Contains(name, "-") {
					maxRMS, maxKL = 0.03, 2e-3
					if strings.HasSuffix(name, "F32") {
						maxRMS, maxKL = 0.005, 2e-5
					}
				}
				t.Logf("parity-%-12s RMS %6.3f%% of std, mean KL %.2e (bounds %.1f%%, %.0e)", name, 100*rms, kl, 100*maxRMS, maxKL)
				if rms > maxRMS || kl > maxKL {
					t.Errorf("RMS %.3g%% of std and KL %.3g; want ≤ %.3g%% and ≤ %.0e", 100*rms, kl, 100*maxRMS, maxKL)
				}
			})
		}
	})

	t.Run("BatchInvariance", func(t *testing.T) {
		m := loadOn(t, be, "models/stories260K.gguf")
		a := []int{1, 403, 407, 261, 378, 432, 383}
		b := []int{1, 274, 287, 269, 345}
		kv1, blocks1 := devSeq(t, m, 4, 16, kvstore.F16, kvstore.F16)
		alone := devForward(t, m, kv1, blocks1, a, 0)
		kv, err := m.NewCache(m.CacheConfig(4, 8, kvstore.F16, kvstore.F16))
		if err != nil {
			t.Fatal(err)
		}
		ta, tb := []int{5, 2, 7, 0}, []int{1, 3, 6, 4}
		var batch Batch
		for i := range max(len(a), len(b)) {
			if i < len(b) {
				batch.Add(b[i], i, tb, true)
			}
			if i < len(a) {
				batch.Add(a[i], i, ta, true)
			}
		}
		logits, err := m.Forward(kv, &batch)
		if err != nil {
			t.Fatal(err)
		}
		for i := range batch.Len() {
			if batch.Blocks[i][0] != ta[0] {
				continue
			}
			for v, x := range logits[i] {
				if x != alone[batch.Pos[i]][v] {
					t.Fatalf("position %d: batched logit %d = %v, alone %v", batch.Pos[i], v, x, alone[batch.Pos[i]][v])
				}
			}
		}
	})

	t.Run("BlockSizeInvariance", func(t *testing.T) {
		// Through a cache manager (paged and contiguous) on the device
		// cache; f16 K/V, whose attention sums do not depend on the
		// layout on any library.
		m := loadOn(t, be, "models/stories260K.gguf")
		ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))[:100]
		var ref [][]float32
		for _, tc := range []struct {
			bs    int
			alloc kvcache.Allocator
		}{{16, kvcache.Paged}, {1, kvcache.Paged}, {7, kvcache.Paged}, {256, kvcache.Paged}, {16, kvcache.Contiguous}} {
			sc := m.CacheConfig(tc.bs, (len(ids)+tc.bs-1)/tc.bs+4, kvstore.F16, kvstore.F16)
			kv, err := m.NewCache(sc)
			if err != nil {
				t.Fatal(err)
			}
			bb := kvstore.BlockBytes(sc)
			mgr, err := kvcache.New(kvcache.Config{BlockSize: tc.bs, BlockBytes: bb, Budget: int64(sc.Blocks * bb), Allocator: tc.alloc, MaxLen: len(ids)}, kv)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mgr.Allocate(99, make([]int32, min(2*tc.bs, len(ids))), kvcache.SeqOptions{MaxLen: min(2*tc.bs, len(ids))}); err != nil {
				t.Fatal(err)
			}
			tokens := make([]int32, len(ids))
			for i, id := range ids {
				tokens[i] = int32(id)
			}
			if _, err := mgr.Allocate(1, tokens, kvcache.SeqOptions{}); err != nil {
				t.Fatal(err)
			}
			got := devForward(t, m, kv, mgr.BlockTable(1), ids, 0)
			if ref == nil {
				ref = got
				continue
			}
			for r := range ref {
				for v := range ref[r] {
					if got[r][v] != ref[r][v] {
						t.Fatalf("block size %d %s: row %d logit %d: %v, block size 16 gives %v", tc.bs, tc.alloc, r, v, got[r][v], ref[r][v])
					}
				}
			}
		}
	})

	t.Run("SwapAndCopy", func(t *testing.T) {
		// A block saved, loaded into another block and copied (swap and
		// copy on write through kvcache.Storage) gives the same logits.
		// The copied block is partly filled: with int8/int4 keys its
		// key group is still at f16 in a residual slot.
		m := loadOn(t, be, "models/stories260K.gguf")
		ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))[:20]
		for _, p := range []kvstore.Precision{kvstore.F16, kvstore.Q8_0, kvstore.Int8, kvstore.Int4} {
			kv, err := m.NewCache(m.CacheConfig(8, 8, p, p))
			if err != nil {
				t.Fatal(err)
			}
			devForward(t, m, kv, []int{0, 1, 2}, ids, 0)
			saved := kv.Save(1, nil)
			if err := kv.Load(5, saved); err != nil {
				t.Fatal(err)
			}
			kv.Copy(6, 2)
			kv.Reset(1)
			next := devForward(t, m, kv, []int{0, 5, 6, 7}, []int{ids[len(ids)-1]}, len(ids))
			ref := devForward(t, m, kv, []int{0, 1, 2, 3}, []int{ids[len(ids)-1]}, len(ids))
			for v := range ref[0] {
				if next[0][v] != ref[0][v] {
					t.Fatalf("%s: logit %d after swap and copy %v, in place %v", p, v, next[0][v], ref[0][v])
				}
			}
			if err := kv.Load(3, saved[:len(saved)-1]); err == nil {
				t.Errorf("%s: a truncated saved block loaded", p)
			}
		}
	})

	t.Run("ShiftKeys", func(t *testing.T) {
		// Keys shifted on the device (ReadKV, RoPE, WriteKV) give the
		// logits that the Go backend gives after the same shift: within
		// 1e-3 of std with f16 keys. With int4 keys the bound is 1e-2:
		// the device quantizes each rewritten key group once, where the
		// Go store quantizes a full group again at each row it takes.
		ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))[:12]
		for _, tc := range []struct {
			k      kvstore.Precision
			maxRMS float64
		}{{kvstore.F16, 1e-3}, {kvstore.Int4, 1e-2}} {
			var out [2][][]float32
			for i, b := range []backend.Backend{be, backend.Go()} {
				m := loadOn(t, b, "models/stories260K.gguf")
				kv, blocks := devSeq(t, m, 4, 32, tc.k, kvstore.F16)
				devForward(t, m, kv, blocks, ids, 0)
				m.ShiftKeys(kv, blocks, 4, 12, -3)
				out[i] = devForward(t, m, kv, blocks, []int{ids[0]}, 12)
			}
			rms, _, err := testshared.Compare(out[0], out[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s keys, after a shift: RMS %.3g of std from the Go backend", tc.k, rms)
			if rms > tc.maxRMS {
				t.Errorf("%s keys: after shifting keys the logits differ by %.3g of std from the Go backend's (want ≤ %g)", tc.k, rms, tc.maxRMS)
			}
		}
	})

	t.Run("QuantizedKeys", func(t *testing.T) {
		// A device stores int8 and int4 keys as the Go store does, per
		// channel across key groups (KIVI), with the group being filled
		// at f16. Over 24 positions of stories260K at block size 4 (key
		// groups of 4) the device's logits stay within
		// TestCachePrecisionKL's bounds from f16 K/V (mean KL 2e-4 for
		// int8, 3e-2 for int4), and within 1e-3 of std of the Go
		// backend's at the same precisions.
		ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))[:24]
		logits := func(b backend.Backend, k, v kvstore.Precision) [][]float32 {
			m := loadOn(t, b, "models/stories260K.gguf")
			kv, blocks := devSeq(t, m, 4, 32, k, v)
			return devForward(t, m, kv, blocks, ids, 0)
		}
		ref := logits(backend.Go(), kvstore.F16, kvstore.F16)
		for _, tc := range []struct {
			p     kvstore.Precision
			maxKL float64
		}{{kvstore.Int8, 2e-4}, {kvstore.Int4, 3e-2}} {
			got := logits(be, tc.p, tc.p)
			rms, kl, err := testshared.Compare(got, ref)
			if err != nil {
				t.Fatal(err)
			}
			grms, _, err := testshared.Compare(got, logits(backend.Go(), tc.p, tc.p))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s K/V on the device: from f16 RMS %.3g of std, mean KL %.3g; from the Go backend's RMS %.3g", tc.p, rms, kl, grms)
			if kl > tc.maxKL || grms > 1e-3 {
				t.Errorf("%s K/V on the device: mean KL %.3g from f16 (want ≤ %g), RMS %.3g of std from the Go backend's (want ≤ 1e-3)", tc.p, kl, tc.maxKL, grms)
			}
		}
	})
}

// TestDeviceDecodeSpeed measures, when KVSCOPE_DEVICE_MODEL names a GGUF
// file (native/cuda/check.sh: llama-3.2-1b Q4_0 from kvscope gen-model),
// the device backend's prefill of a 128-token prompt and its decode of 64
// tokens one at a time after it (as kvscope bench speed does), in tokens/s.
func TestDeviceDecodeSpeed(t *testing.T) {
	file := os.Getenv("KVSCOPE_DEVICE_MODEL")
	if file == "" {
		t.Skip("set KVSCOPE_DEVICE_MODEL to a GGUF file to measure decode speed on the device backend")
	}
	be := deviceBackend(t)
	m, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Use(be); err != nil {
		t.Fatal(err)
	}
	const prompt, gen = 128, 64
	kv, blocks := devSeq(t, m, 16, prompt+gen+1, kvstore.F16, kvstore.F16)
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 1 + (i*7919)%(m.Vocab-1)
	}
	devForward(t, m, kv, blocks, ids[:8], 0) // warm up: kernels loaded, buffers made
	start := time.Now()
	logits := devForward(t, m, kv, blocks, ids, 0)
	pre := time.Since(start)
	next := sample.Greedy(logits[len(logits)-1])
	start = time.Now()
	for pos := prompt; pos < prompt+gen; pos++ {
		next = sample.Greedy(devForward(t, m, kv, blocks, []int{next}, pos)[0])
	}
	dec := time.Since(start)
	fmt.Printf("%s on %s, %s: prefill %d tokens %.1f tokens/s, decode %d tokens %.1f tokens/s (%.2f ms a token)\n",
		be.Name(), be.DeviceName(), filepath.Base(file), prompt, prompt/pre.Seconds(), gen, gen/dec.Seconds(),
		1000*dec.Seconds()/gen)
	if fb := be.Fallbacks(); len(fb) > 0 {
		fmt.Printf("fallbacks: %v\n", fb)
	}
}
