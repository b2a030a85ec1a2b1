// This file holds the Teaching tab's synthetic-users card: starting and
// stopping a load and how it is going.

package app

import (
	"context"
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/lesson"
	"kvscope/engine"
)

// loadView is the Teaching tab's load generator card: sliders for users,
// prompt and reply tokens, Start/Stop, and how the load goes. Its sliders
// always show the load that runs: the user's, or a lesson's while a lesson
// runs one.
type loadView struct {
	a *App

	users, plen, rlen *widget.Slider
	usersLab          *widget.Label
	btn               *widget.Button
	lab               *widget.Label
	card              fyne.CanvasObject

	g      *lesson.LoadGen // the load shown (nil when none runs)
	lesson bool            // g is a lesson's: its own Stop ends it with the lesson
}

func newLoadView(a *App) *loadView {
	v := &loadView{a: a}
	v.users = widget.NewSlider(1, 16)
	v.users.SetValue(4)
	v.usersLab = widget.NewLabel("")
	v.plen = widget.NewSlider(8, 512)
	v.plen.Step = 8
	v.plen.SetValue(64)
	v.rlen = widget.NewSlider(8, 512)
	v.rlen.Step = 8
	v.rlen.SetValue(128)
	v.lab = widget.NewLabel("")
	v.lab.Wrapping = fyne.TextWrapWord
	show := func(float64) { v.usersLab.SetText(v.chosen().String()) }
	v.users.OnChanged, v.plen.OnChanged, v.rlen.OnChanged = show, show, show
	show(0)
	v.btn = widget.NewButtonWithIcon("Start load", theme.MediaPlayIcon(), func() {
		if v.g != nil {
			v.stop()
			v.lab.SetText("Load stopped.")
			return
		}
		if err := v.start(v.chosen()); err != nil {
			v.lab.SetText(err.Error())
		}
	})
	about := widget.NewLabel("Synthetic users send real requests through the engine, one after another.")
	about.Wrapping = fyne.TextWrapWord // a card's subtitle would not wrap
	v.card = widget.NewCard("Load generator", "", container.NewVBox(about,
		container.NewBorder(nil, nil, widget.NewLabel("Users"), nil, v.users),
		container.NewBorder(nil, nil, widget.NewLabel("Prompt tokens"), nil, v.plen),
		container.NewBorder(nil, nil, widget.NewLabel("Reply tokens"), nil, v.rlen),
		v.usersLab, container.NewHBox(v.btn), v.lab))
	return v
}

// chosen is the load the sliders set.
func (v *loadView) chosen() lesson.Load {
	return lesson.Load{Users: int(v.users.Value), Prompt: int(v.plen.Value), Reply: int(v.rlen.Value)}
}

// start starts the user's load, stopping the one shown first: one load at
// a time. A lesson under way is stopped too: its figures would not hold.
func (v *loadView) start(l lesson.Load) error {
	e := v.a.Engine()
	if e == nil {
		return errNoModel
	}
	v.a.teach.lessons.stop()
	v.stop()
	g, err := lesson.StartLoad(context.Background(), e, l)
	if err != nil {
		return err
	}
	v.show(g, false)
	v.lab.SetText(fmt.Sprintf("%d %s started.", l.Users, plural(l.Users, "user", "users")))
	return nil
}

// show makes g the load the card shows, with its sliders set to it.
func (v *loadView) show(g *lesson.LoadGen, byLesson bool) {
	v.g, v.lesson = g, byLesson
	l := g.Load()
	v.users.SetValue(float64(l.Users))
	v.plen.SetValue(float64(l.Prompt))
	v.rlen.SetValue(float64(l.Reply))
	v.usersLab.SetText(l.String())
	if byLesson {
		v.usersLab.SetText(l.String() + " (the lesson's load)")
	}
	v.btn.SetText("Stop load")
	v.btn.SetIcon(theme.MediaStopIcon())
}

// stop stops the load shown (its requests are cancelled).
func (v *loadView) stop() {
	if v.g == nil {
		return
	}
	v.g.Stop()
	v.g = nil
	v.lesson = false
	v.btn.SetText("Start load")
	v.btn.SetIcon(theme.MediaPlayIcon())
}

// observe shows how the load goes (UI goroutine); a lesson's load that has
// ended is let go.
func (v *loadView) observe(s *engine.Snapshot) {
	if v.g == nil {
		return
	}
	v.lab.SetText(v.g.Status(s))
	select {
	case <-v.g.Done():
		if v.lesson {
			v.g, v.lesson = nil, false
			v.btn.SetText("Start load")
			v.btn.SetIcon(theme.MediaPlayIcon())
		}
	default:
	}
}
