package app

import (
	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"
)

// ID is the application identifier, as in FyneApp.toml.
const ID = "dev.kvscope.app"

// Run opens the main window, on the model at modelPath when it is not
// empty, and blocks until the window is closed.
func Run(modelPath string) {
	a := fyneapp.NewWithID(ID)
	w := a.NewWindow("kvscope")
	w.SetContent(Placeholder(modelPath))
	w.Resize(fyne.NewSize(1280, 800))
	w.ShowAndRun()
}

// Placeholder is the window's content until the chat pane and inspector
// arrive: it says what kvscope is and how to use it from the command line.
func Placeholder(modelPath string) fyne.CanvasObject {
	title := widget.NewLabelWithStyle("kvscope", fyne.TextAlignCenter, fyne.TextStyle{Bold: true})
	body := widget.NewLabel("Chat with local GGUF models and watch the KV cache work.\n\n" +
		"The chat pane and cache inspector are not built yet. From a terminal:\n" +
		"  kvscope run -m MODEL.gguf -p \"Once upon a time\"\n" +
		"  kvscope info -m MODEL.gguf")
	body.Wrapping = fyne.TextWrapWord
	box := container.NewVBox(title, body)
	if modelPath != "" {
		box.Add(widget.NewLabel("Model: " + modelPath))
	}
	return box
}
