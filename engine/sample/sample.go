package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Params are the sampling settings of one sequence. Start from
// DefaultParams: the zero value is not valid (TopP and RepeatPenalty 0).
type Params struct {
	// Temperature divides the logits before the draw. Zero or less means
	// greedy: the arg-max after penalties, lowest id on ties.
	Temperature float32
	// TopK keeps the TopK most likely tokens (lower ids win ties at the
	// boundary); 0 or less disables it.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; it must be in (0, 1], and 1 disables it.
	TopP float32
	// MinP drops tokens less likely than MinP times the most likely one; it
	// must be in [0, 1], and 0 disables it.
	MinP float32
	// RepeatPenalty divides positive logits and multiplies negative ones of
	// tokens seen in the last RepeatLastN tokens; it must be > 0, and 1
	// disables it.
	RepeatPenalty float32
	// RepeatLastN is how many of the latest history tokens the penalties
	// look at: 0 disables all penalties and -1 means the whole history.
	RepeatLastN int
	// FrequencyPenalty is subtracted from a seen token's logit once per
	// occurrence in the window; 0 disables it.
	FrequencyPenalty float32
	// PresencePenalty is subtracted once from the logit of every token seen
	// in the window; 0 disables it.
	PresencePenalty float32
	// Seed seeds the sampler's private PCG source. Every seed, 0 included,
	// is used as given: pass a random one for varied output.
	Seed uint64
}

// DefaultParams returns llama.cpp's default sampling settings
// (common_params_sampling): temperature 0.8, top-k 40, top-p 0.95, min-p
// 0.05, repeat penalty 1.0 (off) over the last 64 tokens, no frequency or
// presence penalty, seed 0.
func DefaultParams() Params {
	return Params{
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.95,
		MinP:          0.05,
		RepeatPenalty: 1.0,
		RepeatLastN:   64,
	}
}

// Validate reports the first impossible setting in p, or nil. A negative
// temperature is valid (it means greedy), and so is a negative TopK (it
// means disabled, as in llama.cpp and vLLM).
func (p Params) Validate() error {
	finite := func(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
	switch {
	case !finite(p.Temperature):
		return fmt.Errorf("sample: temperature %v is not a finite number", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("sample: top-p %v is outside (0, 1] (1 disables it)", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sample: min-p %v is outside [0, 1] (0 disables it)", p.MinP)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty <= 0:
		return fmt.Errorf("sample: repeat penalty %v must be a finite number > 0 (1 disables it)", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("sample: repeat-last-n %d must be >= -1 (0 disables penalties, -1 means the whole history)", p.RepeatLastN)
	case !finite(p.FrequencyPenalty):
		return fmt.Errorf("sample: frequency penalty %v is not a finite number", p.FrequencyPenalty)
	case !finite(p.PresencePenalty):
		return fmt.Errorf("sample: presence penalty %v is not a finite number", p.PresencePenalty)
	}
	return nil
}

// A Sampler draws tokens for one sequence. It owns a PCG source seeded from
// Params.Seed and buffers that are reused from call to call, so after the
// first call on a vocabulary Sample does not allocate. A Sampler is not
// safe for concurrent use: give each sequence its own.
type Sampler struct {
	p   Params
	rng *rand.Rand

	logits []float32 // the caller's logits, cleaned and penalized
	counts []int32   // per-token occurrence counts, all zero between calls
	cands  []cand    // surviving tokens
	w      []float64 // draw weights of the surviving tokens
	mask   []uint64  // SampleAllowed's mask
	masked bool      // within SampleAllowed
}

// New returns a Sampler for p, or the error from p.Validate.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}, nil
}

// Params returns the settings the Sampler was made with.
func (s *Sampler) Params() Params { return s.p }

// Reset reseeds the random source from Params.Seed, so the Sampler draws
// the same tokens again for the same inputs.
func (s *Sampler) Reset() {
	s.rng = rand.New(rand.NewPCG(s.p.Seed, s.p.Seed^0x9e3779b97f4a7c15))
}

// Sample picks the next token from logits (one per vocabulary entry) given
// history, the sequence's previous tokens (prompt and generated), oldest
// first. It does not modify logits or history.
//
// NaN logits count as -Inf and +Inf logits as the largest float32. History
// tokens outside [0, len(logits)) are ignored. If no token has a logit
// above -Inf after the penalties, Sample returns Greedy(logits), which is 0
// when every raw logit is NaN or -Inf. It returns -1 for empty logits.
func (s *Sampler) Sample(logits []float32, history []int) int {
	if len(logits) == 0 {
		return -1
	}
	c, tok := s.filter(logits, history)
	if tok >= 0 {
		return tok
	}
	return s.draw(c)
}

// SampleAllowed is Sample over the tokens whose bit is set in allowed
// (bit id%64 of word id/64; ids past its end are not allowed): the others
// count as -Inf before every stage, as a grammar's mask does in
// llama.cpp. It returns -1 when no allowed token has a logit above -Inf
// (NaN counts as -Inf), never a token outside the mask.
func (s *Sampler) SampleAllowed(logits []float32, history []int, allowed []uint64) int {
	if len(logits) == 0 {
		return -1
	}
	s.mask, s.masked = allowed, true
	defer func() { s.mask, s.masked = nil, false }()
	c, tok := s.filter(logits, history)
	if tok >= 0 || c == nil {
		return tok
	}
	return s.draw(c)
}

// filter runs every stage but the draw. It returns either the surviving
// tokens, or (nil, token) when the choice is already made: greedy mode, a
// single survivor, or the all -Inf fallback. len(logits) > 0.
func (s *Sampler) filter(logits []float32, history []int) ([]cand, int) {
	s.load(logits)
	s.penalize(history)

	if s.p.Temperature <= 0 {
		best := Greedy(s.logits)
		if math.IsInf(float64(s.logits[best]), -1) {
			return nil, s.fallback(logits)
		}
		return nil, best
	}

	var c []cand
	sorted := 0 // c[:sorted] holds the best tokens in rank order
	if k := s.p.TopK; k > 0 && k < len(s.logits) {
		c = topK(s.logits, k, s.cands[:0])
		sorted = len(c)
	} else {
		c = s.cands[:0]
		for i, v := range s.logits {
			if v > negInf {
				c = append(c, cand{int32(i), v})
			}
		}
	}
	if len(c) == 0 {
		return nil, s.fallback(logits)
	}
	c = s.topP(c, sorted)
	c = s.minP(c)
	if len(c) == 1 {
		return nil, int(c[0].id)
	}
	return c, -1
}

// fallback is the token when nothing survives the penalties: the raw
// arg-max, or -1 under a mask (whose tokens all had -Inf logits).
func (s *Sampler) fallback(logits []float32) int {
	if s.masked {
		return -1
	}
	return Greedy(logits)
}

// load copies logits into s.logits, mapping NaN to -Inf and +Inf to the
// largest float32 so that later arithmetic stays finite.
func (s *Sampler) load(logits []float32) {
	s.logits = grow(s.logits, len(logits))
	if cap(s.cands) < len(logits) {
		s.cands = make([]cand, 0, len(logits))
		s.w = make([]float64, len(logits))
	}
	dst := s.logits
	for i, v := range logits {
		if !(v <= math.MaxFloat32) { // NaN or +Inf
			if v != v {
				v = float32(math.Inf(-1))
			} else {
				v = math.MaxFloat32
			}
		}
		dst[i] = v
	}
	if s.masked {
		inf := float32(math.Inf(-1))
		for w := range (len(dst) + 63) / 64 {
			var bits uint64
			if w < len(s.mask) {
				bits = s.mask[w]
			}
			switch row := dst[w*64 : min(w*64+64, len(dst))]; bits {
			case ^uint64(0):
			case 0:
				for i := range row {
					row[i] = inf
				}
			default:
				for i := range row {
					if bits&(1<<i) == 0 {
						row[i] = inf
					}
				}
			}
		}
	}
}

// penalize applies the repeat, frequency and presence penalties, llama.cpp
// style, to every distinct token of the last RepeatLastN history tokens:
// a positive logit is divided by RepeatPenalty and a non-positive one
// multiplied by it, then count*FrequencyPenalty + PresencePenalty is
// subtracted.
func (s *Sampler) penalize(history []int) {
	p := s.p
	if p.RepeatLastN == 0 || (p.RepeatPenalty == 1 && p.FrequencyPenalty == 0 && p.PresencePenalty == 0) {
		return
	}
	win := history
	if p.RepeatLastN > 0 && len(win) > p.RepeatLastN {
		win = win[len(win)-p.RepeatLastN:]
	}
	n := len(s.logits)
	if len(s.counts) < n {
		s.counts = make([]int32, n)
	}
	for _, t := range win {
		if t >= 0 && t < n {
			s.counts[t]++
		}
	}
	for _, t := range win {
		if t < 0 || t >= n || s.counts[t] == 0 {
			continue
		}
		cnt := s.counts[t]
		s.counts[t] = 0 // apply once per distinct token, and leave counts zeroed
		v := s.logits[t]
		if v <= 0 {
			v *= p.RepeatPenalty
		} else {
			v /= p.RepeatPenalty
		}
		s.logits[t] = v - float32(cnt)*p.FrequencyPenalty - p.PresencePenalty
	}
}

// topP keeps the shortest rank-ordered prefix of c whose probability (softmax
// at temperature 1 over c) reaches TopP. Instead of sorting all of c, it
// sorts a growing prefix until the cumulative probability reaches the
// target. c[:sorted] must already be the best tokens in rank order.
func (s *Sampler) topP(c []cand, sorted int) []cand {
	if s.p.TopP >= 1 || len(c) == 1 {
		return c
	}
	maxV := float32(math.Inf(-1))
	for _, x := range c {
		maxV = max(maxV, x.logit)
	}
	var total float64
	for _, x := range c {
		total += math.Exp(float64(x.logit) - float64(maxV))
	}
	target := float64(s.p.TopP) * total

	var cum float64
	i := 0
	m := max(sorted, min(len(c), 64))
	for {
		sortTop(c, sorted, m)
		sorted = m
		for ; i < m; i++ {
			cum += math.Exp(float64(c[i].logit) - float64(maxV))
			if cum >= target {
				return c[:i+1]
			}
		}
		if m == len(c) {
			return c // rounding kept cum just under target: keep all
		}
		m = min(len(c), 4*m)
	}
}

// minP drops the tokens whose probability is below MinP times the largest,
// that is whose logit is below maxLogit + ln(MinP). Order is preserved.
func (s *Sampler) minP(c []cand) []cand {
	if s.p.MinP <= 0 || len(c) == 1 {
		return c
	}
	maxV := math.Inf(-1)
	for _, x := range c {
		maxV = max(maxV, float64(x.logit))
	}
	cut := maxV + math.Log(float64(s.p.MinP))
	kept := c[:0]
	for _, x := range c {
		if float64(x.logit) >= cut {
			kept = append(kept, x)
		}
	}
	return kept
}

// draw samples one token from c with weights exp((logit - max) / T).
func (s *Sampler) draw(c []cand) int {
	maxV := float32(math.Inf(-1))
	for _, x := range c {
		maxV = max(maxV, x.logit)
	}
	invT := 1 / float64(s.p.Temperature)
	w := s.w[:len(c)]
	var sum float64
	for i, x := range c {
		// Subtract first, then scale: logit/T alone can overflow float32.
		e := math.Exp((float64(x.logit) - float64(maxV)) * invT)
		w[i] = e
		sum += e
	}
	u := s.rng.Float64() * sum
	var cum float64
	for i, e := range w {
		cum += e
		if u < cum {
			return int(c[i].id)
		}
	}
	// Rounding left u at or above the final sum: take the last token with
	// nonzero weight.
	for i := len(w) - 1; i >= 0; i-- {
		if w[i] > 0 {
			return int(c[i].id)
		}
	}
	return int(c[0].id)
}
