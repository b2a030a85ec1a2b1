// This file holds the Remote tab's vLLM page: its form, the instances
// watched (each a subscription and a metrics poll) and their rows.

package remote

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/engine/tokenizer"
	"kvscope/vllm/kvsub"
	"kvscope/vllm/metrics"
	"kvscope/vllm/prefixcache"
)

// RefreshEvery is how often the vLLM view redraws its figures and tree.
const RefreshEvery = 250 * time.Millisecond

// ChurnWindow is the publisher time churn is measured over.
const ChurnWindow = 10 * time.Second

// source is one watched vLLM instance.
type source struct {
	src        kvsub.Source
	metricsURL string
	series     *metrics.Series // nil without a metrics URL
	cancel     context.CancelFunc
	done       chan struct{}

	mu      sync.Mutex
	problem string // the last trouble, for its row

	evCursor int64 // the refresh goroutine's eviction cursor (tree shown)
	row      *widget.Label
}

func (s *source) setProblem(err error) {
	s.mu.Lock()
	s.problem = strings.SplitN(err.Error(), "\n", 2)[0]
	s.mu.Unlock()
}

func (s *source) lastProblem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problem
}

// vllmPanel watches vLLM instances' KV-cache events and metrics.
type vllmPanel struct {
	win     fyne.Window
	cluster *prefixcache.Cluster

	mu      sync.Mutex // guards sources and shown, which the refresh goroutine reads
	sources []*source
	shown   string // the instance the tree draws

	pub, replay, met, topic *widget.Entry
	status                  *widget.Label
	rows                    *fyne.Container
	total                   *widget.Label
	pick                    *widget.Select
	tree                    *TreeView
	details                 *widget.Label
	text                    *widget.Label // the selected chain, decoded
	tokName                 *widget.Label
	tok                     *tokenizer.Tokenizer
	usage, hits, reqs, pre  *chart
	left                    *fyne.Container // the form and the figures
	root                    fyne.CanvasObject

	stop     chan struct{}
	looping  bool // the refresh goroutine runs (guarded by mu)
	loopDone chan struct{}
}

func newVLLMPanel(win fyne.Window) *vllmPanel {
	p := &vllmPanel{win: win, cluster: prefixcache.NewCluster(prefixcache.Options{}), stop: make(chan struct{}), loopDone: make(chan struct{})}
	p.pub = widget.NewEntry()
	p.pub.SetPlaceHolder("tcp://host:5557")
	p.replay = widget.NewEntry()
	p.replay.SetPlaceHolder("tcp://host:5558 (optional)")
	p.met = widget.NewEntry()
	p.met.SetPlaceHolder("http://host:8000/metrics (optional)")
	p.topic = widget.NewEntry()
	p.topic.SetPlaceHolder("kv (optional)")
	p.status = widget.NewLabel("Add a vLLM instance started with --kv-events-config (publisher zmq).")
	p.status.Wrapping = fyne.TextWrapWord
	add := widget.NewButton("Watch", func() {
		err := p.AddSource(kvsub.Source{Endpoint: strings.TrimSpace(p.pub.Text), Replay: strings.TrimSpace(p.replay.Text), Topic: strings.TrimSpace(p.topic.Text)}, strings.TrimSpace(p.met.Text))
		if err != nil {
			p.status.SetText(err.Error())
			return
		}
		p.status.SetText("Watching " + strings.TrimSpace(p.pub.Text) + ".")
		p.pub.SetText("")
		p.replay.SetText("")
		p.met.SetText("")
	})
	add.Importance = widget.HighImportance
	form := widget.NewForm(
		widget.NewFormItem("Events (PUB)", p.pub),
		widget.NewFormItem("Replay (ROUTER)", p.replay),
		widget.NewFormItem("Metrics URL", p.met),
		widget.NewFormItem("Topic", p.topic),
	)
	p.rows = container.NewVBox()
	p.total = widget.NewLabelWithStyle("No instance watched.", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	p.total.Wrapping = fyne.TextWrapWord
	p.pick = widget.NewSelect(nil, func(name string) {
		p.mu.Lock()
		p.shown = name
		for _, s := range p.sources {
			if s.src.Name == name {
				// Marks start from now: the older evictions were never drawn here.
				_, s.evCursor = p.cluster.Source(name).EvictionsSince(0)
			}
		}
		p.mu.Unlock()
		p.tree.SetTree(p.cluster.Source(name).Tree(), nil)
		p.tree.Select(-1)
	})
	p.pick.PlaceHolder = "(no instance)"
	p.tree = NewTreeView()
	p.details = widget.NewLabel("Hover a block for its details; tap one to select the chain that ends there.")
	p.details.Wrapping = fyne.TextWrapWord
	p.text = widget.NewLabel("")
	p.text.Wrapping = fyne.TextWrapWord
	p.tokName = widget.NewLabel("No tokenizer: chains show as token ids.")
	p.tokName.Wrapping = fyne.TextWrapWord
	p.tree.OnHover = func(d string) {
		if d == "" {
			d = "Hover a block for its details; tap one to select the chain that ends there."
		}
		p.details.SetText(d)
	}
	p.tree.OnSelect = func(int) { p.showChain() }
	openTok := widget.NewButton("Open a tokenizer", p.openTokenizer)

	p.usage = newChart(1, percentAxis, color.RGBA{0x4c, 0xc9, 0xf0, 0xff})
	p.hits = newChart(1, percentAxis, color.RGBA{0x90, 0xe0, 0x6f, 0xff})
	p.reqs = newChart(0, countAxis, color.RGBA{0xf7, 0x7f, 0x00, 0xff})
	p.pre = newChart(0, countAxis, color.RGBA{0xe6, 0x39, 0x46, 0xff})
	p.usage.set("KV-cache usage", nil)
	p.hits.set("Prefix-cache hit rate", nil)
	p.reqs.set("Requests running", nil)
	p.pre.set("Preemptions", nil)
	charts := container.NewGridWithRows(4, p.usage.root, p.hits.root, p.reqs.root, p.pre.root)

	p.left = container.NewVBox(form, add, p.status, widget.NewSeparator(), p.total, p.rows)
	left := p.left
	treeTop := container.NewBorder(nil, nil, widget.NewLabel("Prefix cache of"), nil, p.pick)
	chainText := container.NewVScroll(p.text)
	chainText.SetMinSize(fyne.NewSize(0, 96))
	treeBottom := container.NewVBox(p.details, container.NewBorder(nil, nil, container.NewVBox(openTok), nil, p.tokName), chainText)
	treePane := container.NewBorder(treeTop, treeBottom, nil, nil, p.tree)
	right := container.NewHSplit(treePane, charts)
	right.Offset = 0.72
	split := container.NewHSplit(container.NewVScroll(left), right)
	split.Offset = 0.28
	p.root = split
	return p
}

// AddSource starts watching a vLLM instance (UI goroutine): its events
// from src (replayed from sequence 0 where it has a replay endpoint) and,
// where metricsURL is not "", its /metrics every second.
func (p *vllmPanel) AddSource(src kvsub.Source, metricsURL string) error {
	if src.Endpoint == "" {
		return errors.New("give the instance's event endpoint, such as tcp://host:5557")
	}
	if src.Name == "" {
		src.Name = src.Endpoint
	}
	if metricsURL != "" && !strings.HasPrefix(metricsURL, "http://") && !strings.HasPrefix(metricsURL, "https://") {
		return fmt.Errorf("%q is not a metrics URL such as http://host:8000/metrics", metricsURL)
	}
	sub, err := kvsub.New(src)
	if err != nil {
		return err
	}
	p.mu.Lock()
	for _, s := range p.sources {
		if s.src.Name == src.Name {
			p.mu.Unlock()
			return fmt.Errorf("%s is watched already", src.Name)
		}
	}
	p.mu.Unlock()
	select {
	case <-p.stop:
		return errors.New("the view is closed")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &source{src: sub.Source(), metricsURL: metricsURL, cancel: cancel, done: make(chan struct{})}
	s.row = widget.NewLabel(src.Name + ": connecting…")
	s.row.Wrapping = fyne.TextWrapWord
	p.cluster.Source(src.Name) // its row shows before its first batch
	if metricsURL != "" {
		s.series = metrics.NewSeries(600)
	}
	updates := make(chan kvsub.Update, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := sub.Run(ctx, updates); err != nil && ctx.Err() == nil {
			s.setProblem(err)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-updates:
				p.cluster.Apply(u)
				if u.Kind == kvsub.KindMalformed || u.Kind == kvsub.KindError {
					s.setProblem(u.Err)
				}
			}
		}
	})
	if s.series != nil {
		wg.Go(func() {
			metrics.Poll(ctx, nil, metricsURL, "", SampleEvery, s.series, s.setProblem)
		})
	}
	go func() {
		wg.Wait()
		close(s.done)
	}()
	p.mu.Lock()
	p.sources = append(p.sources, s)
	names := make([]string, len(p.sources))
	for i, x := range p.sources {
		names[i] = x.src.Name
	}
	p.mu.Unlock()
	p.mu.Lock()
	if !p.looping {
		// The refresh goroutine starts with the first source: a view
		// that watches nothing costs nothing.
		p.looping = true
		go p.loop()
	}
	p.mu.Unlock()
	remove := widget.NewButton("Stop", func() { p.removeSource(src.Name) })
	// The button keeps its own height at the row's top right, beside the
	// row's text, never over it.
	p.rows.Add(container.NewBorder(nil, nil, nil, container.NewVBox(remove), s.row))
	p.pick.SetOptions(names)
	if p.pick.Selected == "" {
		p.pick.SetSelected(src.Name)
	}
	return nil
}

// removeSource stops watching one instance (UI goroutine).
func (p *vllmPanel) removeSource(name string) {
	p.mu.Lock()
	var gone *source
	kept := p.sources[:0]
	for _, s := range p.sources {
		if s.src.Name == name {
			gone = s
			continue
		}
		kept = append(kept, s)
	}
	p.sources = kept
	names := make([]string, len(kept))
	for i, x := range kept {
		names[i] = x.src.Name
	}
	p.mu.Unlock()
	if gone == nil {
		return
	}
	gone.cancel()
	for i, o := range p.rows.Objects {
		if b, ok := o.(*fyne.Container); ok && len(b.Objects) > 0 && b.Objects[0] == gone.row {
			p.rows.Objects = append(p.rows.Objects[:i:i], p.rows.Objects[i+1:]...)
			break
		}
	}
	p.rows.Refresh()
	p.pick.SetOptions(names)
	if p.pick.Selected == name {
		p.pick.ClearSelected()
		p.mu.Lock()
		p.shown = ""
		p.mu.Unlock()
		p.tree.SetTree(prefixcache.Tree{}, nil)
		if len(names) > 0 {
			p.pick.SetSelected(names[0])
		}
	}
	go func() { <-gone.done }()
}

// close stops every source and the refresh goroutine and waits for them.
func (p *vllmPanel) close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	p.mu.Lock()
	sources, looping := p.sources, p.looping
	p.sources = nil
	p.mu.Unlock()
	for _, s := range sources {
		s.cancel()
	}
	for _, s := range sources {
		<-s.done
	}
	if looping {
		<-p.loopDone
	}
}
