// Package uithread runs kvscope's UI updates from background goroutines
// through fyne.Do, under one lock that tests can hold too.
//
// Fyne 2.6 and later require widget changes from other goroutines to go
// through fyne.Do, which the desktop driver runs on the UI goroutine. The
// headless test driver runs them at once on the calling goroutine instead,
// so a test reading a widget while a stream updates it would race; the lock
// makes the updates and the test's reads take turns. Event handlers (taps,
// typing) already run on the UI goroutine and must not call Do
// synchronously expecting it to run later: under the test driver it runs
// at once, and taking the lock twice would deadlock.
package uithread

import (
	"sync"

	"fyne.io/fyne/v2"
)

var mu sync.Mutex

// Do runs f on the Fyne UI goroutine without waiting, holding the lock.
func Do(f func()) {
	fyne.Do(func() {
		mu.Lock()
		defer mu.Unlock()
		f()
	})
}

// Locked runs f holding the lock, on the calling goroutine. Tests use it to
// read or drive widgets that background goroutines update through Do.
func Locked(f func()) {
	mu.Lock()
	defer mu.Unlock()
	f()
}
