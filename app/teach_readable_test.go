package app

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/lesson"
	"kvscope/app/uithread"
	echat "kvscope/engine/chat"
)

// At 1024×700, on the demo model with a conversation shown through the
// demo file's chat template (as `make screenshot` plays it), every step of
// every lesson is readable where it is held: the step's explanation, its
// promise and the check's result (held or not, with the measured value)
// are shown whole in the bar, with no label cut off or ending in an
// ellipsis and nothing to scroll; the heatmap stays in sight under the bar
// at a usable height; and the heatmap draws the very snapshot the step's
// figure was checked on.
func TestLessonReadableAt1024x700(t *testing.T) {
	a, w := newApp(t, t.TempDir())
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	size := fyne.NewSize(1024, 700)
	uithread.Locked(func() {
		w.Resize(size)
		a.mu.Lock()
		e, l := a.eng, a.mdl
		a.mu.Unlock()
		f, err := echat.FromGGUF(l.m.File, l.tok)
		if err != nil || f.Mode() != echat.ModeChat {
			t.Fatalf("the demo model's chat template: %v (mode %v)", err, f.Mode())
		}
		a.chat.SetModel(e, f, "", "Demo model: random weights. This test uses the demo file's own chat template.")
		a.chat.NewConversation()
		a.teach.lessons.pace.SetSelected(Paces[0].Name)
	})
	for _, l := range lesson.All {
		uithread.Locked(func() { a.teach.lessons.start(l) })
		for i, st := range l.Steps {
			where := fmt.Sprintf("%s, step %d", l.Name, i+1)
			uithread.WaitFor(t, where+"'s hold", func() bool {
				v := a.teach.lessons
				if v.run == nil || v.run.ended {
					t.Fatalf("%s: the lesson ended before this step's hold: %q", where, v.title.Text)
				}
				return !v.next.Disabled() && len(v.run.lines) == i+1
			})
			uithread.WaitFor(t, where+": the heatmap drawing the held snapshot", func() bool {
				s, held := a.insp.Snapshot(), a.teach.lessons.run.held
				return s != nil && held != nil && s.Step == held.Cache.Step
			})
			uithread.Locked(func() {
				v := a.teach.lessons
				if s := a.insp.Snapshot(); !reflect.DeepEqual(s.Blocks, v.run.held.Cache.Blocks) || !reflect.DeepEqual(s.Seqs, v.run.held.Cache.Seqs) {
					t.Errorf("%s: the heatmap draws other blocks than the snapshot the figure was checked on", where)
				}
				lessonReadable(t, a, w, where, st, v.run.res, i)
				v.next.OnTapped()
			})
		}
		uithread.WaitFor(t, l.Name+" to end", func() bool { return a.teach.lessons.run.ended })
		uithread.Locked(func() {
			v := a.teach.lessons
			if n := strings.Count(strings.Join(v.run.lines, "\n"), ": ✓ "); n != len(l.Steps) {
				t.Errorf("%s: %d of %d figures held: %v", l.Name, n, len(l.Steps), v.run.lines)
			}
			v.hide()
		})
	}
}

// lessonReadable checks the lesson's bar and the window at a step's hold
// (UI goroutine).
func lessonReadable(t *testing.T, a *App, w fyne.Window, where string, st lesson.Step, _ lesson.Result, i int) {
	t.Helper()
	size := w.Canvas().Size()
	// Lay the window out again, as the driver does when a label's lines
	// change.
	w.Resize(fyne.NewSize(900, 600))
	w.Resize(size)
	v := a.teach.lessons
	if !strings.Contains(v.title.Text, fmt.Sprintf("step %d of", i+1)) {
		t.Errorf("%s: the lesson's title %q does not say its step", where, v.title.Text)
	}
	if v.explain.Text != st.Explain {
		t.Errorf("%s: the bar explains %q, not the step's %q", where, v.explain.Text, st.Explain)
	}
	if v.promise.Text != "Promised: "+st.Promise {
		t.Errorf("%s: the bar promises %q, not the step's %q", where, v.promise.Text, st.Promise)
	}
	line := v.run.lines[i]
	got := line[strings.Index(line, ": ")+2:]
	if !strings.HasPrefix(v.result.Text, "✓ Held: ") || !strings.HasSuffix(got, strings.TrimPrefix(v.result.Text, "✓ Held: ")) {
		t.Errorf("%s: the bar's result %q is not the check's %q", where, v.result.Text, got)
	}
	named := visit(a.chat, func(o fyne.CanvasObject) bool {
		l, ok := o.(*widget.Label)
		return ok && strings.HasPrefix(l.Text, "Template: from the file")
	})
	if !named {
		t.Errorf("%s: the chat pane's mode bar does not name the template", where)
	}
	// Nothing in the bar scrolls, and the bar is drawn whole in the
	// window.
	visit(v.bar, func(o fyne.CanvasObject) bool {
		if _, ok := o.(*container.Scroll); ok {
			t.Errorf("%s: the lesson's bar scrolls", where)
			return true
		}
		return false
	})
	d := fyne.CurrentApp().Driver()
	if bottom := d.AbsolutePositionForObject(v.bar).Y + v.bar.Size().Height; v.bar.Size().Height < v.bar.MinSize().Height-0.5 || bottom > size.Height+0.5 {
		t.Errorf("%s: the bar is %.0f px tall of the %.0f it needs, its bottom at %.0f px", where, v.bar.Size().Height, v.bar.MinSize().Height, bottom)
	}
	// The labels: containers above them may be short of their minimum
	// height (the inspector's parts have fixed minimums that add up to
	// more than 700 px with the bar); what is read must not.
	status := fmt.Sprintf("label %q", a.status.Text)
	for _, c := range cutOff(w.Content()) {
		i := strings.LastIndex(c, " > ")
		last := c[i+3:]
		if !strings.HasPrefix(last, "label ") && !strings.HasPrefix(last, "text ") {
			continue
		}
		if strings.Contains(c, status) {
			continue // the window's status line is one line by design; the Model tab has it all
		}
		t.Error(where + ": " + c)
	}
	for _, c := range cutOff(a.insp) { // it scrolls under the bar: look in
		i := strings.LastIndex(c, " > ")
		if last := c[i+3:]; strings.HasPrefix(last, "label ") || strings.HasPrefix(last, "text ") {
			t.Error(where + ": inspector" + c)
		}
	}
	// The heatmap is drawn whole in sight, under the bar.
	top, host := d.AbsolutePositionForObject(a.insp.Heatmap).Y, d.AbsolutePositionForObject(v.host).Y+v.host.Size().Height
	if top+lessonHeatmap > host+0.5 {
		t.Errorf("%s: the heatmap's top is at %.0f px, and the Inspector tab ends at %.0f: it is not in sight", where, top, host)
	}
	if h := a.insp.Heatmap.Size().Height; h < lessonHeatmap {
		t.Errorf("%s: with the lesson's bar shown the heatmap is %.0f px tall at 1024×700, want at least %d", where, h, lessonHeatmap)
	}
	t.Logf("%s: the bar is %.0f×%.0f px, the heatmap's top at %.0f px of %.0f; chat min %v", where, v.bar.Size().Width, v.bar.Size().Height, top, host, a.chat.MinSize())
}
