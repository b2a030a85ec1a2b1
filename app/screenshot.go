package app

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/software"

	"kvscope/app/inspector"
	"kvscope/app/store"
	"kvscope/app/uithread"
)

// ScreenshotEnv names the environment variable that makes Run play a short
// scripted session and save a PNG of the window at the path it holds (for
// `make screenshot`): the model (the demo model unless one is given), two
// conversations generating, then the "Shared system prompt" preset.
const ScreenshotEnv = "KVSCOPE_SCREENSHOT"

// ScreenshotAfter is how long the scripted session runs before the picture.
const ScreenshotAfter = 4 * time.Second

// screenshot plays the scripted session and quits (own goroutine).
func (a *App) screenshot(modelPath, out string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "kvscope: screenshot:", err)
		os.Exit(1)
	}
	if err := a.OpenModel(modelPath); err != nil {
		fail(err)
	}
	errc := make(chan error, 1)
	uithread.Do(func() {
		for _, m := range []string{"Once upon a time, in a quiet little town", "The dragon looked at the sea and said"} {
			id := a.chat.NewConversation()
			a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 1000 })
			if err := a.chat.SendText(id, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	})
	if err := <-errc; err != nil {
		fail(err)
	}
	time.Sleep(ScreenshotAfter)
	uithread.Do(func() {
		a.insp.SetMode(inspector.ByOwner)
		a.tabs.Select(a.tabInspector)
	})
	time.Sleep(500 * time.Millisecond)
	done := make(chan error, 1)
	fyne.Do(func() {
		img := capture(a.win)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			done <- err
			return
		}
		f, err := os.Create(out)
		if err != nil {
			done <- err
			return
		}
		err = png.Encode(f, img)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	})
	if err := <-done; err != nil {
		fail(err)
	}
	fmt.Println("kvscope: screenshot saved to", out)
	fyne.Do(func() {
		a.Close()
		a.fa.Quit()
	})
}

// capture draws the window's content with Fyne's software painter, at the
// window's size. Reading the OpenGL front buffer back (Canvas.Capture)
// gives a blank image under Xvfb, so the picture is painted again from the
// same widgets; the window is closed right after.
func capture(w fyne.Window) image.Image {
	size := w.Canvas().Size()
	content := w.Content()
	c := software.NewCanvas()
	c.SetPadded(false)
	c.SetContent(content)
	c.Resize(size)
	content.Resize(size)
	return c.Capture()
}
