// Package app provides kvscope's Fyne window: the chat pane (package
// app/chat), the live KV-cache inspector (package app/inspector), the cache
// controls that reconfigure the engine while it runs, teaching mode (step
// mode, slow motion, a load generator and one-click lessons), model
// handling (open, recent, the built-in demo model, a first-run screen),
// the Models tab and the scripted session behind `make screenshot` (see
// ScreenshotEnv).
//
// The Models tab, and the first-run screen with the same lists, shows the
// GGUF files found on the machine (package hub's Scan: architecture, size,
// quantization, and why kvscope cannot run a file) with one-click Open, and
// hub's catalog of small chat models with resumable downloads: a progress
// bar with speed and time left, Pause (the part stays), Resume, Discard and
// a one-line error. A download cut short by closing kvscope shows as paused
// at the next start. Downloads come from HF_ENDPOINT with HF_TOKEN, as
// package hub reads them, into the folder ModelsDirEnv names (default
// hub.ModelsDir). Scans and downloads run on goroutines that never wait
// for the UI, so closing the window pauses them and waits for them.
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
