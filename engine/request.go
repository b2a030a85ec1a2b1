package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"kvscope/engine/constrain"
	"kvscope/engine/kvcache"
	"kvscope/engine/sample"
)

// Request is one generation request.
type Request struct {
	// Prompt is the text to continue, tokenized with the model's BOS rule.
	// Ignored when Tokens is set.
	Prompt string
	// ParseSpecial turns the text of special tokens in Prompt (such as
	// "</s>" or "<|im_end|>") into those tokens. Leave it false for text a
	// user typed, so that what they wrote stays text; set it for a
	// rendered chat template.
	ParseSpecial bool
	// Tokens is an already tokenized prompt.
	Tokens []int
	// Sampling settings; the zero value is replaced by sample.DefaultParams.
	Sampling *sample.Params
	// MaxTokens bounds the generated tokens per sample; 0: until the
	// context is full, which under a rolling or truncating overflow policy
	// never comes (generation goes on until the request is cancelled).
	MaxTokens int
	// Stop strings end generation when they appear in the text; the text
	// up to them is returned, the stop string is not.
	Stop []string
	// IgnoreEOS keeps generating past end-of-generation tokens.
	IgnoreEOS bool
	// N is the number of parallel samples (default 1). They share the
	// prompt's blocks (fork); the first write into a shared block copies it.
	N int
	// Priority orders requests under the priority policy (higher first).
	Priority int
	// Overflow overrides the cache's context overflow policy.
	Overflow *kvcache.OverflowPolicy
	// NoCache recomputes the whole sequence for every new token instead of
	// reusing its K/V: the "cache off" teaching mode.
	NoCache bool
	// Label names the request in snapshots and events (a conversation's
	// title, say).
	Label string
	// Constraint, when set, limits every sample to output its grammar
	// accepts (JSON, a JSON Schema, a choice, a regular expression; see
	// package constrain): at each step the tokens that would leave it are
	// masked out. End-of-generation tokens are allowed only where the
	// output is complete, and a sample whose output nothing can extend
	// ends there (FinishStop). The prompt is cached and shared as usual.
	Constraint *constrain.Grammar
}

// FinishReason says why a sample ended.
type FinishReason string

// The finish reasons.
const (
	FinishStop      FinishReason = "stop"      // end-of-generation token or stop string
	FinishLength    FinishReason = "length"    // MaxTokens or the context limit
	FinishCancelled FinishReason = "cancelled" // the request's context was cancelled
	FinishError     FinishReason = "error"     // Err says what went wrong
)

// Chunk is one piece of a stream: a generated token with its text, or, with
// Done set, the end of one sample.
type Chunk struct {
	Sample int    // which of the request's N samples, from 0
	Token  int    // the token id (-1 on a final chunk)
	Text   string // the token's text (may be empty while a UTF-8 character or stop string is incomplete)

	Done   bool         // this sample has ended
	Reason FinishReason // why, when Done
	Err    error        // what went wrong, when Reason is FinishError; with FinishLength, set when the context (not MaxTokens) ended the sample
	// Usage, when Done: prompt tokens, of which reused from the prefix
	// cache, and generated tokens.
	PromptTokens, CachedTokens, Generated int
	// End, when Done, holds the end-of-generation token the model ended
	// the sample on (it is in no other chunk); nil where a length limit,
	// a stop string, a cancellation or an error ended it. A conversation
	// keeps it after the reply, as the model generated it.
	End []int
	// Complete, when Done, says that the request's Constraint ended the
	// sample: its grammar allows nothing more, so the text is whole (no
	// end token follows it, and no stop string cut it).
	Complete bool
	// Computed, when Done, counts the token rows the model computed for
	// this sample (prompt rows not found in the cache, recomputations
	// after preemption, and one per decoded token).
	Computed int
}

// Stream delivers a request's chunks in order. C is closed after the last
// sample's final chunk. The engine never waits for a slow reader: chunks
// queue without bound until read.
type Stream struct {
	// ID identifies the request in snapshots and events.
	ID uint64
	// C delivers the chunks.
	C <-chan Chunk

	mu     sync.Mutex
	queue  []Chunk
	closed bool
	wake   chan struct{}
}

// newStream starts a stream's forwarding goroutine. Once ctx is cancelled
// or the engine has closed (closed), the stream waits at most abandon for its reader to take each chunk before
// it decides the reader has left and drops the rest, so that an abandoned
// stream does not keep a goroutine for ever.
func newStream(id uint64, ctx context.Context, closed <-chan struct{}, abandon time.Duration) *Stream {
	c := make(chan Chunk)
	s := &Stream{ID: id, C: c, wake: make(chan struct{}, 1)}
	go s.forward(c, ctx.Done(), closed, abandon)
	return s
}

// abandonAfter is the default wait for a cancelled stream's reader.
const abandonAfter = 5 * time.Second

// push queues a chunk; it never blocks.
func (s *Stream) push(c Chunk) {
	s.mu.Lock()
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close ends the stream after the queued chunks.
func (s *Stream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Stream) forward(c chan<- Chunk, cancelled, engineClosed <-chan struct{}, abandon time.Duration) {
	abandoned := false
	for {
		s.mu.Lock()
		q, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ch := range q {
			if abandoned {
				continue
			}
			select {
			case c <- ch:
			case <-cancelled:
				abandoned = !sendWithin(c, ch, abandon)
			case <-engineClosed:
				abandoned = !sendWithin(c, ch, abandon)
			}
		}
		if closed && len(q) == 0 {
			close(c)
			return
		}
		if len(q) == 0 {
			<-s.wake
		}
	}
}

// sendWithin sends ch on c unless nobody takes it within d.
func sendWithin(c chan<- Chunk, ch Chunk, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case c <- ch:
		return true
	case <-t.C:
		return false
	}
}

// Collect reads the whole stream and returns each sample's text and finish
// chunk. It is a convenience for tests and the command line.
func (s *Stream) Collect() (texts []string, finals []Chunk) {
	for c := range s.C {
		for len(texts) <= c.Sample {
			texts = append(texts, "")
			finals = append(finals, Chunk{})
		}
		texts[c.Sample] += c.Text
		if c.Done {
			finals[c.Sample] = c
		}
	}
	return texts, finals
}

func (r *Request) validate() error {
	if r.N < 0 || r.N > 64 {
		return fmt.Errorf("n = %d parallel samples is outside 1..64", r.N)
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("max tokens cannot be negative (%d)", r.MaxTokens)
	}
	if r.Sampling != nil {
		if err := r.Sampling.Validate(); err != nil {
			return err
		}
	}
	for _, s := range r.Stop {
		if s == "" {
			return fmt.Errorf("a stop string cannot be empty")
		}
	}
	return nil
}

// constrained is what constrained sampling needs of the engine's
// vocabulary, built the first time a request has a Constraint.
type constrained struct {
	vocab *constrain.Vocab
	mask  []uint64
	eog   []int
}

// vocab returns the engine's constraint vocabulary (the loop's goroutine).
func (e *Engine) constraintVocab() *constrained {
	if e.cons.vocab == nil {
		e.cons.vocab = constrain.FromTokenizer(e.tok)
		e.cons.mask = make([]uint64, (max(e.model.Vocab, e.tok.Size())+63)/64)
		e.cons.eog = e.tok.EOGs()
	}
	return &e.cons
}
