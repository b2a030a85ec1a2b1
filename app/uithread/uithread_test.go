package uithread

import (
	"sync"
	"testing"

	"fyne.io/fyne/v2/test"
)

func TestDoAndLockedTakeTurns(t *testing.T) {
	test.NewTempApp(t)
	counter := 0 // written by many goroutines through Do, read under Locked
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				Do(func() { counter++ })
			}
		}()
	}
	wg.Wait()
	got := 0
	Locked(func() { got = counter })
	if got != 800 {
		t.Errorf("counter %d, want 800", got)
	}
}
