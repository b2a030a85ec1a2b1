package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/storage"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/gguf"
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
	treeBottom := container.NewVBox(p.details, container.NewBorder(nil, nil, openTok, nil, p.tokName), chainText)
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

// frame is what the refresh goroutine computed for the UI.
type frame struct {
	rows    map[*source]string
	total   string
	shown   string
	tree    prefixcache.Tree
	evicted []prefixcache.Eviction
	series  []metrics.Sample
	hasTree bool
}

// loop computes the figures and the shown tree off the UI goroutine every
// RefreshEvery and hands them to it.
func (p *vllmPanel) loop() {
	defer close(p.loopDone)
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		f := p.compute()
		uithread.Do(func() {
			select {
			case <-p.stop:
				return
			default:
			}
			p.show(f)
		})
	}
}

func (p *vllmPanel) compute() frame {
	p.mu.Lock()
	sources := append([]*source(nil), p.sources...)
	shown := p.shown
	p.mu.Unlock()
	f := frame{rows: map[*source]string{}, shown: shown}
	var sum metrics.Sample
	nMet := 0
	var storedPS, removedPS float64
	for _, s := range sources {
		c := p.cluster.Source(s.src.Name)
		st := c.Stats()
		a, r := c.Churn(ChurnWindow)
		storedPS += a
		removedPS += r
		row := fmt.Sprintf("%s\n%s in %s, %d evicted\nchurn +%.1f / −%.1f blocks/s", s.src.Name, engine.Count(st.Blocks, "cached block"), engine.Count(st.Roots, "chain"), st.Removed, a, r)
		if s.series != nil {
			if m, ok := s.series.Last(); ok {
				row += fmt.Sprintf("\nprefix hit rate %.1f%% (%.1f%% lately)\nusage %.1f%%, %.0f running, %.0f waiting", 100*m.HitRate(), 100*s.series.HitRate(ChurnWindow*3), 100*m.KVCacheUsage, m.Running, m.Waiting)
				sum.PrefixCacheHits += m.PrefixCacheHits
				sum.PrefixCacheQueries += m.PrefixCacheQueries
				nMet++
			}
		}
		if st.Lost > 0 {
			row += fmt.Sprintf("\n%s lost: the picture may be incomplete", engine.Count(int(st.Lost), "batch"))
		}
		if pr := s.lastProblem(); pr != "" {
			row += "\nlast problem: " + pr
		}
		f.rows[s] = row
		if s.src.Name == shown {
			tr := c.Tree()
			p.mu.Lock()
			evs, next := c.EvictionsSince(s.evCursor)
			s.evCursor = next
			p.mu.Unlock()
			f.tree, f.evicted, f.hasTree = tr, evs, true
			if s.series != nil {
				f.series = s.series.Samples()
			}
		}
	}
	if len(sources) > 0 {
		total, distinct := p.cluster.Total()
		f.total = fmt.Sprintf("Total, %s\n%s (%d distinct), %s\nchurn +%.1f / −%.1f blocks/s, %d evicted", engine.Count(len(sources), "instance"),
			engine.Count(total.Blocks, "cached block"), distinct, engine.Count(total.Tokens, "token"), storedPS, removedPS, total.Removed)
		if nMet > 0 {
			f.total += fmt.Sprintf("\nprefix hit rate %.1f%%", 100*sum.HitRate())
		}
	}
	return f
}

// show puts a frame on screen (UI goroutine).
func (p *vllmPanel) show(f frame) {
	changed := false
	for s, row := range f.rows {
		if s.row.Text != row {
			s.row.SetText(row)
			changed = true
		}
	}
	if f.total == "" {
		f.total = "No instance watched."
	}
	if p.total.Text != f.total {
		p.total.SetText(f.total)
		changed = true
	}
	if changed {
		p.rows.Refresh()
		p.left.Refresh() // the labels' heights changed with their lines
	}
	p.mu.Lock()
	stale := f.shown != p.shown // another instance was picked meanwhile
	p.mu.Unlock()
	if !f.hasTree || stale {
		return
	}
	p.tree.SetTree(f.tree, f.evicted)
	if p.tree.Selected() >= 0 {
		p.showChain()
	}
	var usage, hit, run, pre []float64
	for i, s := range f.series {
		usage = append(usage, s.KVCacheUsage)
		run = append(run, s.Running)
		pre = append(pre, s.Preemptions)
		if i > 0 {
			dq := s.PrefixCacheQueries - f.series[i-1].PrefixCacheQueries
			dh := s.PrefixCacheHits - f.series[i-1].PrefixCacheHits
			r := 0.0
			if dq > 0 && dh >= 0 {
				r = dh / dq
			}
			hit = append(hit, r)
		}
	}
	last := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[len(v)-1]
	}
	if len(f.series) > 0 {
		m := f.series[len(f.series)-1]
		p.usage.set(fmt.Sprintf("KV-cache usage %.1f%%", 100*last(usage)), usage)
		p.hits.set(fmt.Sprintf("Hit rate %.1f%% (all: %.1f%%)", 100*last(hit), 100*m.HitRate()), hit)
		p.reqs.set(fmt.Sprintf("Running %.0f, waiting %.0f", m.Running, m.Waiting), run)
		p.pre.set(fmt.Sprintf("Preemptions %.0f", m.Preemptions), pre)
	}
}

// showChain writes the selected chain's tokens: as text through the
// tokenizer where one is open, else as ids.
func (p *vllmPanel) showChain() {
	i := p.tree.Selected()
	if i < 0 {
		p.text.SetText("")
		return
	}
	tr := p.tree.Tree()
	ids := tr.ChainTokens(i)
	head := fmt.Sprintf("Chain of %d blocks, %d tokens: ", len(tr.Chain(i)), len(ids))
	var body string
	if p.tok != nil {
		xs := make([]int, len(ids))
		for j, id := range ids {
			xs[j] = int(id)
		}
		body = "“" + p.tok.Decode(xs) + "”"
	} else {
		var b strings.Builder
		for j, id := range ids {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, id)
			if j == 2000 {
				b.WriteString(" …")
				break
			}
		}
		body = b.String()
	}
	if t := head + body; p.text.Text != t {
		p.text.SetText(t)
	}
}

// openTokenizer asks for the served model's tokenizer, a GGUF or a
// tokenizer.json, and decodes chains with it.
func (p *vllmPanel) openTokenizer() {
	d := dialog.NewFileOpen(func(r fyne.URIReadCloser, err error) {
		if err != nil || r == nil {
			return
		}
		path := r.URI().Path()
		r.Close()
		p.openTokenizerPath(path)
	}, p.win)
	d.SetFilter(storage.NewExtensionFileFilter(tokenizerExtensions))
	d.Show()
}

// tokenizerExtensions are the files the open-tokenizer dialog lists.
var tokenizerExtensions = []string{".gguf", ".GGUF", ".json", ".JSON"}

// openTokenizerPath loads the tokenizer at path off the UI goroutine and
// then decodes chains with it, or says why it could not (UI goroutine).
func (p *vllmPanel) openTokenizerPath(path string) {
	p.tokName.SetText("Reading " + filepath.Base(path) + "…")
	go func() {
		tok, err := LoadTokenizer(path)
		uithread.Do(func() {
			if err != nil {
				p.tokName.SetText(err.Error())
				return
			}
			p.SetTokenizer(tok, path)
		})
	}()
}

// SetTokenizer decodes chains with tok from now on (UI goroutine); name
// says where it came from.
func (p *vllmPanel) SetTokenizer(tok *tokenizer.Tokenizer, name string) {
	p.tok = tok
	p.tokName.SetText("Tokenizer: " + name)
	p.showChain()
}

// LoadTokenizer reads the served model's tokenizer (or that of any model
// with the same vocabulary) from a GGUF file or a Hugging Face
// tokenizer.json, told apart by their first bytes: a GGUF starts with
// "GGUF", a tokenizer.json with "{".
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	kind, err := sniffTokenizer(path)
	if err != nil {
		return nil, err
	}
	if kind == "json" {
		return tokenizer.LoadHFJSON(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}

// sniffTokenizer says whether path holds a GGUF ("gguf") or JSON
// ("json"), from its first bytes.
func sniffTokenizer(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	head = head[:n]
	if bytes.HasPrefix(head, []byte("GGUF")) {
		return "gguf", nil
	}
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")) // a UTF-8 byte-order mark
	if t := bytes.TrimLeft(head, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return "json", nil
	}
	return "", fmt.Errorf("%s is neither a GGUF file nor a tokenizer.json", path)
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
