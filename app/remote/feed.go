// This file holds the Feed that follows a remote kvscope serve for the
// second inspector.

package remote

import (
	"context"
	"fmt"
	"sync"
	"time"

	"kvscope/app/inspector"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// PollEvery is how often a Feed fetches the remote snapshot.
const PollEvery = 100 * time.Millisecond

// maxPending bounds the events a Feed holds for the next snapshot.
const maxPending = 4096

// Feed shows a remote kvscope's cache on an inspector, as the app's own
// live loop shows the local engine's: it polls the server's snapshot,
// follows its event stream, and hands both to the inspector through
// fyne.Do (package app/uithread), with the requests' labels as the
// sequences' names.
type Feed struct {
	c      *Client
	insp   *inspector.Inspector
	every  time.Duration
	status func(string) // UI goroutine

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards pending and dropped, filled by the event stream
	pending []engine.Event
	dropped uint64

	// UI goroutine.
	names  map[kvcache.SeqID]string
	groups map[kvcache.SeqID]int64
	shown  *RemoteSnapshot
}

// Attach starts feeding insp from c every every (0: PollEvery) and returns
// the Feed; status (called on the UI goroutine, nil for none) hears of
// trouble and recovery. Call Attach on the UI goroutine: it sets insp's
// names.
func Attach(c *Client, insp *inspector.Inspector, every time.Duration, status func(string)) *Feed {
	if every <= 0 {
		every = PollEvery
	}
	if status == nil {
		status = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feed{c: c, insp: insp, every: every, status: status, cancel: cancel, done: make(chan struct{}),
		names: map[kvcache.SeqID]string{}, groups: map[kvcache.SeqID]int64{}}
	insp.SetNames(f.seqName, f.seqGroup)
	insp.Log.Clear()
	insp.History.Clear()
	var wg sync.WaitGroup
	wg.Go(func() { f.follow(ctx) })
	wg.Go(func() { f.poll(ctx) })
	go func() {
		wg.Wait()
		close(f.done)
	}()
	return f
}

// Stop ends the feed and waits for its goroutines. Do not call it holding
// app/uithread's lock (a test's Locked): the feed may be waiting for it.
func (f *Feed) Stop() {
	f.cancel()
	<-f.done
}

// Shown returns the last snapshot shown (UI goroutine), nil before any.
func (f *Feed) Shown() *RemoteSnapshot { return f.shown }

// follow reads the event stream, reconnecting after a second where it
// breaks, from the last event seen.
func (f *Feed) follow(ctx context.Context) {
	var cursor uint64
	for ctx.Err() == nil {
		next, err := f.c.Events(ctx, cursor, func(ev engine.Event) {
			f.mu.Lock()
			if len(f.pending) == maxPending { // the snapshots stopped coming
				f.pending = f.pending[1:]
				f.dropped++
			}
			f.pending = append(f.pending, ev)
			f.mu.Unlock()
		}, func(n uint64) {
			f.mu.Lock()
			f.dropped += n
			f.mu.Unlock()
		})
		cursor = next
		if ctx.Err() != nil {
			return
		}
		uithread.Do(func() { f.status(fmt.Sprintf("Events: %v; reconnecting.", err)) })
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// poll fetches the snapshot every f.every and shows it with the events
// that came meanwhile.
func (f *Feed) poll(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	var last *engine.Snapshot
	failing := false
	for {
		r, err := f.c.Snapshot(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				uithread.Do(func() { f.status("Snapshot: " + err.Error()) })
			}
			failing = true
		} else {
			if failing || last == nil {
				uithread.Do(func() { f.status(fmt.Sprintf("Following %s (%s).", f.c.Base, r.Model)) })
			}
			failing = false
			f.mu.Lock()
			evs, dropped := f.pending, f.dropped
			f.pending, f.dropped = nil, 0
			f.mu.Unlock()
			s := r.Snapshot
			if last == nil || len(evs) > 0 || dropped > 0 || s.Step != last.Step || !s.Taken.Equal(last.Taken) {
				last = s
				uithread.Do(func() {
					if ctx.Err() != nil {
						return
					}
					f.show(r, evs, dropped)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// show hands a snapshot and events to the inspector (UI goroutine), as the
// app's live loop does for the local engine.
func (f *Feed) show(r *RemoteSnapshot, evs []engine.Event, dropped uint64) {
	s := r.Snapshot
	live := map[kvcache.SeqID]bool{}
	for _, q := range s.Cache.Seqs {
		live[q.ID] = true
	}
	for _, rq := range s.Requests {
		name := rq.Label
		if name == "" {
			name = fmt.Sprintf("request %d", rq.ID)
		}
		for i, sm := range rq.Samples {
			n := name
			if len(rq.Samples) > 1 {
				n += fmt.Sprintf(" sample %d", i+1)
			}
			f.names[sm.Seq], f.groups[sm.Seq] = n, int64(1_000_000+rq.ID)
			live[sm.Seq] = true
		}
	}
	for seq := range f.names {
		if !live[seq] {
			delete(f.names, seq)
			delete(f.groups, seq)
		}
	}
	lines := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.Kind == engine.EventStep && !s.Paused {
			continue // one a step would bury the rest
		}
		lines = append(lines, ev.String())
	}
	f.insp.ShowLines(s.Cache, lines, dropped, s.DecodeTPS)
	f.shown = r
}

func (f *Feed) seqName(seq kvcache.SeqID) string {
	if n, ok := f.names[seq]; ok {
		return n
	}
	return fmt.Sprintf("sequence %d", seq)
}

func (f *Feed) seqGroup(seq kvcache.SeqID) int64 {
	if g, ok := f.groups[seq]; ok {
		return g
	}
	return int64(seq)
}
