// This file holds `make screenshot`'s scripted session and how it saves the
// window's pictures.

package app

import (
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/driver/software"

	"kvscope/app/inspector"
	"kvscope/app/lesson"
	"kvscope/app/store"
	"kvscope/app/uithread"
	echat "kvscope/engine/chat"
)

// ScreenshotEnv names the environment variable that makes Run play a short
// scripted session and save PNGs of the window (for `make screenshot`).
// Its value is the main picture's path; the lessons' pictures go beside it.
//
// The session, on the demo model unless a model is given:
//
//   - Two conversations generate through the model's chat template, the
//     first with a system prompt. The demo model's conversations are
//     plain completion in normal use (its words are random); the session
//     chooses the demo file's own template for them instead (a plain
//     "role: text" format, rendered by the Jinja engine like any other),
//     so that the picture shows a templated conversation with its
//     template named in the conversation's mode bar, and the note above
//     the messages says that this was chosen for the screenshot. A model
//     given with -m uses its own template, or plain completion, as usual.
//   - Before any model is open, the first-run screen is saved at 1024×700
//     as first-run.png beside the main picture.
//   - At 1280×800, with the first conversation shown and its block table
//     drawn on the Inspector tab, the main picture is saved.
//   - At 1024×700, the Controls tab scrolled to its capacity view is
//     saved as capacity.png.
//   - At 1024×700, each lesson of package lesson plays through the
//     Teaching tab's runner, is held at its pictured step (Lesson.Picture,
//     see lessonShotStep), and is saved as lesson-NAME.png beside the
//     main picture (see LessonShotName), then stopped.
const ScreenshotEnv = "KVSCOPE_SCREENSHOT"

// ScreenshotAfter is how many tokens each conversation generates before
// the main picture (they go on generating while it is taken).
const ScreenshotAfter = 300

// shotMaxTokens bounds the session's replies: more than they generate
// before the pictures, so that they are still generating in the main one.
const shotMaxTokens = 3500

// The sizes of the pictures: the main one, and the lessons' (the smallest
// window the layout is made for).
var (
	ScreenshotSize = fyne.NewSize(1280, 800)
	LessonShotSize = fyne.NewSize(1024, 700)
)

// The capacity view's picture is drawn for sequences of
// capacityShotLength tokens in a budget of capacityShotBudget bytes, where
// the precisions and block sizes differ on the demo model.
const (
	capacityShotLength = 1024
	capacityShotBudget = int64(8 << 20)
)

// lessonShotTimeout bounds the wait for a lesson to reach its picture.
const lessonShotTimeout = 3 * time.Minute

// LessonShotName is the file name of a lesson's picture: "lesson-" and its
// name in lower case, letters and digits kept, every other run of
// characters one dash ("lesson-parallel-sampling-n-4.png").
func LessonShotName(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return "lesson-" + b.String() + ".png"
}

// lessonShotStep is how many of l's steps have run when its picture is
// taken: l.Picture, or the middle step. Every step is held at the state it
// explains, the last one too.
func lessonShotStep(l *lesson.Lesson) int {
	if l.Picture >= 1 && l.Picture <= len(l.Steps) {
		return l.Picture
	}
	return max(1, (len(l.Steps)+1)/2)
}

// screenshot plays the scripted session and quits (own goroutine).
func (a *App) screenshot(modelPath, out string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "kvscope: screenshot:", err)
		os.Exit(1)
	}
	dir := filepath.Dir(out)
	// The first-run screen, before any model is open.
	if err := a.saveShot(filepath.Join(dir, "first-run.png"), LessonShotSize); err != nil {
		fail(err)
	}
	if err := a.OpenModel(modelPath); err != nil {
		fail(err)
	}
	first, err := a.shotConversations()
	if err != nil {
		fail(err)
	}
	if err := a.shotGenerated(ScreenshotAfter); err != nil {
		fail(err)
	}
	onUI(func() {
		a.chat.Select(first)
		a.insp.SetMode(inspector.ByOwner)
		a.tabs.Select(a.tabInspector)
		a.selectConversation()
	})
	if err := a.saveShot(out, ScreenshotSize); err != nil {
		fail(err)
	}
	// The Controls tab scrolled to the capacity view, for sequences of
	// capacityShotLength tokens with the budget set to capacityShotBudget
	// (the slider applies it; the automatic budget would give every
	// precision the same blocks, so every cell would read alike). The
	// server card above it is left out of the picture: Fyne's software
	// painter draws the text of entries scrolled out of sight over the
	// tabs.
	onUI(func() {
		a.win.Resize(LessonShotSize)
		a.tabs.Select(a.tabControls)
		a.controls.serve.root.Hide()
		a.controls.capacity.length.SetValue(capacityShotLength)
		a.controls.budget.SetValue(float64(nearest(Budgets, capacityShotBudget)))
	})
	time.Sleep(300 * time.Millisecond) // laid out at the new size
	onUI(func() {
		if sc, ok := a.controls.root.(*container.Scroll); ok {
			sc.ScrollToBottom()
		}
	})
	if err := a.saveShot(filepath.Join(dir, "capacity.png"), LessonShotSize); err != nil {
		fail(err)
	}
	onUI(func() {
		a.controls.serve.root.Show()
		if e := a.Engine(); e != nil {
			a.controls.show(e.Config(), e.Snapshot()) // the sliders on the settings in force
		}
	})
	for _, l := range lesson.All {
		path := filepath.Join(dir, LessonShotName(l.Name))
		if err := a.shotLesson(l, path); err != nil {
			fail(fmt.Errorf("lesson %q: %w", l.Name, err))
		}
	}
	fyne.Do(func() {
		a.Close()
		a.fa.Quit()
	})
}

// shotGenerated waits until every request has generated n tokens.
func (a *App) shotGenerated(n int) error {
	e := a.Engine()
	deadline := time.Now().Add(lessonShotTimeout)
	for time.Now().Before(deadline) {
		s := e.Snapshot()
		done := len(s.Requests) > 0
		for _, r := range s.Requests {
			for _, q := range r.Samples {
				done = done && q.Generated >= n
			}
		}
		if done {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the conversations did not generate %d tokens each in %v", n, lessonShotTimeout)
}

// shotConversations starts the session's two conversations, through the
// demo file's own chat template on the demo model, and returns the first's
// id.
func (a *App) shotConversations() (first int64, err error) {
	errc := make(chan error, 1)
	uithread.Do(func() {
		a.mu.Lock()
		e, l := a.eng, a.mdl
		a.mu.Unlock()
		if l.demo() {
			f, err := echat.FromGGUF(l.m.File, l.tok)
			if err != nil {
				errc <- fmt.Errorf("the demo model's chat template: %w", err)
				return
			}
			if f.Mode() != echat.ModeChat {
				errc <- errors.New("the demo model's file has no chat template")
				return
			}
			a.chat.SetModel(e, f, "", "Demo model: random weights, so the text is gibberish; the engine and the KV cache do real work. "+
				"For this screenshot, conversations use the demo file's own chat template, which the demo leaves unused otherwise.")
		}
		for i, m := range []string{"Once upon a time, in a quiet little town", "The dragon looked at the sea and said"} {
			id := a.chat.NewConversation()
			if i == 0 {
				first = id
			}
			a.chat.Update(id, func(c *store.Conversation) {
				c.Sampling.MaxTokens = shotMaxTokens
				if i == 0 {
					c.System = "You are a storyteller for young children."
				}
			})
			if err := a.chat.SendText(id, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	})
	err = <-errc // first is set once it arrives
	return first, err
}

// shotLesson plays l through the Teaching tab's lesson runner at
// LessonShotSize, saves the window at path once lessonShotStep of its
// steps have run (pressing Next until then), and stops it.
func (a *App) shotLesson(l *lesson.Lesson, path string) error {
	v := a.teach.lessons
	want := lessonShotStep(l)
	onUI(func() {
		a.win.Resize(LessonShotSize)
		v.pace.SetSelected(Paces[0].Name) // held until Next
		v.start(l)
	})
	deadline := time.Now().Add(lessonShotTimeout)
	for {
		var ready bool
		var problem error
		onUI(func() {
			r := v.run
			switch {
			case r == nil || r.l != l:
				problem = errors.New("the lesson did not start")
			case r.ended:
				problem = fmt.Errorf("it ended before step %d of %d: %s", want, len(l.Steps), v.title.Text)
			case v.next.Disabled():
			case len(r.lines) >= want:
				ready = true
			default:
				v.next.OnTapped()
			}
		})
		if problem != nil {
			return problem
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("it did not reach step %d of %d in %v", want, len(l.Steps), lessonShotTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(700 * time.Millisecond) // the heatmap and bar draw the held step
	if err := a.saveShot(path, LessonShotSize); err != nil {
		return err
	}
	var done chan struct{}
	onUI(func() {
		done = v.run.done
		v.stop()
	})
	select {
	case <-done:
	case <-time.After(lessonShotTimeout):
		return errors.New("it did not stop")
	}
	onUI(v.hide)
	return nil
}

// saveShot saves the window, drawn at size, as a PNG at path.
func (a *App) saveShot(path string, size fyne.Size) error {
	onUI(func() { a.win.Resize(size) })
	time.Sleep(500 * time.Millisecond)
	var img image.Image
	onUI(func() { img = capture(a.win, size) })
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = png.Encode(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Println("kvscope: screenshot saved to", path)
	return nil
}

// onUI runs f on the UI goroutine (through uithread.Do) and waits for it.
// The script's goroutine is never the UI's, so this cannot deadlock.
func onUI(f func()) {
	done := make(chan struct{})
	uithread.Do(func() {
		defer close(done)
		f()
	})
	<-done
}

// capture draws the window's content with Fyne's software painter at size.
// Reading the OpenGL front buffer back (Canvas.Capture) gives a blank image
// under Xvfb, so the picture is painted again from the same widgets, which
// are then laid out at the window's size again.
func capture(w fyne.Window, size fyne.Size) image.Image {
	content := w.Content()
	c := software.NewCanvas()
	c.SetPadded(false)
	c.SetContent(content)
	c.Resize(size)
	// Twice: a word-wrapped label's height follows its width, which the
	// first layout sets.
	content.Resize(size.SubtractWidthHeight(1, 1))
	content.Resize(size)
	img := c.Capture()
	content.Resize(w.Canvas().Size())
	return img
}
