// This file holds the loop that feeds the inspector: the engine's snapshots
// and events drawn every LiveEvery, with the conversations' names on their
// sequences.

package app

import (
	"fmt"
	"time"

	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// LiveEvery is how often the window polls the engine's snapshot and events
// for the inspector: 25 redraws a second at most.
const LiveEvery = 40 * time.Millisecond

// liveLoop feeds the inspector, the chat pane and teaching mode from the
// engine's snapshots and events until stop is closed.
func (a *App) liveLoop(e *engine.Engine, stop chan struct{}) {
	t := time.NewTicker(LiveEvery)
	defer t.Stop()
	var last *engine.Snapshot
	var cursor uint64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s := e.Snapshot()
		evs, next, dropped := e.Events(cursor, 2000)
		if s == last && len(evs) == 0 {
			continue
		}
		last, cursor = s, next
		uithread.Do(func() {
			select {
			case <-stop:
				return // another model took over
			default:
			}
			a.showLive(s, evs, dropped)
		})
	}
}

// showLive shows a snapshot and new events (UI goroutine).
func (a *App) showLive(s *engine.Snapshot, evs []engine.Event, dropped uint64) {
	if s == nil || s.Cache == nil {
		return
	}
	for _, r := range s.Requests {
		// One name per thing: a request's label is its name everywhere (a
		// conversation's is chat.Name's), the same in the engine's log.
		name, group := r.Label, int64(1_000_000+r.ID)
		if id, ok := a.chat.ConversationOf(r.ID); ok {
			group = id
		}
		if name == "" {
			name = fmt.Sprintf("request %d", r.ID)
		}
		for i, sm := range r.Samples {
			n := name
			if len(r.Samples) > 1 {
				n += fmt.Sprintf(" sample %d", i+1)
			}
			a.names[sm.Seq], a.groups[sm.Seq] = n, group
		}
	}
	lines := make([]string, 0, len(evs))
	stepByStep := s.Paused || a.teach.delay.Value > 0
	for _, ev := range evs {
		if ev.Kind == engine.EventStep && !stepByStep {
			continue // one a step at full speed would bury the rest; the Teaching tab explains steps
		}
		lines = append(lines, ev.String()) // the engine's words, as they are
	}
	a.pruneNames(s)
	a.insp.ShowLines(s.Cache, lines, dropped, s.DecodeTPS)
	a.lastSeq = s
	a.chat.Observe(s)
	a.teach.observe(s)
	a.controls.showPool(s)
}

// pruneNames forgets the names and owner colours of sequences that are no
// longer in the cache or in a request, so the maps stay as small as what
// the inspector shows.
func (a *App) pruneNames(s *engine.Snapshot) {
	live := make(map[kvcache.SeqID]bool, len(s.Cache.Seqs))
	for _, q := range s.Cache.Seqs {
		live[q.ID] = true
	}
	for _, r := range s.Requests {
		for _, sm := range r.Samples {
			live[sm.Seq] = true
		}
	}
	for seq := range a.names {
		if !live[seq] {
			delete(a.names, seq)
		}
	}
	for seq := range a.groups {
		if !live[seq] {
			delete(a.groups, seq)
		}
	}
}

// seqName names a sequence for the inspector.
func (a *App) seqName(seq kvcache.SeqID) string {
	if n, ok := a.names[seq]; ok {
		return n
	}
	return fmt.Sprintf("sequence %d", seq)
}

// seqGroup maps a sequence to its owner colour: its conversation.
func (a *App) seqGroup(seq kvcache.SeqID) int64 {
	if g, ok := a.groups[seq]; ok {
		return g
	}
	return int64(seq)
}

// selectConversation draws the shown conversation's block table.
func (a *App) selectConversation() {
	if a.lastSeq == nil {
		return
	}
	id := a.chat.Selected()
	for _, r := range a.lastSeq.Requests {
		if c, ok := a.chat.ConversationOf(r.ID); ok && c == id && len(r.Samples) > 0 {
			a.insp.Select(r.Samples[0].Seq, true)
			return
		}
	}
}
