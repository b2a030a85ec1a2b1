package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/backend"
	"kvscope/engine/backend/native"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// speedOpts are bench speed's settings: llama-bench's and
// llama-batched-bench's, so that both engines run the same tests.
type speedOpts struct {
	preset  string
	types   []string
	threads int
	prompt  int   // llama-bench -p, llama-batched-bench -npp: prompt tokens
	gen     int   // llama-bench -n: tokens decoded from an empty context
	reps    int   // llama-bench -r
	rounds  int   // rounds of both engines; each figure is the best round's
	batchTG int   // llama-batched-bench -ntg: tokens each sequence decodes
	seqs    []int // llama-batched-bench -npl
	ctx     int   // the long context of the K/V precision rows
	ctxGen  int   // tokens decoded at the long context
	peer    string
	dir     string // where the generated models go
	backend string // kvscope's backend (native.Choose)
}

func benchSpeed(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench speed", "[--preset NAME] [--types Q4_0,Q8_0,Q4_K_M] [-t THREADS] [--peer DIR]", stderr)
	var o speedOpts
	fs.StringVar(&o.preset, "preset", "tinyllama-1.1b", "model shape (gen-model's presets: "+presetNames()+")")
	types := fs.String("types", "Q4_0,Q8_0,Q4_K_M", "weight types, comma-separated; one model file each")
	threads := intFlag(fs, "t", runtime.NumCPU(), 1, 1024, "threads, for both engines")
	prompt := intFlag(fs, "p", 128, 1, 8192, "prompt tokens of the prefill test and of each sequence of the batched tests")
	gen := intFlag(fs, "n", 64, 1, 8192, "tokens one sequence decodes from an empty context")
	reps := intFlag(fs, "r", 2, 1, 100, "repetitions of the prefill and decode tests")
	rounds := intFlag(fs, "rounds", 5, 1, 10, "rounds of kvscope's tests and llama.cpp's (llama.cpp's first in every other round); each figure is the best of its rounds, and the rounds' median ratio is shown too (this machine's memory bandwidth swings from minute to minute)")
	batchTG := intFlag(fs, "ntg", 32, 1, 8192, "tokens each sequence decodes in the batched tests")
	seqs := fs.String("npl", "1,4,8", "sequence counts of the batched tests, comma-separated")
	ctx := intFlag(fs, "ctx", 2048, 2, 1<<20, "context of the K/V precision tests")
	ctxGen := intFlag(fs, "ctx-gen", 8, 1, 1024, "tokens decoded at that context")
	fs.StringVar(&o.peer, "peer", sharedPath("peers/llama.cpp/bin"), "`directory` of llama-bench and llama-batched-bench to run on the same files; empty: none")
	fs.StringVar(&o.dir, "dir", "", "`directory` for the generated model files (default: a temporary one, removed after)")
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	o.backend = *be
	o.threads, o.prompt, o.gen, o.reps, o.batchTG, o.ctx, o.ctxGen = *threads, *prompt, *gen, *reps, *batchTG, *ctx, *ctxGen
	o.rounds = *rounds
	o.types = strings.Split(*types, ",")
	for _, t := range o.types {
		if _, err := presetShape(o.preset, t); err != nil {
			return fs.usageErr("%v", err)
		}
	}
	for _, f := range strings.Split(*seqs, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > maxParallel {
			return fs.usageErr("--npl %q: want sequence counts from 1 to %d, comma-separated", *seqs, maxParallel)
		}
		o.seqs = append(o.seqs, n)
	}
	if o.ctxGen >= o.ctx {
		return fs.usageErr("--ctx-gen %d must be less than --ctx %d", o.ctxGen, o.ctx)
	}
	return runSpeed(o, stdout)
}

// runSpeed runs bench speed: for each type, it writes the preset's model
// file, runs kvscope's tests on it and then llama.cpp's on the same file,
// and prints one table.
func runSpeed(o speedOpts, out io.Writer) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.threads))
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "kvscope-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	peer := findPeer(o.peer)
	if peer != "" {
		// A copy of the peer's binaries without the CPU variants that
		// crash on this machine (usable-bin.sh, beside bin/), where the
		// script is at hand. It goes with the run, as the model files do.
		defer os.RemoveAll(filepath.Join(dir, peerCopy))
		if usable, variant, err := usablePeer(peer, dir); err != nil {
			fmt.Fprintf(out, "llama.cpp: %s as it is (%v)\n", peer, err)
		} else if usable != "" {
			fmt.Fprintf(out, "llama.cpp: %s, copied to %s without the CPU variants that do not run here: %s\n", peer, usable, variant)
			peer = usable
		}
	}
	probe, how := bandwidthProbe()
	bw := 0.0
	pass := func() float64 { // every pass counts towards the best
		v := probe()
		bw = max(bw, v)
		return v
	}
	measure := func() float64 { // the best of five passes
		v := 0.0
		for range 5 {
			v = max(v, pass())
		}
		return v
	}
	fmt.Fprintf(out, "machine: %d threads; read bandwidth measured %.1f GB/s (%s, the best of 5 passes; measured again before each round, between the steps of each single-sequence decode test, and after the last round: the limits below use the best pass)\n", o.threads, measure()/1e9, how)
	_, note, err := native.Choose(o.backend)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kvscope: %s\n", note)
	if peer == "" {
		fmt.Fprintf(out, "llama.cpp: not run (no llama-bench and llama-batched-bench in %q)\n", o.peer)
	} else {
		fmt.Fprintf(out, "llama.cpp: %s, on the same files, in the same rounds as kvscope\n", peer)
	}
	for _, typ := range o.types {
		s, _ := presetShape(o.preset, typ)
		path := filepath.Join(dir, fmt.Sprintf("%s-%s.gguf", o.preset, typeName(s)))
		t0 := time.Now()
		size, err := writeModel(s, path)
		if err != nil {
			return err
		}
		made := time.Since(t0)
		// Rounds alternate the engines, so that both meet the
		// bandwidth of the same minutes, llama.cpp first in every other
		// round; each row keeps its best, and each round's ratio.
		var rows []speedRow
		var weights int64
		note := ""
		cold := newColdRuns(path, o, peer)
		for round := range max(o.rounds, 1) {
			if round > 0 {
				measure()
			}
			var theirs map[string]float64
			peerRun := func() {
				if peer == "" || note != "" {
					return
				}
				var err error
				if theirs, err = peerSpeed(peer, path, o); err != nil {
					note = "llama.cpp failed: " + firstLine(err.Error())
				}
				cold.runTheirs()
			}
			if round%2 == 1 {
				peerRun()
			}
			r, w, err := ourSpeed(path, o, pass)
			if err != nil {
				return err
			}
			cold.runOurs(prefillOf(r, o.prompt))
			if round%2 == 0 {
				peerRun()
			}
			for i := range r {
				if v, ok := theirs[r[i].test]; ok && r[i].ours > 0 {
					r[i].theirs = v
					r[i].ratios = []float64{r[i].ours / v}
				}
			}
			rows, weights = bestRows(rows, r), w
		}
		// The limits follow the best bandwidth measured (before each
		// round, within each single-sequence decode and after the last),
		// as the figures are each test's best round: ourSpeed gives them
		// per byte a second.
		measure()
		for i := range rows {
			rows[i].limit *= bw
		}
		rounds := ""
		if o.rounds > 1 {
			rounds = fmt.Sprintf("; each figure is the best of %d rounds, each running kvscope's tests and llama.cpp's in turn, llama.cpp's first in every other round", o.rounds)
		}
		fmt.Fprintf(out, "\n%s %s: %s file (made in %.1f s), %s of weights read per token: at the best bandwidth measured, %.1f GB/s, one sequence cannot decode faster than %.1f tokens/s%s\n",
			o.preset, typeName(s), humanize.IBytes(uint64(size)), made.Seconds(), humanize.IBytes(uint64(weights)), bw/1e9, bw/float64(weights), rounds)
		if err := writeSpeedTable(out, rows, peer != ""); err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintln(out, note)
		}
		cold.write(out, int64(size), prefillOf(rows, o.prompt))
		os.Remove(path)
	}
	return nil
}

// prefillOf returns kvscope's rate in rows' prefill test of a p-token
// prompt (0: none).
func prefillOf(rows []speedRow, p int) float64 {
	for _, r := range rows {
		if r.test == ppTest(p) {
			return r.ours
		}
	}
	return 0
}

// bestRows returns each row of b with the better figures of a's row (a
// nil: b itself): the best round of each engine (with kvscope's share of
// the read rate beside that round's test), and every round's ratio and
// share.
func bestRows(a, b []speedRow) []speedRow {
	if a == nil {
		return b
	}
	for i := range b {
		if a[i].ours > b[i].ours {
			b[i].ours, b[i].share, b[i].besideBW = a[i].ours, a[i].share, a[i].besideBW
		}
		b[i].theirs = max(b[i].theirs, a[i].theirs)
		b[i].ratios = append(a[i].ratios, b[i].ratios...)
		b[i].shares = append(a[i].shares, b[i].shares...)
	}
	return b
}

// speedRow is one test: kvscope's tokens/s, llama.cpp's (0: not run), and
// the rate the read bandwidth allows (0: none, for compute-bound tests).
type speedRow struct {
	test         string
	ours, theirs float64
	limit        float64
	ratios       []float64 // kvscope's rate over llama.cpp's in each round both ran
	skipped      string    // why the test did not run, if it did not
	// For one sequence's decode: the mean read bandwidth of passes run
	// between its steps, in bytes a second, and kvscope's rate over the
	// rate it allows, for the best round, and each round's.
	besideBW, share float64
	shares          []float64
}

// median returns the median of x (the mean of the middle two for an even
// count), 0 for none.
func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(x))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// writeSpeedTable prints the rows, with llama.cpp's column and the ratio
// when the peer ran.
func writeSpeedTable(out io.Writer, rows []speedRow, peer bool) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if peer {
		fmt.Fprintln(tw, "test (tokens/s)\tkvscope\tllama.cpp\tkvscope/llama.cpp\trounds' median\tbandwidth limit\t")
	} else {
		fmt.Fprintln(tw, "test (tokens/s)\tkvscope\tbandwidth limit\t")
	}
	dash := func(v float64, format string) string {
		if v <= 0 {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	for _, r := range rows {
		if peer {
			ratio := 0.0
			if r.theirs > 0 {
				ratio = r.ours / r.theirs
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.test, dash(r.ours, "%.1f"), dash(r.theirs, "%.1f"), dash(ratio, "%.2f"),
				dash(median(r.ratios), "%.2f"), dash(r.limit, "%.1f"))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", r.test, dash(r.ours, "%.1f"), dash(r.limit, "%.1f"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.skipped != "" {
			fmt.Fprintf(out, "%s: not run: %s\n", r.test, r.skipped)
		}
	}
	for _, r := range rows {
		if r.share > 0 {
			fmt.Fprintf(out, "%s: %.0f%% of the rate that the read bandwidth of the same seconds allows (a pass of the read probe after each step: %.1f GB/s on average, %.1f tokens/s); rounds' median %.0f%%\n",
				r.test, 100*r.share, r.besideBW/1e9, r.ours/r.share, 100*median(r.shares))
		}
	}
	return nil
}

// Test names; peerSpeed matches llama.cpp's results to them.
func ppTest(p int) string { return fmt.Sprintf("prefill, %d-token prompt", p) }
func tgTest(n int) string { return fmt.Sprintf("decode, 1 sequence, %d tokens", n) }
func batchTest(pl, p int) string {
	if pl == 1 {
		return fmt.Sprintf("decode, 1 sequence after %d", p)
	}
	return fmt.Sprintf("decode, %d sequences after %d (aggregate)", pl, p)
}
func ctxTest(ctx int, p kvstore.Precision) string {
	return fmt.Sprintf("decode at %d context, %s K/V", ctx, p)
}

// benchModel loads the model file for the speed tests: the one place where
// the engine is set up, so that choosing a backend is one argument here.
func benchModel(path, be string) (*model.Model, error) {
	b, _, err := native.Choose(be)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(path)
	if err != nil {
		return nil, err
	}
	if err := m.Use(b); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// ourSpeed runs kvscope's tests on the model file: raw forward passes as
// llama-bench and llama-batched-bench time them (no sampling), on K/V
// blocks in the engine's default layout. It returns the rows and the bytes
// of weights one step reads; the rows' limits assume one byte a second,
// and single-sequence decode rows hold their share of the rate that the
// read bandwidth of the same seconds allows: a pass of the read probe
// (pass) after each of their timed steps, untimed. The machine's
// bandwidth swings between about 33 and 60 GB/s in spells of a second or
// more, so that a limit from other seconds says little about a decode.
func ourSpeed(path string, o speedOpts, pass func() float64) ([]speedRow, int64, error) {
	m, err := benchModel(path, o.backend)
	if err != nil {
		return nil, 0, err
	}
	defer m.Close()
	weights := weightBytes(m)
	cc := engine.DefaultConfig().Cache
	bs := cc.BlockSize
	// limit is the decode rate of n sequences at context ctx that a read
	// bandwidth of one byte a second allows: each step reads the weights
	// once and every sequence's K/V.
	limit := func(p kvstore.Precision, n, ctx int) float64 {
		kv := kvstore.BytesPerToken(m.CacheConfig(bs, 1, p, p)) * float64(ctx)
		return float64(n) / (float64(weights) + float64(n)*kv)
	}
	// within sets row's share of the rate that the mean bandwidth of the
	// passes in (run between its steps) allows.
	within := func(row *speedRow, in []float64) {
		inv := 0.0 // passes read equal bytes: the mean rate is the harmonic mean
		for _, v := range in {
			inv += 1 / v
		}
		row.besideBW = float64(len(in)) / inv
		row.share = row.ours / (row.limit * row.besideBW)
		row.shares = []float64{row.share}
	}
	var rows []speedRow

	// Prefill, single-sequence decode and the batched tests share one f16
	// pool: a template block, then every sequence's blocks.
	maxSeqs := slices.Max(o.seqs)
	per := blocksFor(max(o.prompt+o.batchTG, o.prompt, o.gen), bs)
	kv, err := m.NewCache(m.CacheConfig(bs, 1+maxSeqs*per, cc.K, cc.V))
	if err != nil {
		return nil, 0, err
	}
	table := func(s, n int) []int {
		t := make([]int, n)
		for i := range t {
			t[i] = 1 + s*per + i
		}
		return t
	}
	if err := fillTemplate(m, kv, 0); err != nil {
		return nil, 0, err
	}

	// Prefill: one batch of the whole prompt, logits for its last row, as
	// llama-bench's pp test; one untimed run first.
	var rates []float64
	for rep := range o.reps + 1 {
		var b model.Batch
		t := table(0, per)
		for i := range o.prompt {
			b.Add(benchToken(m, 0, i), i, t, i == o.prompt-1)
		}
		d, err := timeForward(m, kv, &b)
		if err != nil {
			return nil, 0, err
		}
		if rep > 0 {
			rates = append(rates, float64(o.prompt)/d.Seconds())
		}
	}
	rows = append(rows, speedRow{test: ppTest(o.prompt), ours: mean(rates)})

	// Decode of one sequence from an empty context, as llama-bench's tg
	// test: one token a step, with logits.
	rates = rates[:0]
	var in []float64
	for rep := range o.reps + 1 {
		var total time.Duration
		t := table(0, per)
		for i := range o.gen {
			var b model.Batch
			b.Add(benchToken(m, 0, i), i, t, true)
			d, err := timeForward(m, kv, &b)
			if err != nil {
				return nil, 0, err
			}
			total += d
			if rep == 0 {
				break // the untimed run: one step
			}
			in = append(in, pass())
		}
		if rep > 0 {
			rates = append(rates, float64(o.gen)/total.Seconds())
		}
	}
	rows = append(rows, speedRow{test: tgTest(o.gen), ours: mean(rates), limit: limit(cc.K, 1, o.gen/2)})
	within(&rows[len(rows)-1], in)

	// Batched decode, as llama-batched-bench's: pl sequences, each with a
	// prompt's K/V in the cache (copies of the template block), decode
	// batchTG tokens together, one row each a step.
	for _, pl := range o.seqs {
		for s := range pl {
			for _, blk := range table(s, blocksFor(o.prompt, bs)) {
				kv.Copy(blk, 0)
			}
		}
		var total time.Duration
		in = in[:0]
		for g := range o.batchTG {
			var b model.Batch
			for s := range pl {
				b.Add(benchToken(m, s, o.prompt+g), o.prompt+g, table(s, per), true)
			}
			d, err := timeForward(m, kv, &b)
			if err != nil {
				return nil, 0, err
			}
			total += d
			if pl == 1 {
				in = append(in, pass())
			}
		}
		rows = append(rows, speedRow{test: batchTest(pl, o.prompt), ours: float64(pl*o.batchTG) / total.Seconds(),
			limit: limit(cc.K, pl, o.prompt+o.batchTG/2)})
		if pl == 1 {
			within(&rows[len(rows)-1], in)
		}
	}

	// Decode at a long context in each K/V precision: the context's blocks
	// are copies of a template block the model computed, so only the
	// decoded tokens are computed here.
	for _, p := range []kvstore.Precision{kvstore.F16, kvstore.Int8, kvstore.Int4} {
		filled := (o.ctx - o.ctxGen) / bs * bs
		n := blocksFor(filled+o.ctxGen, bs)
		pkv, err := m.NewCache(m.CacheConfig(bs, 1+n, p, p))
		if err != nil {
			// A backend may refuse a precision (CUDA: int8/int4
			// keys); the row says why instead of ending the bench.
			rows = append(rows, speedRow{test: ctxTest(o.ctx, p), skipped: firstLine(err.Error())})
			continue
		}
		if err := fillTemplate(m, pkv, 0); err != nil {
			return nil, 0, err
		}
		t := make([]int, n)
		for i := range t {
			t[i] = 1 + i
			if i < filled/bs {
				pkv.Copy(t[i], 0)
			}
		}
		var total time.Duration
		for g := range o.ctxGen {
			var b model.Batch
			b.Add(benchToken(m, 0, filled+g), filled+g, t, true)
			d, err := timeForward(m, pkv, &b)
			if err != nil {
				return nil, 0, err
			}
			total += d
		}
		rows = append(rows, speedRow{test: ctxTest(o.ctx, p), ours: float64(o.ctxGen) / total.Seconds(), limit: limit(p, 1, filled+o.ctxGen/2)})
	}
	return rows, weights, nil
}

// fillTemplate computes the K/V of one block of tokens into block blk.
func fillTemplate(m *model.Model, kv backend.Cache, blk int) error {
	var b model.Batch
	for i := range kv.Config().BlockSize {
		b.Add(benchToken(m, 99, i), i, []int{blk}, false)
	}
	_, err := m.Forward(kv, &b)
	return err
}

// timeForward runs one forward pass and returns how long it took.
func timeForward(m *model.Model, kv backend.Cache, b *model.Batch) (time.Duration, error) {
	t0 := time.Now()
	_, err := m.Forward(kv, b)
	return time.Since(t0), err
}

// benchToken is the token of sequence s at position i: spread over the
// vocabulary, the same in every run.
func benchToken(m *model.Model, s, i int) int {
	return 3 + (s*7919+i*104729)%(m.Vocab-3)
}

func blocksFor(tokens, bs int) int { return (tokens + bs - 1) / bs }

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// weightBytes is how many bytes of weights one step reads: every matrix,
// except the embedding table, of which only the tokens' rows are read
// (unless it is also the output).
func weightBytes(m *model.Model) int64 {
	_, untied := m.File.Tensor("output.weight")
	var n int64
	for _, ti := range m.File.Tensors {
		if ti.Name != "token_embd.weight" || !untied {
			n += int64(ti.Size)
		}
	}
	return n
}

// bandwidthProbe returns a pass of how fast all threads together read
// memory, in bytes per second: one sum of a 256 MiB buffer, far larger
// than the caches (allocated once: the bench measures again and again),
// and says with what: the native library's SIMD loads where it loads (Go's
// scalar loop read 10 to 25% slower on the development machine, which put
// llama.cpp's decode above the "limit"), else a Go loop.
func bandwidthProbe() (pass func() float64, how string) {
	if l, err := native.Load(""); err == nil {
		p := l.NewReadProbe()
		return func() float64 { bw, _ := p.Read(); return bw }, // Sum64 fails only on bad arguments
			fmt.Sprintf("the native library's %s loads over 256 MiB", l.PathName(l.Path()))
	}
	buf := make([]uint64, 256<<20/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	return func() float64 { return goReadBandwidth(buf) }, "a Go loop over 256 MiB"
}

// goReadBandwidth is bandwidthProbe's pass without the native library.
func goReadBandwidth(buf []uint64) float64 {
	workers := runtime.GOMAXPROCS(0)
	t0 := time.Now()
	var wg sync.WaitGroup
	chunk := len(buf) / workers
	sums := make([]uint64, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := buf[w*chunk : (w+1)*chunk]
			var s0, s1, s2, s3 uint64
			for i := 0; i+3 < len(part); i += 4 {
				s0 += part[i]
				s1 += part[i+1]
				s2 += part[i+2]
				s3 += part[i+3]
			}
			sums[w] = s0 + s1 + s2 + s3
		}()
	}
	wg.Wait()
	return float64(8*len(buf)) / time.Since(t0).Seconds()
}
