// Package app provides kvscope's Fyne window: the chat pane (package
// app/chat), the live KV-cache inspector (package app/inspector), the cache
// controls that reconfigure the engine while it runs, with a capacity view
// (capacity.go), teaching mode (step mode and slow motion in teach.go, the
// lessons in lessonview.go, the load generator in loadview.go), model
// handling (open, recent, the built-in demo model, a first-run screen),
// the Models tab and the scripted session behind `make screenshot` (see
// ScreenshotEnv).
//
// The lessons are data, played by one runner (package app/lesson, which
// has no window and is tested on its own). Starting one stops the user's
// replies under way (their text stays) and load, clears the heatmap's
// selection and sets the heatmap colouring the lesson is watched in; its
// bar, above the heatmap on the Inspector tab, shows each step's
// explanation and each promised figure as the runner checked it, with
// Next, the pace and Stop. While it runs the Controls refuse changes; when
// it ends or is stopped the runner puts the user's settings back, and the
// bar the colouring. Lessons send their own requests, so they never become
// conversations.
//
// The capacity view answers the seed's trade-off: for the loaded model and
// the budget, how many sequences of a chosen length fit at once at each
// K/V precision and block size (engine.Capacity), with the settings in
// force and the sequences running on them marked; it follows the
// block-size and budget sliders while they move. The Controls also refuse,
// saying why, settings under which no chat could run.
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
// The Controls tab also has a toggle for package server's
// OpenAI-compatible API over the engine the app runs (serve.go), on the
// address typed (server.CheckAddr's rule: loopback, or an API key); it
// shows the address it took and the requests served, moves to the new
// engine when the model or backend changes, and stops (its requests
// cancelled, then its port closed) when the window closes. Outside
// clients' requests show in the heatmap and event log as "API: <first
// words>", the label the server gives them.
//
// One window holds a data folder (store.Acquire) for its life; a second
// kvscope on the same folder says so and exits with status 1.
package app
