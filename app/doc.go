// Package app provides kvscope's Fyne window: the chat pane and the live
// KV-cache inspector.
package app
