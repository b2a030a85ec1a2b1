package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"kvscope/engine/kvcache"
)

// EventKind says what an Event is. The cache's kinds keep kvcache's names.
type EventKind string

// The event kinds.
const (
	EventAlloc       EventKind = "alloc"        // blocks taken from the pool for a sequence
	EventFree        EventKind = "free"         // blocks released by a sequence
	EventCacheHit    EventKind = "cache-hit"    // cached blocks reused for a new sequence's prefix
	EventEvict       EventKind = "evict"        // cached, unreferenced blocks evicted to make room
	EventPreempt     EventKind = "preempt"      // a sequence preempted
	EventSwapOut     EventKind = "swap-out"     // a sequence's blocks copied to the host pool
	EventSwapIn      EventKind = "swap-in"      // a sequence's blocks brought back
	EventCoW         EventKind = "cow"          // a shared block copied before a write
	EventOverflow    EventKind = "overflow"     // a sequence reached its context limit (a policy acted)
	EventSubmit      EventKind = "submit"       // a request taken in
	EventStep        EventKind = "step"         // one scheduler step, explained
	EventFinish      EventKind = "finish"       // a sample ended, or a request was refused
	EventCancel      EventKind = "cancel"       // a request cancelled
	EventReconfigure EventKind = "reconfigure"  // settings changed
	EventPause       EventKind = "pause"        // the scheduler paused
	EventResume      EventKind = "resume"       // the scheduler resumed
	EventContextFull EventKind = "context-full" // a sequence ended at its context limit
	EventShift       EventKind = "shift"        // a rolling window moved a sequence's keys
	EventError       EventKind = "error"        // an engine fault
)

// cacheKind is the engine kind of a cache event kind.
func cacheKind(k kvcache.EventKind) EventKind { return EventKind(k.String()) }

// Event is one thing the engine or its cache did, for the timeline. Text
// is its readable line, written once, by the engine (DescribeCacheEvent
// for the cache's events): the event log, the inspector and any other
// reader show it as it is and never parse it.
type Event struct {
	ID      uint64
	Time    time.Time
	Step    int64
	Kind    EventKind
	Request uint64        // the request, when one is concerned (0: none)
	Seq     kvcache.SeqID // the sequence, when one is concerned
	Blocks  []int
	Tokens  int
	Bytes   int64
	Text    string // a readable line
}

// String returns the event's readable line.
func (ev Event) String() string { return fmt.Sprintf("step %d: %s", ev.Step, ev.Text) }

// event stamps and logs an engine event.
func (e *Engine) event(ev Event) {
	ev.Time = time.Now()
	ev.Step = e.mgr.Step()
	e.events.Push(ev)
}

// flushCacheEvents moves the cache's new events into the engine's log and,
// when rep is given, records their blocks in it.
func (e *Engine) flushCacheEvents(rep ...*StepReport) {
	evs, next, _ := e.mgr.Events().Since(e.cacheCursor, 0)
	e.cacheCursor = next
	defer clear(e.gone)
	var before *kvcache.Snapshot
	if s := e.snap.Load(); s != nil {
		before = s.Cache
	}
	for _, ce := range evs {
		ev := Event{Time: time.Now(), Step: ce.Step, Kind: cacheKind(ce.Kind), Seq: ce.Seq, Blocks: ce.Blocks, Tokens: ce.Tokens, Bytes: ce.Bytes,
			Text: DescribeCacheEvent(ce, before, e.seqName)}
		if s := e.seqState(ce.Seq); s != nil {
			ev.Request = s.r.id
		}
		e.events.Push(ev)
		if len(rep) == 0 {
			continue
		}
		r := rep[0]
		switch ce.Kind {
		case kvcache.EventAlloc:
			r.Allocated = append(r.Allocated, ce.Blocks...)
		case kvcache.EventCacheHit:
			r.Hit = append(r.Hit, ce.Blocks...)
		case kvcache.EventEvict:
			r.Evicted = append(r.Evicted, ce.Blocks...)
		case kvcache.EventFree:
			r.Freed = append(r.Freed, ce.Blocks...)
		case kvcache.EventCoW:
			r.Copied = append(r.Copied, ce.Blocks...)
		}
	}
}

// seqState finds a live or just-finished sequence.
func (e *Engine) seqState(id kvcache.SeqID) *seqState {
	if s, ok := e.seqs[id]; ok {
		return s
	}
	return e.gone[id]
}

// seqName names a sequence by its request (and sample).
func (e *Engine) seqName(id kvcache.SeqID) string {
	s := e.seqState(id)
	if s == nil {
		return fmt.Sprintf("sequence %d", id)
	}
	who := s.r.name()
	if s.r.req.N > 1 {
		who += fmt.Sprintf(" sample %d", s.index+1)
	}
	return who
}

// DescribeCacheEvent writes a cache event as one readable line, such as
// "block 17 evicted (LRU, idle 42 steps) to make room for request 3".
// before is the latest cache snapshot taken before the event (it tells
// how long evicted blocks had been idle); it may be nil. name names
// sequences; nil writes "sequence N". It is the one describer of cache
// events: the engine's log uses it, and so does the inspector.
func DescribeCacheEvent(e kvcache.Event, before *kvcache.Snapshot, name func(kvcache.SeqID) string) string {
	if name == nil {
		name = func(id kvcache.SeqID) string { return fmt.Sprintf("sequence %d", id) }
	}
	who := name(e.Seq)
	var s string
	switch e.Kind {
	case kvcache.EventAlloc:
		s = fmt.Sprintf("%s allocated to %s", blockList(e.Blocks), who)
		switch {
		case strings.HasPrefix(e.Reason, "fork"):
			s = fmt.Sprintf("%s created: %s", who, e.Reason)
		case e.Reason == "append":
			s += " (its tokens filled the last block)"
		case e.Reason != "":
			s += fmt.Sprintf(" (%s, %s)", e.Reason, Count(e.Tokens, "token"))
		}
	case kvcache.EventFree:
		s = fmt.Sprintf("%s released %s", who, blockList(e.Blocks))
		if e.Reason != "" && e.Reason != "freed" {
			s += ": " + e.Reason
		}
	case kvcache.EventCacheHit:
		s = fmt.Sprintf("%s reused %s from the prefix cache (%s not recomputed)", who, blockList(e.Blocks), Count(e.Tokens, "token"))
	case kvcache.EventEvict:
		policy := "eviction"
		if before != nil {
			policy = strings.ToUpper(before.Eviction.String())
		}
		s = fmt.Sprintf("%s evicted (%s%s) to make room for %s", blockList(e.Blocks), policy, idle(e, before), who)
	case kvcache.EventPreempt:
		mode, why := e.Reason, ""
		if i := strings.Index(e.Reason, ": "); i >= 0 {
			mode, why = e.Reason[:i], e.Reason[i+2:]
		}
		s = fmt.Sprintf("%s preempted (%s)", who, mode)
		switch {
		case why != "":
			s += ": " + why
		case mode == "recompute":
			s += fmt.Sprintf(": no free block; its %s will be computed again", Count(e.Tokens, "token"))
		case mode == "swap":
			s += fmt.Sprintf(": no free block; %s of K/V saved to the host pool", humanize.IBytes(uint64(max(e.Bytes, 0))))
		}
	case kvcache.EventSwapOut:
		s = fmt.Sprintf("%s swapped out: %s (%s) copied to the host pool", who, blockList(e.Blocks), humanize.IBytes(uint64(max(e.Bytes, 0))))
	case kvcache.EventSwapIn:
		s = fmt.Sprintf("%s swapped in: %s back on the device (%s loaded)", who, blockList(e.Blocks), humanize.IBytes(uint64(max(e.Bytes, 0))))
	case kvcache.EventCoW:
		if len(e.Blocks) == 2 {
			s = fmt.Sprintf("block %d copied to block %d before %s wrote into it (copy on write, %s)", e.Blocks[0], e.Blocks[1], who, Count(e.Tokens, "token"))
		} else {
			s = fmt.Sprintf("copy on write for %s: %s", who, blockList(e.Blocks))
		}
		if e.Reason != "" {
			s += ": " + e.Reason
		}
	case kvcache.EventOverflow:
		s = fmt.Sprintf("%s reached its context limit", who)
		if e.Reason != "" {
			s += ": " + e.Reason
		}
	default:
		s = e.String()
	}
	return s
}

// blockList names blocks: "block 17", "blocks 3, 4, 9" or "12 blocks (3 … 40)".
func blockList(ids []int) string {
	switch {
	case len(ids) == 0:
		return "no block"
	case len(ids) == 1:
		return fmt.Sprintf("block %d", ids[0])
	case len(ids) <= 6:
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = fmt.Sprint(id)
		}
		return "blocks " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%d blocks (%d … %d)", len(ids), ids[0], ids[len(ids)-1])
}

// idle says how long evicted blocks had been unused, from the snapshot
// before: ", idle 42 steps" or ", idle 40–42 steps"; "" when unknown.
func idle(e kvcache.Event, before *kvcache.Snapshot) string {
	if before == nil {
		return ""
	}
	lo, hi := int64(-1), int64(-1)
	for _, id := range e.Blocks {
		if id < 0 || id >= len(before.Blocks) || before.Blocks[id].State != kvcache.BlockCached {
			continue
		}
		age := e.Step - before.Blocks[id].LastAccess
		if lo < 0 || age < lo {
			lo = age
		}
		hi = max(hi, age)
	}
	switch {
	case lo < 0:
		return ""
	case lo == hi && lo == 1:
		return ", idle 1 step"
	case lo == hi:
		return fmt.Sprintf(", idle %d steps", lo)
	}
	return fmt.Sprintf(", idle %d–%d steps", lo, hi)
}
