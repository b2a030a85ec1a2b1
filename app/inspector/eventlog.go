package inspector

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// Describe turns a cache event into one readable line, such as
// "step 42: block 17 evicted (LRU, idle 42 steps) to make room for
// conversation 3". before is the latest snapshot taken before the event
// (it tells how long evicted blocks had been idle); it may be nil. name
// names sequences; nil writes "sequence N".
func Describe(e kvcache.Event, before *kvcache.Snapshot, name func(kvcache.SeqID) string) string {
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
			s += fmt.Sprintf(" (%s, %s)", e.Reason, engine.Count(e.Tokens, "token"))
		}
	case kvcache.EventFree:
		s = fmt.Sprintf("%s released %s", who, blockList(e.Blocks))
		if e.Reason != "" && e.Reason != "freed" {
			s += ": " + e.Reason
		}
	case kvcache.EventCacheHit:
		s = fmt.Sprintf("%s reused %s from the prefix cache (%s not recomputed)", who, blockList(e.Blocks), engine.Count(e.Tokens, "token"))
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
			s += fmt.Sprintf(": no free block; its %s will be computed again", engine.Count(e.Tokens, "token"))
		case mode == "swap":
			s += fmt.Sprintf(": no free block; %s of K/V saved to the host pool", humanize.IBytes(uint64(max(e.Bytes, 0))))
		}
	case kvcache.EventSwapOut:
		s = fmt.Sprintf("%s swapped out: %s (%s) copied to the host pool", who, blockList(e.Blocks), humanize.IBytes(uint64(max(e.Bytes, 0))))
	case kvcache.EventSwapIn:
		s = fmt.Sprintf("%s swapped in: %s back on the device (%s loaded)", who, blockList(e.Blocks), humanize.IBytes(uint64(max(e.Bytes, 0))))
	case kvcache.EventCoW:
		if len(e.Blocks) == 2 {
			s = fmt.Sprintf("block %d copied to block %d before %s wrote into it (copy on write, %s)", e.Blocks[0], e.Blocks[1], who, engine.Count(e.Tokens, "token"))
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
	return fmt.Sprintf("step %d: %s", e.Step, s)
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

// EventLog is a widget listing readable event lines, newest first, keeping
// the most recent Capacity of them.
type EventLog struct {
	widget.BaseWidget

	// Capacity is how many lines it keeps; 0 means 500.
	Capacity int

	lines []string // oldest first
	list  *widget.List
}

// NewEventLog returns an empty event log.
func NewEventLog() *EventLog {
	l := &EventLog{}
	l.list = widget.NewList(
		func() int { return len(l.lines) },
		func() fyne.CanvasObject {
			lab := widget.NewLabel("step 000000: conversation 00 preempted (recompute)")
			lab.Truncation = fyne.TextTruncateEllipsis
			return lab
		},
		func(i widget.ListItemID, o fyne.CanvasObject) {
			if i < len(l.lines) {
				o.(*widget.Label).SetText(l.lines[len(l.lines)-1-i])
			}
		})
	l.ExtendBaseWidget(l)
	return l
}

// Add appends lines and redraws.
func (l *EventLog) Add(lines ...string) {
	if len(lines) == 0 {
		return
	}
	c := l.Capacity
	if c <= 0 {
		c = 500
	}
	l.lines = append(l.lines, lines...)
	if len(l.lines) > c {
		l.lines = append(l.lines[:0], l.lines[len(l.lines)-c:]...)
	}
	l.list.Refresh()
}

// Lines returns the kept lines, oldest first.
func (l *EventLog) Lines() []string { return append([]string(nil), l.lines...) }

// Clear removes every line.
func (l *EventLog) Clear() {
	l.lines = nil
	l.list.Refresh()
}

// CreateRenderer returns the log's renderer: a list.
func (l *EventLog) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(l.list) }
