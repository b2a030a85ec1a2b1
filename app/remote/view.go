package remote

import (
	"strings"

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
// Call it off app/uithread's lock (not from a test's Locked).
func (v *View) Close() {
	v.vllm.close()
	v.srv.disconnect()
}

// CreateRenderer shows the pages.
func (v *View) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(v.root) }

// serverPanel follows a remote kvscope serve.
type serverPanel struct {
	url, key *widget.Entry
	connect  *widget.Button
	status   *widget.Label
	insp     *inspector.Inspector
	feed     *Feed
	root     fyne.CanvasObject
}

func newServerPanel() *serverPanel {
	p := &serverPanel{url: widget.NewEntry(), key: widget.NewPasswordEntry(), status: widget.NewLabel("Give a kvscope serve's address (and its API key, if it has one)."), insp: inspector.New()}
	p.url.SetPlaceHolder("http://host:8080")
	p.key.SetPlaceHolder("API key (optional)")
	p.status.Truncation = fyne.TextTruncateEllipsis
	p.connect = widget.NewButton("Connect", func() {
		if p.feed != nil {
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
	if p.feed != nil {
		p.disconnect()
	}
	p.status.SetText("Connecting to " + strings.TrimSpace(base) + "…")
	p.feed = Attach(c, p.insp, 0, func(s string) { p.status.SetText(s) })
	p.connect.SetText("Disconnect")
	return nil
}

// disconnect stops the feed. Its goroutines end at once; the wait for
// them runs aside, so that it never waits on the UI goroutine that may be
// the caller.
func (p *serverPanel) disconnect() {
	if p.feed == nil {
		return
	}
	f := p.feed
	p.feed = nil
	f.cancel()
	go func() { <-f.done }()
	p.connect.SetText("Connect")
}
