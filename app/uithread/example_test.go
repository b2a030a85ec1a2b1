package uithread_test

import (
	"fmt"

	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/uithread"
)

// A goroutine updates a label through Do; a reader takes the lock to look.
func ExampleDo() {
	a := test.NewApp()
	defer a.Quit()
	label := widget.NewLabel("")
	done := make(chan bool)
	go func() {
		uithread.Do(func() { label.SetText("42 tokens") })
		done <- true
	}()
	<-done
	uithread.Locked(func() { fmt.Println(label.Text) })
	// Output:
	// 42 tokens
}
