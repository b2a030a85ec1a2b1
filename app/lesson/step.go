// This file holds how a lesson drives the engine: one scheduler step at
// a time while the runner keeps it paused, so that a step can stop at the
// very state it explains (a preemption, a copy on write, blocks being
// handed out) however fast the model runs.

package lesson

import (
	"context"
	"time"

	"kvscope/engine"
)

// StepUntil runs the paused engine one scheduler step at a time until
// cond holds for its snapshot, and returns that snapshot: the engine stays
// paused there, so the heatmap shows exactly the state cond describes.
// Where there is nothing to run it waits for a request to arrive. It also
// returns (with cond false) once done is closed and nothing is left to
// run, so a state that never comes cannot hang the lesson; done may be
// nil.
func (v *Env) StepUntil(done <-chan struct{}, cond func(*engine.Snapshot) bool) (*engine.Snapshot, error) {
	for {
		if err := v.Ctx.Err(); err != nil {
			return nil, err
		}
		s := v.E.Snapshot()
		if cond(s) {
			return s, nil
		}
		if len(s.Requests) > 0 {
			if _, err := v.E.Step(); err == nil {
				continue
			}
			// Nothing to schedule although requests are listed (one is
			// ending): wait for the next snapshot.
		}
		if isClosed(done) && len(s.Requests) == 0 {
			return s, nil
		}
		if err := v.nextSnapshot(done, s); err != nil {
			return nil, err
		}
	}
}

// RunUntil steps the paused engine until done is closed (a request's or a
// load's end) and no request is left, and returns that snapshot.
func (v *Env) RunUntil(done <-chan struct{}) (*engine.Snapshot, error) {
	return v.StepUntil(done, func(s *engine.Snapshot) bool { return isClosed(done) && len(s.Requests) == 0 })
}

// nextSnapshot waits for a snapshot other than s with a request in it, or
// for done to close, or for the lesson to stop.
func (v *Env) nextSnapshot(done <-chan struct{}, s *engine.Snapshot) error {
	var ctx context.Context
	var cancel context.CancelFunc
	if len(s.Requests) > 0 {
		// Requests listed with nothing to schedule: one is ending, and the
		// engine may publish nothing more until a command comes. Look
		// again shortly.
		ctx, cancel = context.WithTimeout(v.Ctx, 20*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(v.Ctx)
	}
	defer cancel()
	if done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	_, err := v.E.WaitFor(ctx, func(n *engine.Snapshot) bool { return n != s && len(n.Requests) > 0 })
	if err != nil && v.Ctx.Err() != nil {
		return v.Ctx.Err()
	}
	if err == engine.ErrClosed {
		return err
	}
	return nil // a request came, or done closed
}

// isClosed reports whether done is closed (false for nil).
func isClosed(done <-chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}
