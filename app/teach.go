// This file holds the Teaching tab: step mode (pause, step, resume, slow
// motion), with the lessons and the synthetic users.

package app

import (
	"errors"
	"fmt"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/uithread"
	"kvscope/engine"
)

// teacher is the Teaching tab: step mode and slow motion, the lessons
// (lessonview.go) and the load generator (loadview.go).
type teacher struct {
	a *App

	pause, step, resume *widget.Button
	delay               *widget.Slider
	delayLab            *widget.Label
	explain             *widget.Label
	lessons             *lessonView
	load                *loadView
	root                fyne.CanvasObject

	paused bool
	// lessonShown: the step-mode buttons were last shown with a lesson
	// under way.
	lessonShown bool
	// busy names the Pause, Resume or Step under way ("" when none is):
	// the step-mode buttons stay disabled until it ends, so clicks never
	// pile up behind a long step.
	busy string
	// delayBusy: a SetDelay is under way; delayAgain: the slider moved
	// meanwhile, so its value goes to the engine when that one ends.
	delayBusy, delayAgain bool
}

func newTeacher(a *App) *teacher {
	t := &teacher{a: a}
	t.pause = widget.NewButtonWithIcon("Pause", theme.MediaPauseIcon(), func() { t.setPaused(true) })
	t.step = widget.NewButtonWithIcon("Step", theme.MediaSkipNextIcon(), func() { t.doStep() })
	t.resume = widget.NewButtonWithIcon("Resume", theme.MediaPlayIcon(), func() { t.setPaused(false) })
	t.step.Disable()
	t.resume.Disable()
	t.delay = widget.NewSlider(0, 1000)
	t.delay.Step = 25
	t.delayLab = widget.NewLabel("full speed")
	t.delay.OnChanged = func(v float64) { t.delayLab.SetText(delayText(v)) }
	t.delay.OnChangeEnded = func(float64) {
		if e := a.Engine(); e != nil {
			t.applyDelay(e)
		}
	}
	t.explain = widget.NewLabel("Pause the scheduler, then Step: each step says what it ran and why.")
	t.explain.Wrapping = fyne.TextWrapWord

	t.lessons = newLessonView(a)
	t.load = newLoadView(a)
	step := widget.NewCard("Step mode", "", container.NewVBox(
		container.NewHBox(t.pause, t.step, t.resume),
		container.NewBorder(nil, nil, widget.NewLabel("Slow motion"), t.delayLab, t.delay),
		t.explain))
	t.root = container.NewVScroll(container.NewVBox(t.lessons.card, step, t.load.card))
	return t
}

func delayText(ms float64) string {
	if ms == 0 {
		return "full speed"
	}
	return fmt.Sprintf("%.0f ms a step", ms)
}

// delayValue is the slow-motion slider's delay (UI goroutine).
func (t *teacher) delayValue() time.Duration { return time.Duration(t.delay.Value) * time.Millisecond }

// applyDelay puts the slow-motion slider's delay in force on e, off the UI
// goroutine (SetDelay waits for the step under way). One SetDelay is under
// way at a time; the slider's newest value follows when it ends. If e
// refuses the delay, the slider goes back to full speed and says why.
func (t *teacher) applyDelay(e *engine.Engine) {
	if t.delayBusy {
		t.delayAgain = true
		return
	}
	t.delayBusy = true
	d := t.delayValue()
	go func() {
		err := e.SetDelay(d)
		uithread.Do(func() {
			t.delayBusy = false
			if err != nil && !errors.Is(err, engine.ErrClosed) {
				t.delay.SetValue(0)
				t.delayLab.SetText(delayText(0))
				t.explain.SetText("Slow motion: " + err.Error())
			}
			if t.delayAgain {
				t.delayAgain = false
				if cur := t.a.Engine(); cur != nil && t.delayValue() != d {
					t.applyDelay(cur)
				}
			}
		})
	}()
}

// delayIn says which delay a new engine runs at (UI goroutine); if the
// slider moved since, its value goes to e.
func (t *teacher) delayIn(e *engine.Engine, d time.Duration) {
	if t.delayValue() != d {
		t.applyDelay(e)
	}
}

// setPaused pauses or resumes the scheduler, off the UI goroutine: the
// engine takes it after the step under way.
func (t *teacher) setPaused(p bool) {
	e := t.a.Engine()
	if e == nil {
		t.explain.SetText(errNoModel.Error())
		return
	}
	if t.busy != "" {
		return
	}
	cmd, doing := e.Resume, "Resuming…"
	if p {
		cmd, doing = e.Pause, "Pausing… (the step under way finishes first)"
	}
	t.busy = doing
	t.showStepButtons()
	t.explain.SetText(doing)
	go func() {
		err := cmd()
		uithread.Do(func() {
			t.busy = ""
			if err != nil {
				t.showStepButtons()
				t.explain.SetText(err.Error())
				return
			}
			if t.a.Engine() == e {
				t.paused = p
			}
			t.showStepButtons()
			if p {
				t.explain.SetText("Paused. Step runs one scheduler iteration: one batch of decode tokens and prompt chunks.")
			} else {
				t.explain.SetText("Running.")
			}
		})
	}()
}

// showStepButtons enables the step-mode buttons that apply now: none while
// a command is under way, or while a lesson steps the scheduler itself.
func (t *teacher) showStepButtons() {
	if t.busy != "" || t.lessons != nil && t.lessons.running() {
		t.pause.Disable()
		t.step.Disable()
		t.resume.Disable()
		return
	}
	if t.paused {
		t.pause.Disable()
		t.step.Enable()
		t.resume.Enable()
	} else {
		t.pause.Enable()
		t.step.Disable()
		t.resume.Disable()
	}
}

// doStep runs one step off the UI goroutine and explains it.
func (t *teacher) doStep() {
	e := t.a.Engine()
	if e == nil || t.busy != "" {
		return
	}
	t.busy = "Stepping…"
	t.showStepButtons()
	go func() {
		rep, err := e.Step()
		uithread.Do(func() {
			t.busy = ""
			t.showStepButtons()
			if err != nil {
				t.explain.SetText(err.Error())
				return
			}
			t.explain.SetText(fmt.Sprintf("Step %d: %s.", rep.Step, rep.Explain))
		})
	}()
}

// observe follows the engine (UI goroutine): in slow motion each step's
// explanation shows as it happens.
func (t *teacher) observe(s *engine.Snapshot) {
	if lesson := t.lessons.running(); (s.Paused != t.paused || lesson != t.lessonShown) && t.busy == "" {
		t.paused, t.lessonShown = s.Paused, lesson
		t.showStepButtons()
	}
	if t.delay.Value > 0 && !s.Paused && s.Last.Explain != "" {
		t.explain.SetText(fmt.Sprintf("Step %d: %s.", s.Last.Step, s.Last.Explain))
	}
	t.load.observe(s)
}

// stopAll ends everything teaching mode started: the lesson (which puts
// the settings back) and the load.
func (t *teacher) stopAll() {
	t.lessons.stop()
	t.load.stop()
}
