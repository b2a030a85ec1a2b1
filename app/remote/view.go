// This file holds the Remote tab's View and its kvscope-server page.

package remote

import (
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/inspector"
)

// View is the Remote tab: a vLLM page (instances' prefix caches, metrics)
// and a kvscope-server page (a remote kvscope on a second inspector).
type View struct {
	widget.BaseWidget

	vllm *vllmPanel
	srv  *serverPanel
	root fyne.CanvasObject
}

// New builds the Remote view; win hosts its dialogs. Call Close when the
// window goes.
func New(win fyne.Window) *View {
	v := &View{vllm: newVLLMPanel(win), srv: newServerPanel()}
	// Each page scrolls where the window is smaller than it needs, so
	// that the Remote tab never makes the window's tabs need more room
	// than the others do.
	v.root = container.NewAppTabs(
		container.NewTabItem("vLLM", container.NewScroll(v.vllm.root)),
		container.NewTabItem("kvscope server", container.NewScroll(v.srv.root)),
	)
	v.ExtendBaseWidget(v)
	return v
}

// Inspector returns the inspector that shows the remote kvscope.
func (v *View) Inspector() *inspector.Inspector { return v.srv.insp }

// Close stops watching everything and waits for the view's goroutines.
// It touches no widget, so any goroutine may call it; call it off
// app/uithread's lock (not from a test's Locked), whose holder the
// goroutines may be waiting for.
func (v *View) Close() {
	v.vllm.close()
	v.srv.stop()
}

// CreateRenderer shows the pages.
func (v *View) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(v.root) }

// serverPanel follows a remote kvscope serve.
type serverPanel struct {
	url, key *widget.Entry
	connect  *widget.Button
	status   *widget.Label
	insp     *inspector.Inspector
	root     fyne.CanvasObject

	mu   sync.Mutex // guards feed: View.Close may run on any goroutine
	feed *Feed
}

func newServerPanel() *serverPanel {
	p := &serverPanel{url: widget.NewEntry(), key: widget.NewPasswordEntry(), status: widget.NewLabel("Give a kvscope serve's address (and its API key, if it has one)."), insp: inspector.New()}
	p.url.SetPlaceHolder("http://host:8080")
	p.key.SetPlaceHolder("API key (optional)")
	p.status.Truncation = fyne.TextTruncateEllipsis
	p.connect = widget.NewButton("Connect", func() {
		p.mu.Lock()
		following := p.feed != nil
		p.mu.Unlock()
		if following {
			p.disconnect()
			p.status.SetText("Disconnected.")
			return
		}
		if err := p.Connect(p.url.Text, p.key.Text); err != nil {
			p.status.SetText(err.Error())
		}
	})
	p.connect.Importance = widget.HighImportance
	form := container.NewBorder(nil, nil, nil, p.connect, container.NewGridWithColumns(2, p.url, p.key))
	p.root = container.NewBorder(container.NewVBox(form, p.status), nil, nil, nil, p.insp)
	return p
}

// Connect starts following the server at base (UI goroutine).
func (p *serverPanel) Connect(base, apiKey string) error {
	c, err := NewClient(base, apiKey)
	if err != nil {
		return err
	}
	p.disconnect()
	p.status.SetText("Connecting to " + strings.TrimSpace(base) + "…")
	f := Attach(c, p.insp, 0, func(s string) { p.status.SetText(s) })
	p.mu.Lock()
	p.feed = f
	p.mu.Unlock()
	p.connect.SetText("Disconnect")
	return nil
}

// disconnect stops the feed. Its goroutines end at once; the wait for
// them runs aside, so that it never waits on the UI goroutine that may be
// the caller.
func (p *serverPanel) disconnect() {
	if f := p.take(); f != nil {
		f.cancel()
		go func() { <-f.done }()
		p.connect.SetText("Connect")
	}
}

// stop ends the feed and waits for its goroutines, touching no widget.
func (p *serverPanel) stop() {
	if f := p.take(); f != nil {
		f.Stop()
	}
}

// take returns the feed (nil for none) and forgets it.
func (p *serverPanel) take() *Feed {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.feed
	p.feed = nil
	return f
}
