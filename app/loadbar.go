// This file holds the load strip: while a model loads, a line above the
// window's content says what loads, shows a progress bar of its weights
// moving onto the compute backend (the long part: the native backend packs
// them), as LM Studio does, and has a button that cancels the load.

package app

import (
	"context"
	"fmt"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/uithread"
	"kvscope/engine/model"
)

// loadStrip is the view of a load in progress. Its fields belong to the UI
// goroutine.
type loadStrip struct {
	root   *fyne.Container // hidden while nothing loads
	label  *widget.Label
	bar    *widget.ProgressBar
	stop   *widget.Button
	cancel context.CancelFunc // the load's; nil while none runs
	gen    int                // counts begins, so that a late report of one load leaves the next alone
	// hook, when not nil, hears each progress report on the loading
	// goroutine after the strip was told of it (tests use it to act at a
	// known point of a load).
	hook model.Progress
}

func newLoadStrip() *loadStrip {
	s := &loadStrip{label: widget.NewLabel(""), bar: widget.NewProgressBar()}
	s.label.Truncation = fyne.TextTruncateEllipsis
	s.stop = widget.NewButtonWithIcon("Cancel", theme.CancelIcon(), s.cancelLoad)
	// A bar of a fixed width at the right, the label taking the rest.
	bar := container.NewGridWrap(fyne.NewSize(240, s.bar.MinSize().Height), s.bar)
	s.root = container.NewBorder(nil, widget.NewSeparator(), nil, container.NewHBox(container.NewCenter(bar), s.stop), s.label)
	s.root.Hide()
	return s
}

// begin shows the strip for the load of name, which cancel stops.
func (s *loadStrip) begin(name string, cancel context.CancelFunc) {
	s.cancel = cancel
	s.gen++
	s.label.SetText("Loading " + name + "…")
	s.bar.SetValue(0)
	s.stop.Enable()
	s.root.Show()
}

// end hides the strip: the load finished, failed or was cancelled.
func (s *loadStrip) end() {
	if s.cancel != nil {
		s.cancel() // releases the context's resources
	}
	s.cancel = nil
	s.root.Hide()
}

// loading reports whether a load runs.
func (s *loadStrip) loading() bool { return s.cancel != nil }

// cancelLoad stops the load in progress: the loading goroutine sees it
// before its next matrix and frees what it loaded.
func (s *loadStrip) cancelLoad() {
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	s.stop.Disable()
	s.label.SetText("Cancelling: " + s.label.Text)
}

// progress returns the progress function of the load begin started (UI
// goroutine) for name: it runs on the loading goroutine and moves the bar
// on the UI goroutine, at most once per half percent.
func (s *loadStrip) progress(name string) model.Progress {
	hook, gen := s.hook, s.gen
	var mu sync.Mutex
	shown := -1.0
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		f := float64(done) / float64(total)
		mu.Lock()
		show := f >= shown+0.005 || done == total
		if show {
			shown = f
		}
		mu.Unlock()
		if show {
			text := fmt.Sprintf("Loading %s: %s of %s of weights", name, humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)))
			uithread.Do(func() {
				if s.gen != gen || s.cancel == nil {
					return // this load ended
				}
				if !s.stop.Disabled() { // not cancelling
					s.label.SetText(text)
				}
				s.bar.SetValue(f)
			})
		}
		if hook != nil {
			hook(done, total)
		}
	}
}
