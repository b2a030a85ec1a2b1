// Package lesson holds kvscope's teaching lessons as data and the runner
// that plays them on a live engine, with no window: the Teaching tab (in
// package app) draws what the runner reports, and the tests play every
// lesson on a real model.
//
// A Lesson is a value: a name, its purpose, the settings it applies
// (Settings, from the engine's defaults, never from the user's), the
// heatmap colouring it is best watched in, and its steps. Each Step has a
// one-line explanation, the figure it promises, an action (Do) that waits
// on the engine's snapshots through a subscription (engine.WaitFor), and a
// check of the promised figure against the snapshot the action ends on.
//
// The Runner plays one lesson: it records the settings in force, applies
// the lesson's and empties the cache (so no earlier lesson, and none of the
// user's chats, changes what this one shows), and pauses the scheduler.
// Each step's action then runs the engine one scheduler step at a time
// (Env.StepUntil) up to the very state the step explains: blocks being
// handed out, a preemption, a copy on write. The runner checks the step's
// figure on that snapshot, says plainly if it did not hold, and holds the
// engine there until Next (or for a chosen pace), so that the heatmap
// shows what the explanation is about while it is read. When the lesson
// ends or is stopped, its requests end and the settings from before come
// back. Lessons send their own requests straight to the engine: they
// never become conversations.
//
// LoadGen, the load generator, is its own type: synthetic users that send
// requests of a given prompt and reply length, once each (as the lessons
// use it) or one after another until stopped (the Teaching tab's load).
package lesson

import (
	"context"
	"sync"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
)

// A Lesson is one lesson, as data.
type Lesson struct {
	Name    string // the button's label
	Purpose string // one line: what it shows
	// Mode is the heatmap colouring to watch it in (an inspector mode's
	// name: "owner", "fill", "precision", "ref count", "recency").
	Mode string
	// Settings returns the engine settings the lesson runs under, made
	// from base (the engine's defaults) for model m.
	Settings func(base engine.Config, m *model.Model) (engine.Config, error)
	Steps    []Step
	// Picture is the step (from 1) whose hold the lesson's picture in the
	// docs shows (`make screenshot`); 0 picks the middle one.
	Picture int
}

// A Step is one step of a lesson.
type Step struct {
	Explain string // a few sentences: what happens now, and why
	Promise string // the figure it promises, in words
	// Do acts (sends requests, changes settings) and steps the paused
	// engine to the state the step is about (Env.StepUntil); it returns
	// the snapshot of that state, which the engine then holds.
	Do func(v *Env) (*engine.Snapshot, error)
	// Check measures the promised figure on s (and what earlier steps
	// recorded in v): got says what was measured, held whether the promise
	// held.
	Check func(v *Env, s *engine.Snapshot) (got string, held bool)
}

// A Figure is a step's promise and what the engine showed.
type Figure struct {
	Promise string
	Got     string
	Held    bool
}

// String says the figure in one line, plainly when it did not hold.
func (f Figure) String() string {
	if f.Held {
		return "✓ " + f.Got
	}
	return "✗ Not as promised (" + f.Promise + "): " + f.Got
}

// Series is one line of a lesson's chart.
type Series struct {
	Name string
	Y    []float64
}

// Env is what a lesson's steps work with: the engine, the lesson's
// requests and the figures earlier steps recorded. Its methods are for the
// runner's goroutine.
type Env struct {
	E   *engine.Engine
	Ctx context.Context // ends when the lesson is stopped

	runner   *Runner
	reqs     []*Req
	loads    []*LoadGen
	vals     map[string]any
	measured map[string]int
	chart    []Series
	stops    []func() // subscriptions to end with the lesson
}

// Model is the engine's model.
func (v *Env) Model() *model.Model { return v.E.Model() }

// Set records a value for later steps.
func (v *Env) Set(key string, x any) { v.vals[key] = x }

// Int returns an int Set recorded (0 when none).
func (v *Env) Int(key string) int { n, _ := v.vals[key].(int); return n }

// Get returns a value Set recorded.
func (v *Env) Get(key string) any { return v.vals[key] }

// Measure records a figure the lesson measured, for Result.Measured.
func (v *Env) Measure(name string, n int) { v.measured[name] = n }

// Chart sets the lesson's chart.
func (v *Env) Chart(s ...Series) { v.chart = s }

// Track calls f with every snapshot until the returned function is
// called or the lesson ends (on the engine's goroutine: see
// engine.Subscribe).
func (v *Env) Track(f func(*engine.Snapshot)) (stop func()) {
	stop = v.E.Subscribe(f)
	v.stops = append(v.stops, stop)
	return stop
}

// Reconfigure changes the lesson's settings.
func (v *Env) Reconfigure(change func(c *engine.Config)) error {
	c := v.E.Config()
	change(&c)
	return v.E.Reconfigure(c)
}

// Load starts synthetic users for the lesson (see LoadGen); they end with
// the lesson. It returns once every user has sent its first request, so
// that they all arrive before the paused engine takes a step.
func (v *Env) Load(l Load) (*LoadGen, error) {
	g, err := StartLoad(v.Ctx, v.E, l)
	if err != nil {
		return nil, err
	}
	v.loads = append(v.loads, g)
	if v.runner.OnLoad != nil {
		v.runner.OnLoad(g)
	}
	select {
	case <-g.Arrived():
	case <-v.Ctx.Done():
		return nil, v.Ctx.Err()
	}
	return g, nil
}

// Req is one request a lesson sent, read to its end on its own goroutine.
type Req struct {
	ID     uint64 // the engine's request id
	Prompt int    // prompt tokens
	done   chan struct{}

	mu     sync.Mutex
	texts  []string
	finals []engine.Chunk
}

// Submit sends a request labelled for the heatmap and reads its stream.
func (v *Env) Submit(r engine.Request) (*Req, error) {
	st, err := v.E.Submit(v.Ctx, r)
	if err != nil {
		return nil, err
	}
	prompt := len(r.Tokens)
	if r.Tokens == nil {
		prompt = len(v.E.Tokenizer().Encode(r.Prompt, true, r.ParseSpecial))
	}
	q := &Req{ID: st.ID, Prompt: prompt, done: make(chan struct{})}
	v.reqs = append(v.reqs, q)
	go func() {
		defer close(q.done)
		for c := range st.C {
			q.mu.Lock()
			for len(q.texts) <= c.Sample {
				q.texts = append(q.texts, "")
				q.finals = append(q.finals, engine.Chunk{})
			}
			q.texts[c.Sample] += c.Text
			if c.Done {
				q.finals[c.Sample] = c
			}
			q.mu.Unlock()
		}
	}()
	return q, nil
}

// Done is closed when the request's stream has ended.
func (q *Req) Done() <-chan struct{} { return q.done }

// Wait waits for the request to end (or the lesson to stop).
func (q *Req) Wait(ctx context.Context) error {
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Text returns sample i's text so far.
func (q *Req) Text(i int) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i < len(q.texts) {
		return q.texts[i]
	}
	return ""
}

// Finals returns each sample's final chunk (zero until it ends).
func (q *Req) Finals() []engine.Chunk {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]engine.Chunk(nil), q.finals...)
}

// Info finds the request in a snapshot.
func (q *Req) Info(s *engine.Snapshot) (engine.RequestInfo, bool) {
	for _, r := range s.Requests {
		if r.ID == q.ID {
			return r, true
		}
	}
	return engine.RequestInfo{}, false
}

// blockTable returns sequence seq's device block table in s.
func blockTable(s *engine.Snapshot, seq kvcache.SeqID) []int {
	for _, q := range s.Cache.Seqs {
		if q.ID == seq {
			return q.Blocks
		}
	}
	return nil
}
