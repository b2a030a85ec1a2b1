package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"kvscope/engine/constrain"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
	"kvscope/engine/sample"
	"kvscope/engine/sched"
	"kvscope/engine/tokenizer"
)

// reqState is a request inside the engine.
type reqState struct {
	id        uint64
	req       Request
	prompt    []int
	params    sample.Params
	ctx       context.Context
	stream    *Stream
	samples   []*seqState
	live      int // samples not yet finished
	cached    int // prompt tokens found in the prefix cache
	submitted time.Time
	done      chan struct{}
}

func (r *reqState) name() string {
	if r.req.Label != "" {
		return fmt.Sprintf("request %d (%s)", r.id, r.req.Label)
	}
	return fmt.Sprintf("request %d", r.id)
}

// finished returns a channel closed when every sample has ended.
func (r *reqState) finished() <-chan struct{} { return r.done }

// seqState is one sample of a request: a sequence in the scheduler and the
// cache, with its own sampler, detokenizer and output.
type seqState struct {
	q         *sched.Seq
	r         *reqState
	index     int
	sampler   *sample.Sampler
	match     *constrain.Matcher // the request's constraint, nil without one
	dec       *tokenizer.Decoder
	history   []int // prompt and generated ids, for penalties
	generated int
	computed  int    // rows computed for it
	pending   string // decoded text held back while it may start a stop string
	// stopString is set when a stop string ended the sample: the text
	// after it is dropped.
	stopString bool
	admitted   bool
	first      time.Time // first generated token
	done       bool
	end        []int // the end-of-generation token that ended it
	complete   bool  // the constraint's grammar ended it: the output is whole
}

// startSample creates sample i of rs: a new sequence for sample 0, or a fork
// of parent sharing its blocks.
func (e *Engine) startSample(rs *reqState, i int, parent *seqState) *seqState {
	e.nextSeq++
	p := rs.params
	p.Seed += uint64(i)     // each sample draws its own tokens
	smp, _ := sample.New(p) // validated in Submit
	s := &seqState{r: rs, index: i, sampler: smp, dec: e.tok.NewDecoder(),
		q: &sched.Seq{ID: e.nextSeq, Priority: rs.req.Priority, NoCache: rs.req.NoCache}}
	s.q.Opts = e.seqOpts(rs)
	if rs.req.Constraint != nil {
		s.match = rs.req.Constraint.NewMatcher()
	}
	if parent == nil {
		s.q.Tokens = toInt32(rs.prompt)
		s.history = append([]int(nil), rs.prompt...)
		e.sch.Add(s.q)
	} else {
		// The caller forks the parent's blocks or queues the sample.
		s.q.Tokens = append([]int32(nil), parent.q.Tokens...)
		s.history = append([]int(nil), parent.history...)
	}
	rs.samples = append(rs.samples, s)
	rs.live++
	e.seqs[s.q.ID] = s
	return s
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// step runs one scheduler iteration: plan, one forward pass over the whole
// batch, commit, sample.
func (e *Engine) step() {
	t0 := time.Now()
	plan, err := e.sch.Schedule()
	if err != nil {
		e.failAll(fmt.Errorf("scheduler: %w", err))
		return
	}
	rep := StepReport{Step: e.mgr.Step(), Prefill: plan.Prefill, Decode: plan.Decode}
	for _, q := range plan.Admitted {
		s := e.seqs[q.ID]
		if !s.admitted {
			s.admitted = true
			if s.index == 0 {
				s.r.cached = e.mgr.Computed(q.ID)
			}
		}
	}
	for _, f := range plan.Failed {
		s := e.seqs[f.Seq.ID]
		var ce *kvcache.ContextLimitError
		var small *sched.CacheTooSmallError
		switch {
		case errors.As(f.Err, &ce):
			e.event(Event{Kind: EventContextFull, Request: s.r.id, Seq: s.q.ID, Text: fmt.Sprintf("%s: %v", s.r.name(), f.Err)})
			e.finish(s, FinishLength, fmt.Errorf("the context of %d tokens is full", ce.Limit))
		case errors.As(f.Err, &small):
			// The whole cache is this sequence's context limit.
			e.event(Event{Kind: EventContextFull, Request: s.r.id, Seq: s.q.ID, Text: fmt.Sprintf("%s: %v", s.r.name(), f.Err)})
			e.finish(s, FinishLength, fmt.Errorf("the cache is full: %w", f.Err))
		default:
			e.finish(s, FinishError, f.Err)
		}
	}

	for _, sh := range plan.Shifts {
		o := sh.Overflow
		e.model.ShiftKeys(e.store, e.mgr.BlockTable(sh.Seq.ID), o.RotateFrom, o.RotateTo, -o.Shift)
		e.event(Event{Kind: EventShift, Request: e.seqs[sh.Seq.ID].r.id, Seq: sh.Seq.ID, Tokens: o.DroppedTo - o.DroppedFrom,
			Text: fmt.Sprintf("%s reached its context limit: rolling window dropped tokens %d..%d after the attention sinks and re-positioned %d keys by -%d",
				e.seqs[sh.Seq.ID].r.name(), o.DroppedFrom, o.DroppedTo-1, o.RotateTo-o.RotateFrom, o.Shift)})
	}
	var b model.Batch
	for _, w := range plan.Work {
		for pos := w.Start; pos < w.End; pos++ {
			b.Add(int(w.Seq.Tokens[pos]), pos, w.Blocks, w.Logits && pos == w.End-1)
		}
		e.seqs[w.Seq.ID].computed += w.End - w.Start
		rep.Seqs = append(rep.Seqs, SeqWork{Seq: w.Seq.ID, Request: e.seqs[w.Seq.ID].r.id, Start: w.Start, Tokens: w.End - w.Start, Prefill: w.Prefill})
	}
	var logits [][]float32
	if b.Len() > 0 {
		logits, err = e.model.Forward(e.store, &b)
		if err != nil {
			e.failAll(fmt.Errorf("forward pass: %w", err))
			return
		}
	}
	li := 0
	sampled := 0 // tokens generated this step
	for _, w := range plan.Work {
		s := e.seqs[w.Seq.ID]
		if err := e.sch.Commit(w.Seq, w.End); err != nil {
			e.finish(s, FinishError, err)
			continue
		}
		if w.Logits {
			before := e.generatedBy(s.r)
			e.sampleNext(s, logits[li])
			sampled += e.generatedBy(s.r) - before
			li++
		}
	}
	e.sch.EndStep()
	rep.Duration = time.Since(t0)
	rep.Preempted = ids(plan.Preempted)
	rep.Admitted = ids(plan.Admitted)
	rep.SwappedIn = ids(plan.SwappedIn)
	e.tps.add(time.Now(), sampled)
	e.flushCacheEvents(&rep)
	rep.Explain = rep.explain()
	e.last = rep
	e.event(Event{Kind: EventStep, Text: rep.Explain})
	if time.Since(e.lastSnap) >= snapshotInterval || e.paused || e.watch.any() {
		e.publish()
	}
}

// generatedBy counts the tokens rs's samples have generated.
func (e *Engine) generatedBy(rs *reqState) int {
	n := 0
	for _, s := range rs.samples {
		n += s.generated
	}
	return n
}

// snapshotInterval bounds how often snapshots are published while running
// (the UI redraws at most this often anyway).
const snapshotInterval = 30 * time.Millisecond

func ids(qs []*sched.Seq) []kvcache.SeqID {
	var out []kvcache.SeqID
	for _, q := range qs {
		out = append(out, q.ID)
	}
	return out
}

// sampleNext samples s's next token from its logits (forking the other
// samples first, after the prompt).
func (e *Engine) sampleNext(s *seqState, logits []float32) {
	rs := s.r
	if s.index == 0 && s.generated == 0 && len(rs.samples) < rs.req.N {
		for i := len(rs.samples); i < rs.req.N; i++ {
			c := e.startSample(rs, i, s)
			err := e.sch.Fork(s.q, c.q)
			switch {
			case err == nil:
				c.admitted = true
				e.sampleNext(c, logits)
			case errors.Is(err, kvcache.ErrNoSpace):
				// No room to share or copy the prompt now (contiguous
				// mode): the sample waits and computes it when admitted.
				e.sch.Add(c.q)
			default:
				e.finish(c, FinishError, fmt.Errorf("parallel sample %d: %w", i, err))
			}
		}
	}
	var tok int
	if s.match != nil {
		if tok = e.sampleConstrained(s, logits); tok < 0 {
			return
		}
	} else {
		tok = s.sampler.Sample(logits, s.history)
	}
	if s.generated == 0 {
		s.first = time.Now()
	}
	if !rs.req.IgnoreEOS && e.tok.IsEOG(tok) || s.match != nil && e.tok.IsEOG(tok) {
		s.end = []int{tok}
		e.finish(s, FinishStop, nil)
		return
	}
	s.generated++
	s.history = append(s.history, tok)
	s.q.Tokens = append(s.q.Tokens, int32(tok))
	text, stopped := s.cutStop(s.dec.Add(tok), rs.req.Stop)
	rs.stream.push(Chunk{Sample: s.index, Token: tok, Text: text})
	switch {
	case stopped:
		e.finish(s, FinishStop, nil)
	case s.match != nil && s.match.Done():
		s.complete = true
		e.finish(s, FinishStop, nil) // nothing can follow: the output is complete
	case rs.req.MaxTokens > 0 && s.generated >= rs.req.MaxTokens:
		e.finish(s, FinishLength, nil)
	}
}

// sampleConstrained samples s's next token among those its constraint
// allows, with end-of-generation tokens where the output is complete, and
// moves the constraint past it. It returns -1 after finishing s when no
// token can continue the output.
func (e *Engine) sampleConstrained(s *seqState, logits []float32) int {
	c := e.constraintVocab()
	n := s.match.Allowed(c.vocab, c.mask)
	if s.match.Accepting() {
		for _, id := range c.eog {
			if id >= 0 && id < len(c.mask)*64 {
				c.mask[id>>6] |= 1 << (id & 63)
				n++
			}
		}
	}
	tok := -1
	if n > 0 {
		tok = s.sampler.SampleAllowed(logits, s.history, c.mask)
	}
	if tok < 0 {
		e.finish(s, FinishError, errors.New("constrained output: no token of the vocabulary can continue it"))
		return -1
	}
	if !e.tok.IsEOG(tok) && !s.match.Advance(c.vocab.Piece(tok)) {
		e.finish(s, FinishError, fmt.Errorf("constrained output: token %d was allowed but refused", tok))
		return -1
	}
	return tok
}

// cutStop appends piece to the held-back text and returns what can be
// released: everything when no stop string may be starting, the text
// before a stop string (stopped) when one has appeared.
func (s *seqState) cutStop(piece string, stops []string) (text string, stopped bool) {
	if len(stops) == 0 {
		return piece, false
	}
	s.pending += piece
	first := -1 // the earliest stop string in the text wins
	for _, st := range stops {
		if i := strings.Index(s.pending, st); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		text = s.pending[:first]
		s.pending = ""
		s.stopString = true
		return text, true
	}
	// Hold back the longest tail that is a prefix of a stop string.
	hold := 0
	for _, st := range stops {
		for n := min(len(st)-1, len(s.pending)); n > hold; n-- {
			if strings.HasSuffix(s.pending, st[:n]) {
				hold = n
				break
			}
		}
	}
	text = s.pending[:len(s.pending)-hold]
	s.pending = s.pending[len(s.pending)-hold:]
	return text, false
}

// finish ends sample s: frees its blocks and sends its final chunk.
func (e *Engine) finish(s *seqState, reason FinishReason, err error) {
	if s.done {
		return
	}
	s.done = true
	if s.q.State != sched.Finished {
		if rerr := e.sch.Remove(s.q); rerr != nil && err == nil {
			reason, err = FinishError, rerr
		}
	}
	delete(e.seqs, s.q.ID)
	e.gone[s.q.ID] = s // its last cache events still name it
	rs := s.r
	if tail := s.pending + s.dec.Flush(); tail != "" && !s.stopString {
		rs.stream.push(Chunk{Sample: s.index, Token: -1, Text: tail})
	}
	rs.stream.push(Chunk{Sample: s.index, Token: -1, Done: true, Reason: reason, Err: err,
		PromptTokens: len(rs.prompt), CachedTokens: rs.cached, Generated: s.generated, Computed: s.computed, End: s.end, Complete: s.complete})
	text := fmt.Sprintf("%s sample %d finished (%s) after %s", rs.name(), s.index, reason, Count(s.generated, "token"))
	if err != nil {
		text += ": " + err.Error()
	}
	e.event(Event{Kind: EventFinish, Request: rs.id, Seq: s.q.ID, Tokens: s.generated, Text: text})
	rs.live--
	if rs.live == 0 {
		rs.end(reason, err) // samples never forked (the prompt did not finish) end the same way
		delete(e.reqs, rs.id)
	}
}

// end sends the final chunk of every sample of rs that has not started
// and closes its stream.
func (rs *reqState) end(reason FinishReason, err error) {
	for i := len(rs.samples); i < rs.req.N; i++ {
		rs.stream.push(Chunk{Sample: i, Token: -1, Done: true, Reason: reason, Err: err, PromptTokens: len(rs.prompt)})
	}
	rs.stream.close()
	close(rs.done)
}

// cancel ends every unfinished sample of rs.
func (e *Engine) cancel(rs *reqState, why string) {
	if rs.live == 0 {
		return
	}
	e.event(Event{Kind: EventCancel, Request: rs.id, Text: fmt.Sprintf("%s cancelled: %s", rs.name(), why)})
	for _, s := range rs.samples {
		e.finish(s, FinishCancelled, nil)
	}
}

func (e *Engine) cancelAll() {
	for _, rs := range e.reqs {
		e.cancel(rs, "the engine is closing")
	}
}

// failAll ends every request with err (an engine fault, not the user's).
func (e *Engine) failAll(err error) {
	e.event(Event{Kind: EventError, Text: err.Error()})
	for _, rs := range e.reqs {
		for _, s := range rs.samples {
			e.finish(s, FinishError, err)
		}
	}
}
