package app

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/uithread"
	"kvscope/engine/backend/native"
	"kvscope/internal/testshared"
)

// TestLoadStrip loads models from the Model menu's path (openAsync) with
// the load strip watched: its bar follows the weights moved onto the
// backend and it goes once the model is in use; then a load cancelled
// with the strip's button after its first matrix leaves the model in use
// as it was, says so, unmaps the cancelled file and (native backend) frees
// the packed copies it made.
func TestLoadStrip(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	first := testshared.Path(t, "models/parity/parity-Q8_0.gguf")
	second := testshared.Path(t, "models/parity/parity-Q4_0.gguf")

	// A whole load: the bar shows each report.
	var mu sync.Mutex
	var bars []float64
	uithread.Locked(func() {
		a.load.hook = func(done, total int64) {
			f := float64(done) / float64(total)
			// The strip moves its bar on the UI goroutine: wait for it
			// (on the loading goroutine, where t.Fatal must not run).
			shown := 0.0
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if uithread.Locked(func() { shown = a.load.bar.Value }); shown >= f-0.005 {
					break
				}
			}
			mu.Lock()
			bars = append(bars, shown)
			mu.Unlock()
		}
		a.openAsync(first)
		if !a.load.root.Visible() || !a.load.loading() {
			t.Error("the load strip is not shown while the model loads")
		}
	})
	uithread.WaitFor(t, "the first model to load", func() bool { return a.opening == "" })
	uithread.Locked(func() {
		if a.mdl == nil || a.mdl.path != first {
			t.Fatalf("after the load the model in use is %v, want %s (status %q)", a.mdl, first, a.status.Text)
		}
		if a.load.root.Visible() {
			t.Error("the load strip stays after the load")
		}
	})
	mu.Lock()
	if len(bars) < 2 || bars[len(bars)-1] != 1 {
		t.Errorf("the bar showed %v, want values rising to 1", bars)
	}
	for i := 1; i < len(bars); i++ {
		if bars[i] < bars[i-1] {
			t.Errorf("the bar went back from %v to %v", bars[i-1], bars[i])
		}
	}
	mu.Unlock()

	// A cancelled load: the Cancel button pressed at its first report.
	engine := a.Engine()
	runtime.GC()
	mapped := native.MappedBytes()
	calls := 0
	uithread.Locked(func() {
		a.load.hook = func(done, total int64) {
			if calls++; calls > 1 {
				return
			}
			tapped := make(chan struct{})
			uithread.Do(func() { test.Tap(a.load.stop); close(tapped) })
			<-tapped
		}
		a.openAsync(second)
	})
	uithread.WaitFor(t, "the cancelled load to end", func() bool { return a.opening == "" })
	if calls != 1 {
		t.Errorf("%d matrices loaded, want the cancel to stop the load after its first", calls)
	}
	uithread.Locked(func() {
		if a.mdl == nil || a.mdl.path != first || a.Engine() != engine {
			t.Errorf("after the cancel the model in use is %v, want %s and its engine as they were", a.mdl, first)
		}
		if s := a.status.Text; !strings.Contains(s, "cancelled") || !strings.Contains(s, a.mdl.name+" is still open") {
			t.Errorf("status %q does not say the load was cancelled and which model is still open", s)
		}
		if a.load.root.Visible() || a.load.loading() {
			t.Error("the load strip stays after the cancel")
		}
	})
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil && strings.Contains(string(maps), second) {
		t.Errorf("%s is still mapped after its load was cancelled", second)
	}
	for i := 0; native.MappedBytes() > mapped && i < 200; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if got := native.MappedBytes(); got > mapped {
		t.Errorf("the cancelled load left %d bytes of packed weights mapped (%d before it)", got-mapped, mapped)
	}
}
