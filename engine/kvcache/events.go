package kvcache

import (
	"fmt"

	"kvscope/engine/ring"
)

// EventKind says what happened to the cache.
type EventKind uint8

// The kinds of event. One event describes one operation of the manager and
// lists every block it touched, so a prefill of many blocks is one event.
const (
	EventAlloc    EventKind = iota + 1 // blocks taken from the pool for a sequence
	EventFree                          // blocks released by a sequence
	EventCacheHit                      // cached blocks reused for a new sequence's prefix
	EventEvict                         // cached, unreferenced blocks evicted to make room
	EventPreempt                       // a sequence preempted (reason says how)
	EventSwapOut                       // a sequence's blocks copied to the host pool
	EventSwapIn                        // a sequence's blocks brought back from the host pool
	EventCoW                           // a shared block copied before a write
	EventOverflow                      // a sequence reached its context limit
)

var eventNames = [...]string{
	EventAlloc:    "alloc",
	EventFree:     "free",
	EventCacheHit: "cache-hit",
	EventEvict:    "evict",
	EventPreempt:  "preempt",
	EventSwapOut:  "swap-out",
	EventSwapIn:   "swap-in",
	EventCoW:      "cow",
	EventOverflow: "overflow",
}

// String returns the kind's name, such as "cache-hit".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one thing the manager did. Events are values: their slices are
// never shared with the manager.
type Event struct {
	ID     uint64    // position in the stream, from 1, without gaps
	Step   int64     // the manager's step when it happened
	Kind   EventKind // what happened
	Seq    SeqID     // the sequence concerned (for evictions, the one that needed room)
	Blocks []int     // device block ids concerned (host ids for swap-out sources are not listed)
	Tokens int       // tokens concerned (hit tokens, dropped tokens, preempted tokens)
	Bytes  int64     // bytes moved (swap)
	Reason string    // why, in words
}

// String formats the event on one line.
func (e Event) String() string {
	s := fmt.Sprintf("#%d step %d %s seq %d", e.ID, e.Step, e.Kind, e.Seq)
	if len(e.Blocks) > 0 {
		s += fmt.Sprintf(" blocks %v", e.Blocks)
	}
	if e.Tokens != 0 {
		s += fmt.Sprintf(" tokens %d", e.Tokens)
	}
	if e.Bytes != 0 {
		s += fmt.Sprintf(" bytes %d", e.Bytes)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// EventLog is a bounded ring of the most recent events. The manager appends
// to it without ever waiting for a reader: when the ring is full the oldest
// event is overwritten. Any number of readers, on any goroutines, each keep
// their own cursor (Since) and learn how many events they missed.
type EventLog = ring.Log[Event]

func newEventLog(capacity int) *EventLog {
	return ring.New(capacity, func(e *Event, id uint64) { e.ID = id })
}
