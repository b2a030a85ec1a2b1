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
package app
