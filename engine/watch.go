package engine

import (
	"context"
	"sync"
)

// watchers are the snapshot subscribers (see Subscribe).
type watchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(*Snapshot)
}

// any reports whether anyone subscribes.
func (w *watchers) any() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fns) > 0
}

// call hands s to every subscriber (the engine's goroutine).
func (w *watchers) call(s *Snapshot) {
	w.mu.Lock()
	fns := make([]func(*Snapshot), 0, len(w.fns))
	for _, f := range w.fns {
		fns = append(fns, f)
	}
	w.mu.Unlock()
	for _, f := range fns {
		f(s)
	}
}

// Subscribe calls f with every snapshot the engine publishes from now on,
// starting with the latest one, until the returned function is called.
// While anyone subscribes, the engine publishes a snapshot after every
// step (not only every 30 ms), so a subscriber sees each step's state. f
// runs on the engine's goroutine: it must return quickly and must not call
// the engine's methods that wait for it (Reconfigure, Pause, Step…).
func (e *Engine) Subscribe(f func(*Snapshot)) (cancel func()) {
	w := &e.watch
	w.mu.Lock()
	if w.fns == nil {
		w.fns = map[int]func(*Snapshot){}
	}
	id := w.next
	w.next++
	w.fns[id] = f
	w.mu.Unlock()
	// The latest snapshot, on the engine's goroutine like the rest.
	if err := e.do(func() { f(e.Snapshot()) }); err != nil {
		f(e.Snapshot()) // closed: the last snapshot is the final one
	}
	return func() {
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

// WaitFor returns the first snapshot, from the latest published one on,
// for which cond is true. cond runs on the engine's goroutine, with the
// same rules as Subscribe's f. It returns ctx's error if ctx ends first,
// and ErrClosed if the engine closes with cond still false.
func (e *Engine) WaitFor(ctx context.Context, cond func(*Snapshot) bool) (*Snapshot, error) {
	got := make(chan *Snapshot, 1)
	var once sync.Once
	cancel := e.Subscribe(func(s *Snapshot) {
		if cond(s) {
			once.Do(func() { got <- s })
		}
	})
	defer cancel()
	select {
	case s := <-got:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.done:
		select {
		case s := <-got:
			return s, nil
		default:
			return nil, ErrClosed
		}
	}
}
