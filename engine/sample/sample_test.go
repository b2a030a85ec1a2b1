package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

var (
	inf = float32(math.Inf(1))
	nan = float32(math.NaN())
)

// lnProbs returns logits whose softmax is probs (which must sum to 1).
func lnProbs(probs ...float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		out[i] = float32(math.Log(p))
	}
	return out
}

// params returns a Params with every filter and penalty off at temperature 1,
// then applies f.
func params(f func(*Params)) Params {
	p := Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, RepeatLastN: 64}
	if f != nil {
		f(&p)
	}
	return p
}

func mustNew(t testing.TB, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	return s
}

// support returns the sorted ids that survive every stage before the draw.
func support(s *Sampler, logits []float32, history []int) []int {
	c, tok := s.filter(logits, history)
	if tok >= 0 {
		return []int{tok}
	}
	ids := make([]int, len(c))
	for i, x := range c {
		ids[i] = int(x.id)
	}
	sort.Ints(ids)
	return ids
}

func TestGreedy(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
		want   int
	}{
		{"empty", nil, -1},
		{"single", []float32{-5}, 0},
		{"max in middle", []float32{1, 3, 2}, 1},
		{"ties go to lowest id", []float32{1, 3, 3, 3}, 1},
		{"NaN never wins", []float32{nan, 1, nan, 0.5}, 1},
		{"all NaN", []float32{nan, nan}, 0},
		{"all -Inf", []float32{negInf, negInf, negInf}, 0},
		{"+Inf wins", []float32{1e30, inf, 2}, 1},
		{"negative values", []float32{-3, -1, -2}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Greedy(tt.logits); got != tt.want {
				t.Errorf("Greedy(%v) = %d, want %d", tt.logits, got, tt.want)
			}
		})
	}
}

func TestSampleGreedyTemperature(t *testing.T) {
	tests := []struct {
		name    string
		temp    float32
		logits  []float32
		history []int
		want    int
	}{
		{"temperature 0", 0, []float32{0.1, 0.3, 0.2}, nil, 1},
		{"negative temperature", -1, []float32{0.1, 0.3, 0.2}, nil, 1},
		{"ties to lowest id", 0, []float32{0.5, 0.1, 0.5}, nil, 0},
		{"penalty moves argmax", 0, []float32{2, 1.8, -1}, []int{0}, 1},
		{"all -Inf falls back to raw argmax", 0, []float32{negInf, negInf}, nil, 0},
		{"penalty overflow to -Inf falls back to raw argmax", 0, []float32{-3e38, negInf}, []int{0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(5) {
				s := mustNew(t, params(func(p *Params) { p.Temperature = tt.temp; p.RepeatPenalty = 2; p.Seed = seed }))
				if got := s.Sample(tt.logits, tt.history); got != tt.want {
					t.Fatalf("seed %d: Sample = %d, want %d", seed, got, tt.want)
				}
			}
		})
	}
}

func TestPenalties(t *testing.T) {
	tests := []struct {
		name    string
		set     func(*Params)
		logits  []float32
		history []int
		want    []float32
	}{
		{"off by default", nil, []float32{2, -2}, []int{0, 1}, []float32{2, -2}},
		{"positive divided, negative multiplied",
			func(p *Params) { p.RepeatPenalty = 2 }, []float32{2, -2, 3}, []int{0, 1, 1}, []float32{1, -4, 3}},
		{"applied once per distinct token",
			func(p *Params) { p.RepeatPenalty = 2 }, []float32{8}, []int{0, 0, 0}, []float32{4}},
		{"only the last RepeatLastN tokens",
			func(p *Params) { p.RepeatPenalty = 2; p.RepeatLastN = 2 }, []float32{2, 2, 2}, []int{0, 1, 2}, []float32{2, 1, 1}},
		{"RepeatLastN -1 is the whole history",
			func(p *Params) { p.RepeatPenalty = 2; p.RepeatLastN = -1 }, []float32{2, 2, 2}, []int{0, 1, 2}, []float32{1, 1, 1}},
		{"RepeatLastN 0 disables everything",
			func(p *Params) { p.RepeatPenalty = 2; p.FrequencyPenalty = 1; p.RepeatLastN = 0 }, []float32{2, 2}, []int{0, 1}, []float32{2, 2}},
		{"frequency counts occurrences",
			func(p *Params) { p.FrequencyPenalty = 0.5 }, []float32{3, 3, 3}, []int{0, 0, 0, 1}, []float32{1.5, 2.5, 3}},
		{"presence is once per token",
			func(p *Params) { p.PresencePenalty = 0.5 }, []float32{3, 3, 3}, []int{0, 0, 0, 1}, []float32{2.5, 2.5, 3}},
		{"repeat then frequency and presence",
			func(p *Params) { p.RepeatPenalty = 2; p.FrequencyPenalty = 0.25; p.PresencePenalty = 1 },
			[]float32{4, -1}, []int{0, 0, 1}, []float32{4.0/2 - 0.5 - 1, -2 - 0.25 - 1}},
		{"out-of-range history ignored",
			func(p *Params) { p.RepeatPenalty = 2 }, []float32{2, 2}, []int{-1, 2, 99, 1}, []float32{2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, params(tt.set))
			s.load(tt.logits)
			s.penalize(tt.history)
			if !slices.Equal(s.logits, tt.want) {
				t.Errorf("penalized logits = %v, want %v", s.logits, tt.want)
			}
			for i, c := range s.counts {
				if c != 0 {
					t.Fatalf("counts[%d] = %d after penalize, want all zero", i, c)
				}
			}
		})
	}
}

func TestStageSupport(t *testing.T) {
	// Probabilities 0.5, 0.3, 0.15, 0.05 on ids 2, 0, 3, 1.
	four := lnProbs(0.3, 0.05, 0.5, 0.15)
	tests := []struct {
		name    string
		set     func(*Params)
		logits  []float32
		history []int
		want    []int
	}{
		{"no filters keep all", nil, four, nil, []int{0, 1, 2, 3}},
		{"top-k 2", func(p *Params) { p.TopK = 2 }, four, nil, []int{0, 2}},
		{"top-k 1", func(p *Params) { p.TopK = 1 }, four, nil, []int{2}},
		{"top-k 0 disabled", func(p *Params) { p.TopK = 0 }, four, nil, []int{0, 1, 2, 3}},
		{"top-k negative disabled", func(p *Params) { p.TopK = -1 }, four, nil, []int{0, 1, 2, 3}},
		{"top-k above vocab", func(p *Params) { p.TopK = 100 }, four, nil, []int{0, 1, 2, 3}},
		{"top-k ties to lowest ids", func(p *Params) { p.TopK = 2 }, []float32{1, 1, 1, 0}, nil, []int{0, 1}},
		{"top-p 0.45 keeps the best", func(p *Params) { p.TopP = 0.45 }, four, nil, []int{2}},
		{"top-p 0.75 keeps two", func(p *Params) { p.TopP = 0.75 }, four, nil, []int{0, 2}},
		{"top-p 0.81 keeps three", func(p *Params) { p.TopP = 0.81 }, four, nil, []int{0, 2, 3}},
		{"top-p 0.96 keeps four", func(p *Params) { p.TopP = 0.96 }, four, nil, []int{0, 1, 2, 3}},
		// After top-k 2 the two survivors renormalize to 0.625 and 0.375.
		{"top-p after top-k renormalizes", func(p *Params) { p.TopK = 2; p.TopP = 0.6 }, four, nil, []int{2}},
		{"top-p 0.6 without top-k", func(p *Params) { p.TopP = 0.6 }, four, nil, []int{0, 2}},
		{"min-p 0.2 (cut 0.1)", func(p *Params) { p.MinP = 0.2 }, four, nil, []int{0, 2, 3}},
		{"min-p 0.5 (cut 0.25)", func(p *Params) { p.MinP = 0.5 }, four, nil, []int{0, 2}},
		{"min-p 0.7 (cut 0.35)", func(p *Params) { p.MinP = 0.7 }, four, nil, []int{2}},
		{"min-p 1 keeps the max ties", func(p *Params) { p.MinP = 1 }, []float32{2, 1, 2}, nil, []int{0, 2}},
		{"temperature does not change the set", func(p *Params) { p.MinP = 0.2; p.Temperature = 5 }, four, nil, []int{0, 2, 3}},
		{"penalty then top-k", func(p *Params) { p.RepeatPenalty = 10; p.TopK = 2 }, four, []int{2}, []int{0, 3}},
		{"-Inf and NaN never survive", nil, []float32{negInf, 1, nan, 0}, nil, []int{1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, params(tt.set))
			got := support(s, tt.logits, tt.history)
			if !slices.Equal(got, tt.want) {
				t.Errorf("surviving tokens = %v, want %v", got, tt.want)
			}
			// Sampling must only ever return surviving tokens.
			for range 300 {
				tok := s.Sample(tt.logits, tt.history)
				if !slices.Contains(tt.want, tok) {
					t.Fatalf("Sample returned %d, outside %v", tok, tt.want)
				}
			}
		})
	}
}

func TestTopKNeverReturnsThird(t *testing.T) {
	s := mustNew(t, params(func(p *Params) { p.TopK = 2; p.Temperature = 100 }))
	logits := []float32{0.1, 0.3, 0.2}
	seen := map[int]int{}
	for range 2000 {
		seen[s.Sample(logits, nil)]++
	}
	if seen[0] != 0 || seen[1] == 0 || seen[2] == 0 {
		t.Errorf("top-k 2 at high temperature drew %v; want only ids 1 and 2, both seen", seen)
	}
}

// TestTopPLargeVocab checks the growing-prefix nucleus against a full sort on
// vocabularies where the nucleus needs several rounds of partial sorting.
func TestTopPLargeVocab(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n     int
		scale float64
		p     float32
	}{{5000, 1, 0.95}, {5000, 8, 0.9}, {3000, 0.01, 0.5}, {100, 3, 0.3}} {
		logits := make([]float32, tc.n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * tc.scale)
		}
		// Reference: full sort, cumulative probability in float64.
		idx := make([]int, tc.n)
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool {
			x, y := logits[idx[a]], logits[idx[b]]
			return x > y || (x == y && idx[a] < idx[b])
		})
		maxV := float64(logits[idx[0]])
		var total float64
		for _, v := range logits {
			total += math.Exp(float64(v) - maxV)
		}
		var cum float64
		var want []int
		for _, i := range idx {
			want = append(want, i)
			cum += math.Exp(float64(logits[i]) - maxV)
			if cum >= float64(tc.p)*total {
				break
			}
		}
		sort.Ints(want)

		s := mustNew(t, params(func(p *Params) { p.TopP = tc.p }))
		got := support(s, logits, nil)
		if !slices.Equal(got, want) {
			t.Errorf("n=%d scale=%v p=%v: kept %d tokens, reference keeps %d", tc.n, tc.scale, tc.p, len(got), len(want))
		}
	}
}

func TestSortTop(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := map[string]func(n int) []cand{
		"random": func(n int) []cand {
			a := make([]cand, n)
			for i := range a {
				a[i] = cand{int32(i), float32(rng.IntN(n/3 + 1))} // many duplicates
			}
			rng.Shuffle(n, func(i, j int) { a[i], a[j] = a[j], a[i] })
			return a
		},
		"ascending": func(n int) []cand {
			a := make([]cand, n)
			for i := range a {
				a[i] = cand{int32(i), float32(i)}
			}
			return a
		},
		"descending": func(n int) []cand {
			a := make([]cand, n)
			for i := range a {
				a[i] = cand{int32(i), float32(-i)}
			}
			return a
		},
		"all equal": func(n int) []cand {
			a := make([]cand, n)
			for i := range a {
				a[i] = cand{int32(n - 1 - i), 7}
			}
			return a
		},
	}
	for name, gen := range inputs {
		for _, n := range []int{1, 2, 17, 100, 1000} {
			for _, k := range []int{1, 2, 16, 40, n / 2, n - 1, n} {
				if k < 1 || k > n {
					continue
				}
				a := gen(n)
				want := slices.Clone(a)
				slices.SortFunc(want, compareCand)
				sortTop(a, 0, k)
				if !slices.Equal(a[:k], want[:k]) {
					t.Fatalf("%s n=%d k=%d: sortTop prefix differs from a full sort", name, n, k)
				}
				// Growing the sorted prefix must keep it correct.
				m := min(n, 2*k)
				sortTop(a, k, m)
				if !slices.Equal(a[:m], want[:m]) {
					t.Fatalf("%s n=%d k=%d->%d: grown prefix differs from a full sort", name, n, k, m)
				}
			}
		}
	}
}

func TestSampleDoesNotModifyInputs(t *testing.T) {
	logits := []float32{1, nan, inf, -2, negInf, 0.5}
	history := []int{0, 3, 3, 5, 42}
	wantL := slices.Clone(logits)
	wantH := slices.Clone(history)
	p := DefaultParams()
	p.RepeatPenalty = 1.3
	p.FrequencyPenalty = 0.2
	s := mustNew(t, p)
	for range 10 {
		s.Sample(logits, history)
	}
	for i := range logits {
		same := logits[i] == wantL[i] || (logits[i] != logits[i] && wantL[i] != wantL[i])
		if !same {
			t.Fatalf("logits changed: %v, want %v", logits, wantL)
		}
	}
	if !slices.Equal(history, wantH) {
		t.Fatalf("history changed: %v, want %v", history, wantH)
	}
}

func TestSampleOddInputs(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
		want   []int // the tokens Sample may return
	}{
		{"empty", nil, []int{-1}},
		{"all NaN", []float32{nan, nan, nan}, []int{0}},
		{"all -Inf", []float32{negInf, negInf}, []int{0}},
		{"one finite", []float32{negInf, nan, 3, negInf}, []int{2}},
		{"NaN beside finite", []float32{nan, 0, nan, 0}, []int{1, 3}},
		{"huge logits", []float32{3e38, 3e38, -3e38}, []int{0, 1}},
		{"+Inf tokens take everything", []float32{1, inf, 3, inf}, []int{1, 3}},
		{"single token", []float32{-7}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, temp := range []float32{0, 0.01, 1, 50} {
				s := mustNew(t, params(func(p *Params) { p.Temperature = temp; p.MinP = 0.05; p.TopP = 0.9 }))
				for range 50 {
					if got := s.Sample(tt.logits, []int{0, 1, 7}); !slices.Contains(tt.want, got) {
						t.Fatalf("temperature %v: Sample = %d, want one of %v", temp, got, tt.want)
					}
				}
			}
		})
	}
}

func TestReproducible(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	run := func(s *Sampler) []int {
		var hist []int
		for range 200 {
			hist = append(hist, s.Sample(logits, hist))
		}
		return hist
	}
	p := DefaultParams()
	p.Temperature = 1.5
	p.RepeatPenalty = 1.1
	p.Seed = 42
	a, b := mustNew(t, p), mustNew(t, p)
	ra, rb := run(a), run(b)
	if !slices.Equal(ra, rb) {
		t.Fatal("two samplers with the same seed drew different tokens")
	}
	a.Reset()
	if !slices.Equal(run(a), ra) {
		t.Fatal("Reset did not replay the same tokens")
	}
	p.Seed = 43
	if rc := run(mustNew(t, p)); slices.Equal(rc, ra) {
		t.Fatal("seeds 42 and 43 drew the same 200 tokens")
	}
	if distinct := len(slicesCompactSorted(ra)); distinct < 10 {
		t.Fatalf("only %d distinct tokens in 200 draws at temperature 1.5", distinct)
	}
}

func slicesCompactSorted(a []int) []int {
	b := slices.Clone(a)
	slices.Sort(b)
	return slices.Compact(b)
}

// TestDistributionMatchesSoftmax draws 20k tokens and compares the counts
// with the expected probabilities by Pearson's chi-square statistic. The
// seed is fixed, so the test is deterministic; the bounds are the 99.9%
// quantiles of the chi-square distribution.
func TestDistributionMatchesSoftmax(t *testing.T) {
	logits := []float32{1.0, 0.5, 0, -0.5, -1, 2}
	tests := []struct {
		name  string
		set   func(*Params)
		probs []float64 // expected
		bound float64   // chi-square 99.9% quantile for len(nonzero probs)-1 dof
	}{
		{"temperature 1", nil, softmax64(logits, 1, nil), 20.52},
		{"temperature 0.5", func(p *Params) { p.Temperature = 0.5 }, softmax64(logits, 0.5, nil), 20.52},
		{"top-k 3 at temperature 2", func(p *Params) { p.TopK = 3; p.Temperature = 2 },
			softmax64(logits, 2, []bool{true, true, false, false, false, true}), 13.82},
	}
	const draws = 20000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, params(func(p *Params) {
				p.Seed = 2026
				if tt.set != nil {
					tt.set(p)
				}
			}))
			counts := make([]int, len(logits))
			for range draws {
				counts[s.Sample(logits, nil)]++
			}
			var chi2 float64
			for i, p := range tt.probs {
				if p == 0 {
					if counts[i] != 0 {
						t.Fatalf("token %d has probability 0 but was drawn %d times", i, counts[i])
					}
					continue
				}
				e := p * draws
				d := float64(counts[i]) - e
				chi2 += d * d / e
			}
			t.Logf("counts %v, chi-square %.2f (bound %.2f)", counts, chi2, tt.bound)
			if chi2 > tt.bound {
				t.Errorf("chi-square %.2f > %.2f: counts %v, expected probabilities %v", chi2, tt.bound, counts, tt.probs)
			}
		})
	}
}

func softmax64(logits []float32, temp float64, keep []bool) []float64 {
	out := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		if keep != nil && !keep[i] {
			continue
		}
		out[i] = math.Exp(float64(v) / temp)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		set     func(*Params)
		wantErr string // "" means valid
	}{
		{"defaults", nil, ""},
		{"negative temperature is greedy", func(p *Params) { p.Temperature = -1 }, ""},
		{"zero temperature", func(p *Params) { p.Temperature = 0 }, ""},
		{"negative top-k disables", func(p *Params) { p.TopK = -1 }, ""},
		{"top-p 1", func(p *Params) { p.TopP = 1 }, ""},
		{"min-p 0 and 1", func(p *Params) { p.MinP = 0 }, ""},
		{"min-p 1", func(p *Params) { p.MinP = 1 }, ""},
		{"negative frequency penalty", func(p *Params) { p.FrequencyPenalty = -0.5 }, ""},
		{"repeat-last-n -1", func(p *Params) { p.RepeatLastN = -1 }, ""},
		{"NaN temperature", func(p *Params) { p.Temperature = nan }, "temperature"},
		{"infinite temperature", func(p *Params) { p.Temperature = inf }, "temperature"},
		{"top-p 0", func(p *Params) { p.TopP = 0 }, "top-p"},
		{"top-p above 1", func(p *Params) { p.TopP = 1.01 }, "top-p"},
		{"top-p NaN", func(p *Params) { p.TopP = nan }, "top-p"},
		{"min-p negative", func(p *Params) { p.MinP = -0.1 }, "min-p"},
		{"min-p above 1", func(p *Params) { p.MinP = 2 }, "min-p"},
		{"repeat penalty 0", func(p *Params) { p.RepeatPenalty = 0 }, "repeat penalty"},
		{"repeat penalty negative", func(p *Params) { p.RepeatPenalty = -1.1 }, "repeat penalty"},
		{"repeat-last-n -2", func(p *Params) { p.RepeatLastN = -2 }, "repeat-last-n"},
		{"frequency NaN", func(p *Params) { p.FrequencyPenalty = nan }, "frequency penalty"},
		{"presence Inf", func(p *Params) { p.PresencePenalty = negInf }, "presence penalty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			if tt.set != nil {
				tt.set(&p)
			}
			err := p.Validate()
			_, newErr := New(p)
			if (err == nil) != (newErr == nil) {
				t.Fatalf("Validate error %v but New error %v", err, newErr)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error about %s", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q, want it to mention %q", err, tt.wantErr)
			}
		})
	}
	if err := (Params{}).Validate(); err == nil {
		t.Error("zero Params validated; want an error (TopP 0)")
	}
}

func TestDefaultParams(t *testing.T) {
	want := Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64}
	if got := DefaultParams(); got != want {
		t.Errorf("DefaultParams() = %+v, want %+v", got, want)
	}
	if s := mustNew(t, want); s.Params() != want {
		t.Errorf("Params() = %+v, want %+v", s.Params(), want)
	}
}

func TestSoftmax(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
		want   []float64
	}{
		{"uniform", []float32{3, 3, 3, 3}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"log probs", lnProbs(0.1, 0.2, 0.7), []float64{0.1, 0.2, 0.7}},
		{"NaN and -Inf are zero", []float32{nan, 0, negInf, 0}, []float64{0, 0.5, 0, 0.5}},
		{"+Inf shares everything", []float32{inf, 5, inf}, []float64{0.5, 0, 0.5}},
		{"all -Inf is all zero", []float32{negInf, nan}, []float64{0, 0}},
		{"large values do not overflow", []float32{3e38, 3e38}, []float64{0.5, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Softmax(nil, tt.logits)
			lg := LogSoftmax(make([]float32, 1, 64), tt.logits)
			if len(got) != len(tt.want) || len(lg) != len(tt.want) {
				t.Fatalf("lengths %d, %d; want %d", len(got), len(lg), len(tt.want))
			}
			for i, w := range tt.want {
				if math.Abs(float64(got[i])-w) > 1e-6 {
					t.Errorf("Softmax[%d] = %v, want %v", i, got[i], w)
				}
				if lw := math.Log(w); math.Abs(float64(lg[i])-lw) > 1e-5 && !(math.IsInf(lw, -1) && math.IsInf(float64(lg[i]), -1)) {
					t.Errorf("LogSoftmax[%d] = %v, want %v", i, lg[i], lw)
				}
			}
		})
	}
	buf := make([]float32, 8)
	if out := Softmax(buf, []float32{1, 2}); &out[0] != &buf[0] {
		t.Error("Softmax reallocated a dst that was long enough")
	}
}

func vocab(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, seed))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(rng.NormFloat64() * 3)
	}
	return l
}

func TestSampleNoAllocs(t *testing.T) {
	logits := vocab(150_000, 7)
	history := make([]int, 100)
	for i := range history {
		history[i] = i * 997 % len(logits)
	}
	withPenalties := DefaultParams()
	withPenalties.RepeatPenalty = 1.1
	withPenalties.FrequencyPenalty = 0.1
	nucleus := DefaultParams()
	nucleus.TopK = 0
	for name, p := range map[string]Params{"defaults": DefaultParams(), "penalties": withPenalties, "top-p without top-k": nucleus} {
		s := mustNew(t, p)
		s.Sample(logits, history) // first call sizes the buffers
		if a := testing.AllocsPerRun(5, func() { s.Sample(logits, history) }); a != 0 {
			t.Errorf("%s: %v allocations per Sample, want 0", name, a)
		}
	}
}

func BenchmarkSample150k(b *testing.B) {
	logits := vocab(150_000, 8)
	history := make([]int, 64)
	for i := range history {
		history[i] = i * 31
	}
	greedy := DefaultParams()
	greedy.Temperature = 0
	nucleus := DefaultParams()
	nucleus.TopK = 0
	penal := DefaultParams()
	penal.RepeatPenalty = 1.1
	for _, bc := range []struct {
		name string
		p    Params
	}{{"defaults", DefaultParams()}, {"greedy", greedy}, {"penalties", penal}, {"topk0-topp0.95", nucleus}} {
		b.Run(bc.name, func(b *testing.B) {
			s := mustNew(b, bc.p)
			for b.Loop() {
				s.Sample(logits, history)
			}
		})
	}
}

func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	inputs := map[string]func(n int) []float32{
		"random with duplicates": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.IntN(n/4 + 1))
			}
			return l
		},
		"ascending": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(i)
			}
			return l
		},
		"descending": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(-i)
			}
			return l
		},
		"all equal": func(n int) []float32 { return make([]float32, n) },
		"mostly -Inf": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = negInf
				if i%7 == 3 {
					l[i] = float32(i % 5)
				}
			}
			return l
		},
	}
	for name, gen := range inputs {
		for _, n := range []int{1, 5, 100, 2000} {
			for _, k := range []int{1, 3, 40, n - 1} {
				if k < 1 {
					continue
				}
				logits := gen(n)
				var want []cand
				for i, v := range logits {
					if v > negInf {
						want = append(want, cand{int32(i), v})
					}
				}
				slices.SortFunc(want, compareCand)
				want = want[:min(k, len(want))]
				got := topK(logits, k, make([]cand, 0, k))
				if !slices.Equal(got, want) {
					t.Fatalf("%s n=%d k=%d: topK = %v, want %v", name, n, k, got, want)
				}
			}
		}
	}
}

func TestSampleAllowed(t *testing.T) {
	logits := []float32{3, 2.5, 1, 0.5, 2.9, negInf}
	cases := []struct {
		name    string
		temp    float32
		allowed []uint64
		want    []int // the tokens that may come out
	}{
		{"greedy skips the masked arg-max", 0, []uint64{0b011110}, []int{4}},
		{"greedy single", 0, []uint64{0b001000}, []int{3}},
		{"nothing allowed", 0, []uint64{0}, []int{-1}},
		{"only a -Inf token allowed", 0.8, []uint64{0b100000}, []int{-1}},
		{"short mask", 0, nil, []int{-1}},
		{"draws stay inside", 1.5, []uint64{0b001110}, []int{1, 2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := DefaultParams()
			p.Temperature, p.TopK, p.MinP, p.TopP = c.temp, 0, 0, 1
			s, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			for range 200 {
				got := s.SampleAllowed(logits, nil, c.allowed)
				if !slices.Contains(c.want, got) {
					t.Fatalf("SampleAllowed = %d, want one of %v", got, c.want)
				}
			}
			// The mask is not kept: a plain Sample sees every token again.
			if got := s.Sample(logits, nil); c.temp == 0 && got != 0 {
				t.Errorf("Sample after SampleAllowed = %d, want 0", got)
			}
		})
	}
}
