package kvcache

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"
)

// Workload is a synthetic serving workload: Requests requests, all waiting
// at the start, whose prompt and output lengths are lognormal with the
// given means, drawn from a generator seeded with Seed.
type Workload struct {
	Name                    string  // shown in reports
	Requests                int     // how many requests
	InputMean, OutputMean   float64 // mean lengths in tokens (before clamping)
	InputSigma, OutputSigma float64 // lognormal shape (standard deviation of the log)
	MaxLen                  int     // context limit: prompt + output never exceed it
	MaxOutput               int     // each request's max_tokens; contiguous mode reserves prompt + MaxOutput
	Seed                    uint64  // seeds lengths and token ids
}

// ShareGPTLike has the mean lengths the PagedAttention paper reports for
// ShareGPT: prompts of about 161 tokens, outputs of about 338.
var ShareGPTLike = Workload{Name: "sharegpt-like", Requests: 1000, InputMean: 161, OutputMean: 338,
	InputSigma: 1, OutputSigma: 1, MaxLen: 2048, MaxOutput: 1024, Seed: 1}

// AlpacaLike has the mean lengths the PagedAttention paper reports for
// Alpaca: prompts of about 19 tokens, outputs of about 58.
var AlpacaLike = Workload{Name: "alpaca-like", Requests: 1000, InputMean: 19, OutputMean: 58,
	InputSigma: 0.7, OutputSigma: 1, MaxLen: 2048, MaxOutput: 256, Seed: 1}

// WasteReport is what ReplayWorkload measured.
type WasteReport struct {
	Workload     string    // Workload.Name
	Allocator    Allocator // paged or contiguous
	BlockSize    int       // tokens per block
	BudgetTokens int       // pool size in token slots
	Requests     int       // requests replayed
	MeanInput    float64   // realized mean prompt length
	MeanOutput   float64   // realized mean output length

	// WastePercent is memory waste averaged over the replay's steps:
	// (reserved slots holding no token + external fragmentation) over
	// (reserved slots + external fragmentation). External fragmentation is
	// free memory the next waiting request could not use although there
	// was enough of it in total (contiguous mode only).
	WastePercent float64
	// InternalPercent and ExternalPercent split WastePercent.
	InternalPercent, ExternalPercent float64

	MaxConcurrent  int     // most sequences running at once
	MeanConcurrent float64 // sequences running, averaged over steps
	Steps          int     // decode steps the replay took
	Preemptions    int64   // recompute preemptions the paged mode needed
}

// request is one replayed request.
type request struct {
	prompt []int32
	out    int // output length
	gen    int // tokens generated so far
	held   []int32
}

func (w Workload) requests() ([]request, error) {
	if w.Requests < 1 || w.InputMean < 1 || w.OutputMean < 1 || w.InputSigma < 0 || w.OutputSigma < 0 || w.MaxLen < 2 || w.MaxOutput < 1 {
		return nil, fmt.Errorf("kvcache: workload %q: need at least 1 request, mean lengths of at least 1, non-negative sigmas, a context of at least 2 and max output of at least 1 (got %+v)", w.Name, w)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x6b7673636f7065))
	draw := func(mean, sigma float64, lo, hi int) int {
		mu := math.Log(mean) - sigma*sigma/2
		v := int(math.Round(math.Exp(mu + sigma*rng.NormFloat64())))
		return min(max(v, lo), hi)
	}
	reqs := make([]request, w.Requests)
	for i := range reqs {
		in := draw(w.InputMean, w.InputSigma, 1, w.MaxLen-1)
		out := draw(w.OutputMean, w.OutputSigma, 1, min(w.MaxOutput, w.MaxLen-in))
		p := make([]int32, in)
		for j := range p {
			p[j] = int32(rng.IntN(32000))
		}
		reqs[i] = request{prompt: p, out: out}
	}
	return reqs, nil
}

// ReplayWorkload replays w on a real Manager (bookkeeping only, no tensors)
// with the given allocator, block size and budget in token slots, and
// measures memory waste and concurrency. Its scheduler is deliberately
// plain: first come first served, admission while the prompt fits (paged
// mode keeps 1% of blocks free as a watermark), one decode token per running
// sequence per step, and on a full pool the newest sequence is preempted by
// recompute. Contiguous mode reserves min(prompt + MaxOutput, MaxLen) per
// request. The result is deterministic for a given Seed.
func ReplayWorkload(w Workload, alloc Allocator, blockSize, budgetTokens int) (WasteReport, error) {
	reqs, err := w.requests()
	if err != nil {
		return WasteReport{}, err
	}
	if blockSize < 1 || blockSize > MaxBlockSize || budgetTokens < blockSize {
		return WasteReport{}, fmt.Errorf("kvcache: replay: block size %d (want 1 to %d) and budget of %d tokens (want at least one block)", blockSize, MaxBlockSize, budgetTokens)
	}
	m, err := New(Config{BlockSize: blockSize, BlockBytes: 1, Budget: int64(budgetTokens / blockSize),
		Allocator: alloc, MaxLen: w.MaxLen, EventBuffer: 16}, nil)
	if err != nil {
		return WasteReport{}, err
	}
	rep := WasteReport{Workload: w.Name, Allocator: alloc, BlockSize: blockSize, BudgetTokens: budgetTokens, Requests: len(reqs)}
	for _, r := range reqs {
		rep.MeanInput += float64(len(r.prompt))
		rep.MeanOutput += float64(r.out)
	}
	rep.MeanInput /= float64(len(reqs))
	rep.MeanOutput /= float64(len(reqs))

	waiting := make([]int, len(reqs))
	for i := range waiting {
		waiting[i] = i
	}
	var running []int
	watermark := m.NumBlocks() / 100
	var internal, external, denom, conc float64
	finish := func(i int) error {
		if err := m.Free(SeqID(i)); err != nil {
			return err
		}
		reqs[i].held = nil
		return nil
	}
	for len(waiting) > 0 || len(running) > 0 {
		// Admit.
		extNow := 0
		for len(waiting) > 0 {
			i := waiting[0]
			r := &reqs[i]
			if r.held == nil {
				r.held = r.prompt
			}
			opts := SeqOptions{}
			if alloc == Contiguous {
				opts.MaxLen = min(len(r.prompt)+w.MaxOutput, w.MaxLen)
			} else if len(running) > 0 && m.FreeBlocks()-m.BlocksFor(len(r.held)) < watermark {
				break
			}
			if _, err := m.Allocate(SeqID(i), r.held, opts); err != nil {
				if !errors.Is(err, ErrNoSpace) {
					return rep, err
				}
				if len(running) == 0 {
					return rep, fmt.Errorf("kvcache: replay: a budget of %d tokens cannot hold request %d (%d tokens): %w", budgetTokens, i, len(r.held), err)
				}
				if alloc == Contiguous {
					extNow = m.UnservableBlocks(opts.MaxLen) * blockSize
				}
				break
			}
			if err := m.Commit(SeqID(i), len(r.held)); err != nil {
				return rep, err
			}
			waiting = waiting[1:]
			if r.gen == 0 {
				r.gen = 1 // the prefill samples the first output token
			}
			if r.gen >= r.out {
				if err := finish(i); err != nil {
					return rep, err
				}
				continue
			}
			running = append(running, i)
		}
		// Decode one token for each running sequence, oldest first.
		for k := 0; k < len(running); k++ {
			i := running[k]
			r := &reqs[i]
			tok := []int32{int32((i*7919 + r.gen) % 32000)}
			for {
				_, err := m.Append(SeqID(i), tok)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrNoSpace) {
					return rep, err
				}
				victim := running[len(running)-1]
				res, perr := m.Preempt(SeqID(victim), Recompute)
				if perr != nil {
					return rep, perr
				}
				reqs[victim].held = res.Tokens
				running = running[:len(running)-1]
				waiting = append([]int{victim}, waiting...)
				rep.Preemptions++
				if victim == i {
					break
				}
			}
			if !m.Has(SeqID(i)) {
				break // preempted itself: it was the newest
			}
			if err := m.Commit(SeqID(i), m.Len(SeqID(i))); err != nil {
				return rep, err
			}
			r.held = nil // the manager holds the tokens; Preempt returns them
			r.gen++
			if r.gen >= r.out {
				if err := finish(i); err != nil {
					return rep, err
				}
				running = append(running[:k], running[k+1:]...)
				k--
			}
		}
		x := m.Metrics()
		internal += float64(x.ReservedSlots - x.FilledSlots)
		external += float64(extNow)
		denom += float64(x.ReservedSlots + extNow)
		conc += float64(len(running))
		rep.MaxConcurrent = max(rep.MaxConcurrent, len(running))
		rep.Steps++
		m.Tick()
	}
	if err := m.Check(); err != nil {
		return rep, fmt.Errorf("kvcache: replay left the manager inconsistent: %w", err)
	}
	if denom > 0 {
		rep.InternalPercent = 100 * internal / denom
		rep.ExternalPercent = 100 * external / denom
		rep.WastePercent = rep.InternalPercent + rep.ExternalPercent
	}
	rep.MeanConcurrent = conc / float64(rep.Steps)
	return rep, nil
}

// WasteBlockSizes are the paged block sizes WasteTable compares.
var WasteBlockSizes = []int{8, 16, 32, 64, 128}

// WasteTable replays w in paged mode at each of WasteBlockSizes and in
// contiguous mode (block size 1, so all its waste is reservation and
// fragmentation), all with the same budget.
func WasteTable(w Workload, budgetTokens int) ([]WasteReport, error) {
	var rows []WasteReport
	for _, bs := range WasteBlockSizes {
		r, err := ReplayWorkload(w, Paged, bs, budgetTokens)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	r, err := ReplayWorkload(w, Contiguous, 1, budgetTokens)
	if err != nil {
		return nil, err
	}
	return append(rows, r), nil
}

// WriteWasteTable prints rows as an aligned table.
func WriteWasteTable(out io.Writer, rows []WasteReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tallocator\tblock\twaste %\tinternal %\texternal %\tmax seqs\tmean seqs\tsteps\tpreemptions\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%d\t%.1f\t%d\t%d\t\n", r.Workload, r.Allocator, r.BlockSize,
			r.WastePercent, r.InternalPercent, r.ExternalPercent, r.MaxConcurrent, r.MeanConcurrent, r.Steps, r.Preemptions)
	}
	return tw.Flush()
}
