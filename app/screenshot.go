package app

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"time"

	"fyne.io/fyne/v2"

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
const ScreenshotAfter = 8 * time.Second

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
			a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 400 })
			if err := a.chat.SendText(id, m); err != nil {
				errc <- err
				return
			}
		}
		a.teach.runPreset(Presets[1]) // shared system prompt
		errc <- nil
	})
	if err := <-errc; err != nil {
		fail(err)
	}
	time.Sleep(ScreenshotAfter)
	uithread.Do(func() {
		a.insp.SetMode(inspector.ByOwner)
		a.tabs.SelectIndex(0)
	})
	time.Sleep(500 * time.Millisecond)
	done := make(chan error, 1)
	fyne.Do(func() {
		img := a.win.Canvas().Capture()
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
