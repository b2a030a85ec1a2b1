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
	"time"

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

// TB is the part of testing.TB that WaitFor uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// WaitFor polls cond under the UI lock every 10 ms until it holds, failing
// the test after 20 s with a message naming what it waited for. It is for
// tests that watch the UI react to work on other goroutines.
func WaitFor(t TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := false
		Locked(func() { ok = cond() })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
