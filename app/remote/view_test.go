package remote

import (
	"kvscope/vllm/vllmtest"
	"net/http"
	"runtime"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/uithread"
	"kvscope/vllm/kvsub"
)

// Close ends every goroutine the view started: the sources' subscribers
// and metrics polls, the refresh loop and a remote kvscope's feed. A view
// that watches nothing starts none.
func TestViewCloseStopsGoroutines(t *testing.T) {
	test.NewTempApp(t)
	pub := vllmtest.NewPublisher(t)
	met := countingMetrics(t)
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	w := test.NewWindow(nil)
	defer w.Close()
	v := New(w)
	time.Sleep(50 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("an idle view runs %d goroutines", n-before)
	}
	uithread.Locked(func() {
		w.SetContent(v)
		if err := v.vllm.AddSource(kvsub.Source{Endpoint: pub.PubEndpoint, Replay: pub.ReplayEndpoint}, met); err != nil {
			t.Fatal(err)
		}
		if err := v.vllm.AddSource(kvsub.Source{Endpoint: pub.PubEndpoint}, ""); err == nil {
			t.Error("the same endpoint was taken twice")
		}
		if err := v.srv.Connect("http://127.0.0.1:1", ""); err != nil {
			t.Fatal(err)
		}
	})
	pub.Publish(stored([]uint64{1}, nil, 4))
	uithread.WaitFor(t, "the block", func() bool { return v.vllm.tree.Tree().Blocks == 1 })
	v.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		http.DefaultClient.CloseIdleConnections() // the metrics polls' keep-alive connections
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left after Close:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
}

// The Remote tab needs no more room than an inspector does: its pages
// scroll in a small window and fill a large one.
func TestViewNeedsLittleRoom(t *testing.T) {
	test.NewTempApp(t)
	w := test.NewWindow(nil)
	defer w.Close()
	v := New(w)
	w.SetContent(v)
	w.Resize(fyne.NewSize(1000, 700))
	if m, im := v.MinSize(), inspector.New().MinSize(); m.Width > im.Width || m.Height > im.Height {
		t.Errorf("the view needs %v, an inspector %v", m, im)
	}
	if s := v.vllm.root.Size(); s.Width < 900 || s.Height < 600 {
		t.Errorf("the vLLM page is %v in a 1000×700 window", s)
	}
}
