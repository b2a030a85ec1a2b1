// Package app provides kvscope's Fyne window: the chat pane (package
// app/chat), the live KV-cache inspector (package app/inspector), the cache
// controls that reconfigure the engine while it runs, teaching mode (step
// mode, slow motion, a load generator and one-click lessons), model
// handling (open, recent, the built-in demo model, a first-run screen) and
// the scripted session behind `make screenshot` (see ScreenshotEnv).
//
// The window never reads the engine's live state: a background loop polls
// the engine's immutable snapshot and bounded event log every LiveEvery and
// hands them to the widgets through fyne.Do (package app/uithread).
//
// Nor does the window ever wait for the engine, whose steps can take
// seconds (a long prompt's prefill chunks). It reads only what returns at
// once (Snapshot, Config, Submit); every command that waits for the
// engine's goroutine (Reconfigure, Pause, Resume, Step, SetDelay, loading
// and closing a model) runs on a goroutine of its own and reports back
// through fyne.Do. While one is under way its control says so, and another
// click does not pile up more: the step-mode and restore buttons are
// disabled, the slow-motion slider sends its newest value and the cache
// controls all changes made meanwhile, as one, when the one under way
// ends, and a model opened while one loads is refused.
//
// One window holds a data folder (store.Acquire) for its life; a second
// kvscope on the same folder says so and exits with status 1.
package app
