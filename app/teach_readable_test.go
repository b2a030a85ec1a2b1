package app

import (
	"fmt"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/lesson"
	"kvscope/app/uithread"
	echat "kvscope/engine/chat"
)

// At 1024×700, with a lesson held at its first Next on the demo model and
// a conversation shown through the demo file's chat template (as `make
// screenshot` plays it), nothing in the window is cut off: no label ends
// in an ellipsis or is drawn smaller than it needs (the lesson's title and
// the chat pane's mode bar wrap), and the lesson's bar leaves the heatmap
// a usable height.
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
		a.teach.lessons.start(lesson.SharedPrompt)
	})
	uithread.WaitFor(t, "the lesson's first hold", func() bool {
		v := a.teach.lessons
		if v.run == nil || v.run.ended {
			t.Fatalf("the lesson ended before its first hold: %q", v.title.Text)
		}
		return !v.next.Disabled() && len(v.run.lines) > 0
	})
	uithread.Locked(func() {
		// Lay the window out again, as the driver does when a label's
		// lines change.
		w.Resize(fyne.NewSize(900, 600))
		w.Resize(size)
		v := a.teach.lessons
		if !strings.Contains(v.title.Text, "step 1 of") {
			t.Errorf("the lesson's title %q does not say its step", v.title.Text)
		}
		named := visit(a.chat, func(o fyne.CanvasObject) bool {
			l, ok := o.(*widget.Label)
			return ok && strings.HasPrefix(l.Text, "Template: from the file")
		})
		if !named {
			t.Error("the chat pane's mode bar does not name the template")
		}
		// The labels: containers above them may be short of their
		// minimum height (the inspector's parts have fixed minimums that
		// add up to more than 700 px with the bar); what is read must not.
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
			t.Error(c)
		}
		for _, c := range cutOff(a.insp) { // it scrolls under the bar: look in
			i := strings.LastIndex(c, " > ")
			if last := c[i+3:]; strings.HasPrefix(last, "label ") || strings.HasPrefix(last, "text ") {
				t.Error("inspector" + c)
			}
		}
		// The heatmap is drawn whole in sight, under the bar.
		d := fyne.CurrentApp().Driver()
		top, host := d.AbsolutePositionForObject(a.insp.Heatmap).Y, d.AbsolutePositionForObject(v.host).Y+v.host.Size().Height
		if top+lessonHeatmap > host+0.5 {
			t.Errorf("the heatmap's top is at %.0f px, and the Inspector tab ends at %.0f: it is not in sight", top, host)
		}
		h := a.insp.Heatmap.Size().Height
		t.Logf("the lesson's bar is %.0f px tall (title %v, buttons %v), the heatmap %.0f px", v.bar.Size().Height, v.title.Size(), v.stopBtn.Size(), h)
		if h < lessonHeatmap {
			t.Errorf("with the lesson's bar shown the heatmap is %.0f px tall at 1024×700, want at least %d", h, lessonHeatmap)
		}
		v.stop()
	})
	uithread.WaitFor(t, "the lesson to stop", func() bool { return a.teach.lessons.run.ended })
}
