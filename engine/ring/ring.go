// Package ring provides a bounded, numbered event log that a single writer
// appends to without ever waiting, and that any number of readers poll with
// their own cursor, learning how many entries they missed.
package ring

import "sync"

// Log keeps the most recent entries; when full, the oldest is overwritten.
// Entries are numbered from 1 without gaps. Safe for concurrent use.
type Log[T any] struct {
	mu     sync.Mutex
	ring   []T
	next   uint64 // number the next entry gets
	setID  func(*T, uint64)
	notify chan struct{}
}

// New returns a log keeping capacity entries (at least 1). setID, when not
// nil, stamps each entry with its number as it is pushed.
func New[T any](capacity int, setID func(*T, uint64)) *Log[T] {
	return &Log[T]{ring: make([]T, max(1, capacity)), next: 1, setID: setID, notify: make(chan struct{}, 1)}
}

// Push appends an entry and returns its number. It never blocks.
func (l *Log[T]) Push(v T) uint64 {
	l.mu.Lock()
	id := l.next
	if l.setID != nil {
		l.setID(&v, id)
	}
	l.ring[(id-1)%uint64(len(l.ring))] = v
	l.next++
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return id
}

// Since returns the entries numbered after `after` that are still kept, at
// most max of them (all when max <= 0), and the cursor to pass next time.
// dropped counts entries after the cursor that were overwritten before this
// call read them. Start with after = 0.
func (l *Log[T]) Since(after uint64, max int) (entries []T, next uint64, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.next - 1
	oldest := uint64(1)
	if last > uint64(len(l.ring)) {
		oldest = last - uint64(len(l.ring)) + 1
	}
	from := after + 1
	if from < oldest {
		dropped = oldest - from
		from = oldest
	}
	to := last
	if max > 0 && to >= from && to-from+1 > uint64(max) {
		to = from + uint64(max) - 1
	}
	for id := from; id <= to; id++ {
		entries = append(entries, l.ring[(id-1)%uint64(len(l.ring))])
	}
	if to < from {
		return entries, from - 1, dropped
	}
	return entries, to, dropped
}

// Total returns how many entries were ever pushed.
func (l *Log[T]) Total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Notify returns a channel that receives a value (coalesced: at most one
// pending) after entries are pushed. Wait on it, then call Since.
func (l *Log[T]) Notify() <-chan struct{} { return l.notify }
