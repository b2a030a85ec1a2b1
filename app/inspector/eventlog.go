// This file holds the inspector's event log: one readable line an event.

package inspector

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// Describe turns a cache event into one readable line, such as
// "step 42: block 17 evicted (LRU, idle 42 steps) to make room for
// conversation 3". before is the latest snapshot taken before the event
// (it tells how long evicted blocks had been idle); it may be nil. name
// names sequences; nil writes "sequence N". The words are the engine's
// (engine.DescribeCacheEvent), the one describer of cache events.
func Describe(e kvcache.Event, before *kvcache.Snapshot, name func(kvcache.SeqID) string) string {
	if name == nil {
		name = func(id kvcache.SeqID) string { return fmt.Sprintf("sequence %d", id) }
	}
	return fmt.Sprintf("step %d: %s", e.Step, engine.DescribeCacheEvent(e, before, name))
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
