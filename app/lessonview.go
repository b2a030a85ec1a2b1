// This file holds the lesson bar above the heatmap and the Teaching tab's
// list of lessons: starting, showing and stopping a lesson.

package app

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
	"kvscope/app/lesson"
	"kvscope/app/uithread"
	"kvscope/engine"
)

// Paces are the lesson pace choices: how long the runner holds after a
// step (0: until Next).
var Paces = []struct {
	Name string
	D    time.Duration
}{{"Wait for Next", 0}, {"Next after 3 s", 3 * time.Second}, {"Next after 6 s", 6 * time.Second}, {"Next after 10 s", 10 * time.Second}}

// lessonChartRaster is the height of a lesson chart's plot: low, so that
// the bar with its chart leaves the heatmap in sight at 1024×700.
const lessonChartRaster = 64

// lessonView plays the lessons of package lesson: the Teaching tab lists
// them, and while one runs its bar, above the heatmap on the Inspector
// tab, shows the step's explanation, the figure it promises and the
// check's result, whole (no scrolling), and Next, the pace and Stop.
type lessonView struct {
	a *App

	card fyne.CanvasObject // the Teaching tab's list of lessons

	bar     *fyne.Container // above the heatmap while a lesson is shown
	host    *fyne.Container // the Inspector tab's content, laid out again as the bar comes and goes
	title   *widget.Label
	explain *widget.Label // the step's explanation
	promise *widget.Label // the figure it promises
	result  *widget.Label // the check's result: held or not, with what was measured
	chart   *chart
	figs    *fyne.Container // the promise and the result, with the chart beside them when there is one
	next    *widget.Button
	stopBtn *widget.Button
	pace    *widget.Select

	run      *lessonRun // the lesson shown (nil when none is)
	userMode inspector.Mode
}

// lessonRun is one lesson under way (or ended, still shown).
type lessonRun struct {
	l      *lesson.Lesson
	e      *engine.Engine
	runner *lesson.Runner
	cancel context.CancelFunc
	done   chan struct{} // closed once the runner has put everything back
	ended  bool
	lines  []string         // the figures so far, one a step
	held   *engine.Snapshot // the snapshot the shown step was checked on, which the engine holds
	res    lesson.Result    // what the runner measured: set before done is closed
}

func newLessonView(a *App) *lessonView {
	v := &lessonView{a: a}
	var rows []fyne.CanvasObject
	for _, l := range lesson.All {
		b := widget.NewButton(l.Name, func() { v.start(l) })
		about := widget.NewLabel(l.Purpose)
		about.Wrapping = fyne.TextWrapWord
		rows = append(rows, container.NewBorder(nil, nil, container.NewGridWrap(fyne.NewSize(190, b.MinSize().Height), b), nil, about))
	}
	about := widget.NewLabel("Each lesson runs on its own settings and an empty cache, step by step beside the heatmap, checks what it promises, and puts your settings back when it ends.")
	about.Wrapping = fyne.TextWrapWord // a card's subtitle would not wrap
	v.card = widget.NewCard("Lessons", "", container.NewVBox(append([]fyne.CanvasObject{about}, rows...)...))

	v.title = widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	v.title.Wrapping = fyne.TextWrapWord // whole beside the buttons, on more lines if need be
	v.explain = widget.NewLabel("")
	v.explain.Wrapping = fyne.TextWrapWord
	v.promise = widget.NewLabel("")
	v.promise.Wrapping = fyne.TextWrapWord
	v.promise.Importance = widget.LowImportance
	v.result = widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	v.result.Wrapping = fyne.TextWrapWord
	v.chart = newChart("time per token (ms), by position", "ms")
	v.chart.raster.SetMinSize(fyne.NewSize(200, lessonChartRaster))
	v.chart.Hide()
	v.next = widget.NewButtonWithIcon("Next", theme.MediaSkipNextIcon(), func() {
		if v.run != nil && !v.run.ended {
			v.run.runner.Next()
			v.next.Disable()
		}
	})
	v.next.Importance = widget.HighImportance
	v.next.Disable()
	var paces []string
	for _, p := range Paces {
		paces = append(paces, p.Name)
	}
	v.pace = widget.NewSelect(paces, func(string) {
		if v.run != nil {
			v.run.runner.SetPace(v.paceValue())
		}
	})
	v.pace.SetSelected(Paces[0].Name)
	v.stopBtn = widget.NewButtonWithIcon("Stop", theme.MediaStopIcon(), func() {
		if v.run != nil && v.run.ended {
			v.hide()
			return
		}
		v.stop()
	})
	// The step's text is shown whole: one step at a time, its
	// explanation, promise and result (the inspector scrolls under the
	// bar where the window is short, and the heatmap stays in sight; see
	// lessonRoom).
	v.figs = container.NewVBox()
	v.showChart(false)
	v.bar = container.NewVBox(container.NewBorder(nil, nil, nil, container.NewHBox(v.next, v.pace, v.stopBtn), v.title),
		v.explain, v.figs, widget.NewSeparator())
	v.bar.Hide()
	return v
}

// paceValue is the pace chosen.
func (v *lessonView) paceValue() time.Duration {
	for _, p := range Paces {
		if p.Name == v.pace.Selected {
			return p.D
		}
	}
	return 0
}

// running reports whether a lesson is under way (its settings in force).
func (v *lessonView) running() bool { return v.run != nil && !v.run.ended }

// start plays l on the engine in use (UI goroutine). It first stops what
// would change the lesson's figures: a lesson under way (the new one
// starts once that one has put everything back), the load generator and
// the user's replies under way (their text so far stays).
func (v *lessonView) start(l *lesson.Lesson) {
	a := v.a
	e := a.Engine()
	if e == nil {
		a.setStatus(errNoModel.Error())
		return
	}
	if v.run == nil || v.run.ended {
		v.userMode = a.insp.Heatmap.Mode() // else the lesson under way holds it
	}
	var prev chan struct{}
	if v.run != nil {
		prev = v.run.done
		v.stop()
	}
	a.teach.load.stop()
	stopped := 0
	for _, c := range a.chat.Conversations().List {
		if a.chat.Running(c.ID) {
			a.chat.Stop(c.ID)
			stopped++
		}
	}
	a.insp.Select(0, false) // none of the user's selection
	if m, err := inspector.ParseMode(l.Mode); err == nil {
		a.insp.SetMode(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &lessonRun{l: l, e: e, runner: lesson.NewRunner(e), cancel: cancel, done: make(chan struct{})}
	r.runner.SetPace(v.paceValue())
	r.runner.OnProgress = func(p lesson.Progress) { uithread.Do(func() { v.progress(r, p) }) }
	r.runner.OnLoad = func(g *lesson.LoadGen) {
		uithread.Do(func() {
			if v.run == r && !r.ended {
				a.teach.load.show(g, true)
			}
		})
	}
	v.run = r
	v.title.SetText("Lesson: " + l.Name)
	intro := l.Purpose
	if stopped > 0 {
		intro += fmt.Sprintf(" (%d %s stopped for the lesson; the text so far is kept.)", stopped, plural(stopped, "reply", "replies"))
	}
	v.explain.SetText(intro)
	v.promise.SetText("")
	v.result.SetText("")
	v.showChart(false)
	v.next.SetText("Next")
	v.next.Disable()
	v.stopBtn.SetText("Stop")
	v.showBar(true)
	a.tabs.Select(a.tabInspector)
	go func() {
		defer close(r.done)
		if prev != nil {
			<-prev // the last lesson puts its settings back first
		}
		r.res, _ = r.runner.Run(ctx, l) // the outcome shows through OnProgress
	}()
}

// progress shows what the runner reports (UI goroutine).
func (v *lessonView) progress(r *lessonRun, p lesson.Progress) {
	if v.run != r {
		return // a lesson no longer shown
	}
	n := len(r.l.Steps)
	if len(p.Chart) > 0 {
		var ss []Series
		for i, s := range p.Chart {
			ss = append(ss, Series{Name: s.Name, Color: lessonColors[i%len(lessonColors)], Y: s.Y})
		}
		v.chart.set(ss)
		v.showChart(true)
		if v.host != nil {
			v.host.Refresh() // the bar grows
		}
	}
	switch {
	case p.Done:
		r.ended = true
		held := 0
		for _, line := range r.lines {
			if strings.Contains(line, ": ✓ ") {
				held++
			}
		}
		end := fmt.Sprintf("Lesson: %s, done: %d of %d %s held. Your settings are back.", r.l.Name, held, len(r.lines), plural(len(r.lines), "promise", "promises"))
		if p.Err != nil {
			end = fmt.Sprintf("Lesson: %s stopped (%v). Your settings are back.", r.l.Name, p.Err)
			if errors.Is(p.Err, context.Canceled) {
				end = fmt.Sprintf("Lesson: %s stopped. Your settings are back.", r.l.Name)
			}
		}
		v.title.SetText(end)
		v.next.SetText("Next")
		v.next.Disable()
		v.stopBtn.SetText("Close")
		v.a.insp.SetMode(v.userMode)
		if e := v.a.Engine(); e == r.e {
			v.a.controls.show(e.Config(), e.Snapshot())
		}
	case p.Figure == nil:
		v.title.SetText(fmt.Sprintf("Lesson: %s — step %d of %d", r.l.Name, p.Index+1, n))
		v.explain.SetText(p.Step.Explain)
		v.promise.SetText("Promised: " + p.Step.Promise)
		v.result.SetText("Running the scheduler step by step to the moment this step explains…")
		v.next.Disable()
		if e := v.a.Engine(); e == r.e {
			v.a.controls.show(e.Config(), e.Snapshot()) // the lesson's settings
		}
	default:
		r.lines = append(r.lines, fmt.Sprintf("Step %d: %s", p.Index+1, p.Figure))
		r.held = p.Snapshot
		v.result.SetText(checkText(*p.Figure))
		if p.Last {
			v.next.SetText("Finish")
		}
		if p.Waiting {
			v.next.Enable()
		}
		if v.host != nil {
			v.host.Refresh() // the bar's height follows its lines
		}
	}
}

// showChart lays out the promise and the result alone, or with the
// lesson's chart beside them (so that the bar stays short enough for the
// heatmap to be in sight under it at 1024×700).
func (v *lessonView) showChart(on bool) {
	text := container.NewVBox(v.promise, v.result)
	if on {
		v.chart.Show()
		v.figs.Layout = layout.NewGridLayoutWithColumns(2)
		v.figs.Objects = []fyne.CanvasObject{text, v.chart}
	} else {
		v.chart.Hide()
		v.figs.Layout = layout.NewVBoxLayout()
		v.figs.Objects = []fyne.CanvasObject{text}
	}
	v.figs.Refresh()
}

// checkText says a step's check: held or not, with what was measured.
func checkText(f lesson.Figure) string {
	if f.Held {
		return "✓ Held: " + f.Got
	}
	return "✗ Did not hold: " + f.Got
}

// showBar shows or hides the bar above the heatmap.
func (v *lessonView) showBar(on bool) {
	if on {
		v.bar.Show()
	} else {
		v.bar.Hide()
	}
	if v.host != nil {
		v.host.Refresh()
	}
}

// lessonColors colour a lesson chart's lines.
var lessonColors = []color.RGBA{{0x4e, 0x9b, 0xf7, 0xff}, {0xe1, 0x47, 0x59, 0xff}, {0x5c, 0xc9, 0x8a, 0xff}}

// stop stops the lesson under way (UI goroutine); the runner puts the
// settings back on its goroutine and the bar says when it has.
func (v *lessonView) stop() {
	if v.run == nil {
		return
	}
	if !v.run.ended {
		v.run.cancel()
		v.title.SetText("Lesson: " + v.run.l.Name + ": stopping, putting your settings back…")
		v.next.Disable()
	}
}

// hide takes an ended lesson's bar away.
func (v *lessonView) hide() {
	if v.run != nil && !v.run.ended {
		return
	}
	v.run = nil
	v.showBar(false)
}

// forget drops the lesson shown without waiting for it (a model switch:
// its engine closes).
func (v *lessonView) forget() {
	v.stop()
	if v.run != nil && !v.run.ended {
		v.a.insp.SetMode(v.userMode)
	}
	v.run = nil
	v.showBar(false)
}
