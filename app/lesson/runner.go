// This file holds the Runner, which plays a lesson from a clean state,
// checks each step and holds the engine there, and puts the settings back.

package lesson

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"kvscope/engine"
)

// Progress is what the runner reports as a lesson goes: a step starting
// (Figure nil), a step's checked figure, or the lesson's end (Done).
type Progress struct {
	Lesson *Lesson
	Index  int // the step, from 0
	Step   *Step
	Figure *Figure // the step's check, once made
	// Snapshot is the state the check measured, with the figure: the
	// engine stays paused on it while the runner holds, so it is what the
	// heatmap shows.
	Snapshot *engine.Snapshot
	Chart    []Series
	// Waiting: the scheduler is paused after the step until Next (or for
	// the pace); Last says it is the lesson's last step.
	Waiting, Last bool
	Done          bool
	Err           error // why the lesson stopped early, when Done
}

// Runner plays lessons on one engine, one at a time.
type Runner struct {
	E *engine.Engine
	// OnProgress, when set, hears of every step, check and end (on the
	// runner's goroutine).
	OnProgress func(Progress)
	// OnLoad, when set, hears of each load a lesson starts.
	OnLoad func(*LoadGen)

	mu    sync.Mutex
	pace  time.Duration
	next  chan struct{}
	paced chan struct{}
}

// NewRunner returns a runner for e that waits for Next after each step.
func NewRunner(e *engine.Engine) *Runner {
	return &Runner{E: e, next: make(chan struct{}, 1), paced: make(chan struct{}, 1)}
}

// SetPace sets how long the runner holds after each step before it goes
// on; 0 waits for Next.
func (r *Runner) SetPace(d time.Duration) {
	r.mu.Lock()
	r.pace = d
	r.mu.Unlock()
	select { // a wait under way takes the new pace at once
	case r.paced <- struct{}{}:
	default:
	}
}

// Pace returns the pace (0: wait for Next).
func (r *Runner) Pace() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pace
}

// Next ends the wait after a step.
func (r *Runner) Next() {
	select {
	case r.next <- struct{}{}:
	default:
	}
}

// Result is a played lesson's figures, one per step checked.
type Result struct {
	Figures []Figure
	Chart   []Series
	// Measured holds figures the lesson measured, by name (such as the
	// small-budget lesson's "sequences at once, f16").
	Measured map[string]int
}

// Held reports whether every figure held.
func (res Result) Held() bool {
	for _, f := range res.Figures {
		if !f.Held {
			return false
		}
	}
	return true
}

// Run plays l from a clean, known state and restores the settings from
// before it when it ends, is stopped (ctx) or fails. The error says why it
// did not run to its end.
func (r *Runner) Run(ctx context.Context, l *Lesson) (res Result, err error) {
	e := r.E
	saved := e.Config()
	wasPaused := e.Snapshot().Paused
	lctx, cancel := context.WithCancel(ctx)
	v := &Env{E: e, Ctx: lctx, runner: r, vals: map[string]any{}, measured: map[string]int{}}
	defer func() {
		cancel()
		if rerr := r.restore(v, saved, wasPaused); rerr != nil && err == nil {
			err = rerr
		}
		res.Chart, res.Measured = v.chart, v.measured
		r.report(Progress{Lesson: l, Index: len(res.Figures), Chart: v.chart, Done: true, Err: err})
	}()
	select {
	case <-r.next: // a Next pressed before the lesson began
	default:
	}
	if wasPaused {
		if err := e.Resume(); err != nil {
			return res, err
		}
	}
	cfg, err := l.Settings(engine.DefaultConfig(), e.Model())
	if err != nil {
		return res, fmt.Errorf("%s cannot run on this model: %w", l.Name, err)
	}
	if err := e.Reconfigure(cfg); err != nil {
		return res, fmt.Errorf("%s cannot run on this model: %w", l.Name, err)
	}
	if err := e.ClearCache(); err != nil {
		return res, err
	}
	// The lesson drives the scheduler itself, one step at a time (see
	// Env.StepUntil), so that each step can stop at the state it explains.
	if err := e.Pause(); err != nil {
		return res, err
	}
	for i := range l.Steps {
		st := &l.Steps[i]
		r.report(Progress{Lesson: l, Index: i, Step: st})
		s, err := st.Do(v)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, fmt.Errorf("step %d: %w", i+1, err)
		}
		got, held := st.Check(v, s)
		f := Figure{Promise: st.Promise, Got: got, Held: held}
		res.Figures = append(res.Figures, f)
		last := i == len(l.Steps)-1
		r.report(Progress{Lesson: l, Index: i, Step: st, Figure: &f, Snapshot: s, Chart: v.chart, Waiting: true, Last: last})
		if err := r.hold(lctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// hold keeps the scheduler paused after a step (the last one too), so the
// heatmap keeps what the step showed, until Next or the pace has passed.
func (r *Runner) hold(ctx context.Context) error {
	if err := r.E.Pause(); err != nil {
		return err
	}
	for {
		pace := r.Pace()
		var tick <-chan time.Time
		t := time.NewTimer(time.Hour)
		if pace > 0 {
			t.Reset(pace)
			tick = t.C
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.paced:
			t.Stop()
			continue // wait the new pace
		case <-tick:
		case <-r.next:
		}
		t.Stop()
		return nil
	}
}

// restore ends the lesson's requests and loads and puts back the settings
// and the pause state from before the lesson.
func (r *Runner) restore(v *Env, saved engine.Config, paused bool) error {
	for _, stop := range v.stops {
		stop()
	}
	for _, g := range v.loads {
		g.Stop()
	}
	e := r.E
	if err := e.Resume(); err != nil && !errors.Is(err, engine.ErrClosed) {
		return err
	}
	for _, q := range v.reqs {
		<-q.done // cancelled with the lesson's context
	}
	for _, g := range v.loads {
		<-g.Done()
	}
	if err := e.Reconfigure(saved); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			return nil
		}
		return fmt.Errorf("restoring the settings from before the lesson: %w", err)
	}
	if paused {
		return e.Pause()
	}
	return nil
}

func (r *Runner) report(p Progress) {
	if r.OnProgress != nil {
		r.OnProgress(p)
	}
}
