package app

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/storage"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/chat"
	"kvscope/app/inspector"
	"kvscope/app/remote"
	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/loader"
)

// ID is the application identifier, as in FyneApp.toml.
const ID = "dev.kvscope.app"

// ConfigDirEnv names the environment variable that overrides where kvscope
// keeps its conversations and settings (default os.UserConfigDir()/kvscope).
const ConfigDirEnv = "KVSCOPE_CONFIG_DIR"

// LiveEvery is how often the window polls the engine's snapshot and events
// for the inspector: 25 redraws a second at most.
const LiveEvery = 40 * time.Millisecond

// Run opens the main window, on the model at modelPath when it is not
// empty (else the last model used, else the first-run screen), and blocks
// until the window is closed. With the environment variable ScreenshotEnv
// set it runs a short scripted session, saves a screenshot there and exits.
func Run(modelPath string) {
	if err := checkDisplay(); err != nil {
		fmt.Fprintln(os.Stderr, "kvscope:", err)
		os.Exit(1)
	}
	fa := fyneapp.NewWithID(ID)
	fa.Settings().SetTheme(Readable(theme.DefaultTheme()))
	w := fa.NewWindow("kvscope")
	w.Resize(fyne.NewSize(1280, 800))
	shot := os.Getenv(ScreenshotEnv)
	dir := os.Getenv(ConfigDirEnv)
	if dir == "" && shot != "" {
		// A scripted session never touches the user's conversations.
		tmp, err := os.MkdirTemp("", "kvscope-screenshot")
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvscope:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if dir == "" {
		var err error
		if dir, err = store.DefaultDir(); err != nil {
			fmt.Fprintln(os.Stderr, "kvscope:", err)
			os.Exit(1)
		}
	}
	a, err := New(fa, w, dir)
	if err != nil {
		fail(w, err)
		return
	}
	w.SetCloseIntercept(func() {
		// The window goes at once; the engine ends its step behind it.
		w.Hide()
		stopped := a.close()
		go func() {
			<-stopped
			fyne.Do(w.Close)
		}()
	})
	switch {
	case shot != "":
		if modelPath == "" {
			modelPath = DemoModel
		}
		go a.screenshot(modelPath, shot)
	case modelPath != "":
		a.openAsync(modelPath)
	case a.settings.LastModel != "":
		a.openAsync(a.settings.LastModel)
	}
	w.ShowAndRun()
}

// fail tells the user why kvscope cannot start (on stderr, and in the
// window, for a user who started it from a menu) and exits with status 1
// when the window is closed.
func fail(w fyne.Window, err error) {
	fmt.Fprintln(os.Stderr, "kvscope:", err)
	msg := widget.NewLabel(err.Error() + ".")
	msg.Wrapping = fyne.TextWrapWord
	quit := widget.NewButton("Quit", func() { os.Exit(1) })
	w.SetContent(container.NewPadded(container.NewBorder(nil, container.NewCenter(quit), nil, nil, msg)))
	w.Resize(fyne.NewSize(520, 160))
	w.SetCloseIntercept(func() { os.Exit(1) })
	w.ShowAndRun()
	os.Exit(1)
}

// App is kvscope's main window: the chat pane, the inspector, the cache
// controls, teaching mode and the model panel, over one engine.
type App struct {
	fa   fyne.App
	win  fyne.Window
	st   *store.Store
	lock *store.Lock // the data folder's: held until Close

	settings store.Settings
	chat     *chat.Pane
	insp     *inspector.Inspector
	controls *controls
	teach    *teacher
	tabs     *container.AppTabs
	remote   *remote.View // the Remote tab, closed with the app
	// The tabs, by name.
	tabInspector, tabControls, tabTeaching, tabModel, tabModels *container.TabItem
	info                                                        *widget.Form
	status                                                      *widget.Label
	modelBtn                                                    *widget.Button
	firstRun                                                    fyne.CanvasObject
	main                                                        fyne.CanvasObject
	content                                                     *fyne.Container
	recent                                                      *fyne.Container
	models                                                      *modelTab // the Models tab and the first-run screen's lists
	problems                                                    []string  // load problems to tell the user
	opening                                                     string    // the model being loaded ("" when none is)
	closed                                                      bool

	mu   sync.Mutex // guards eng and mdl: the live loop reads them
	eng  *engine.Engine
	mdl  *loaded
	live chan struct{} // closed to stop the live loop

	cursor  uint64           // engine event cursor (UI goroutine)
	lastSeq *engine.Snapshot // the snapshot the inspector shows
	names   map[kvcache.SeqID]string
	groups  map[kvcache.SeqID]int64
}

// New builds the window's content on w, with conversations and settings
// kept in dir, whose lock it holds until Close. A corrupt file there is set
// aside and reported in the window; it is not an error. When another
// kvscope holds dir the error is a *store.InUseError and nothing in dir is
// touched.
func New(fa fyne.App, w fyne.Window, dir string) (*App, error) {
	lock, err := store.Acquire(dir)
	if err != nil {
		return nil, err // another kvscope uses dir: touch nothing
	}
	st, err := store.Open(dir)
	if err != nil {
		lock.Release()
		return nil, err
	}
	a := &App{fa: fa, win: w, st: st, lock: lock, names: map[kvcache.SeqID]string{}, groups: map[kvcache.SeqID]int64{}}
	if _, err := lock.RemoveStale(); err != nil {
		a.problems = append(a.problems, err.Error())
	}
	a.settings, err = st.LoadSettings()
	if err != nil {
		a.problems = append(a.problems, err.Error())
	}
	convs, err := st.LoadConversations()
	if err != nil {
		a.problems = append(a.problems, err.Error())
	}
	a.chat = chat.New(st, convs)
	a.chat.OnError = func(err error) { a.setStatus("Saving failed: " + err.Error()) }
	a.chat.OnSelect = func(int64) { a.selectConversation() }
	a.insp = inspector.New()
	a.insp.SetNames(a.seqName, a.seqGroup)
	if m, err := inspector.ParseMode(a.settings.HeatmapMode); err == nil {
		a.insp.SetMode(m)
	}
	a.insp.Modes.OnChanged = func(s string) {
		if m, err := inspector.ParseMode(s); err == nil {
			a.insp.SetMode(m)
			a.settings.HeatmapMode = m.String()
			a.saveSettings()
		}
	}
	a.controls = newControls(a)
	cfg, err := engineConfig(a.settings.Cache)
	if err != nil {
		a.problems = append(a.problems, err.Error())
	}
	a.controls.show(cfg, nil)
	a.teach = newTeacher(a)
	a.build()
	a.models.start()
	w.SetContent(a.content)
	w.SetMainMenu(a.menu())
	if len(a.problems) > 0 {
		msg := strings.Join(a.problems, "\n\n")
		a.setStatus(msg)
		dialog.ShowInformation("kvscope found a problem", msg, w)
	}
	return a, nil
}

// build lays out the window: the first-run screen or the main view.
func (a *App) build() {
	a.status = widget.NewLabel("")
	a.status.Truncation = fyne.TextTruncateEllipsis
	a.modelBtn = widget.NewButtonWithIcon("Model", theme.FolderOpenIcon(), func() {
		widget.ShowPopUpMenuAtRelativePosition(a.modelMenu(), a.win.Canvas(), fyne.NewPos(0, a.modelBtn.Size().Height), a.modelBtn)
	})
	a.info = widget.NewForm()
	infoTab := container.NewVScroll(a.info)
	a.models = newModelTab(a)
	mv := a.models.view()
	modelsTab := container.NewVScroll(container.NewPadded(mv.root))
	mv.outer = modelsTab
	// A lesson's bar sits above the heatmap, so its explanation and the
	// cache it talks about are seen together.
	a.teach.lessons.host = lessonHost(a.teach.lessons.bar, a.insp)
	a.tabInspector = container.NewTabItem("Inspector", a.teach.lessons.host)
	a.tabControls = container.NewTabItem("Controls", a.controls.root)
	a.tabTeaching = container.NewTabItem("Teaching", a.teach.root)
	a.tabModel = container.NewTabItem("Model", infoTab)
	a.tabModels = container.NewTabItem("Models", modelsTab)
	a.remote = remote.New(a.win)
	a.tabs = container.NewAppTabs(a.tabInspector, a.tabControls, a.tabTeaching, a.tabModel, a.tabModels, container.NewTabItem("Remote", a.remote))
	split := container.NewHSplit(a.chat, a.tabs)
	split.Offset = 0.47
	top := container.NewBorder(nil, nil, a.modelBtn, nil, a.status)
	a.main = container.NewBorder(top, nil, nil, nil, split)
	a.firstRun = a.buildFirstRun()
	a.content = container.NewStack(a.firstRun)
}

// buildFirstRun makes the screen shown while no model is open.
func (a *App) buildFirstRun() fyne.CanvasObject {
	title := canvas.NewText("kvscope", theme.Color(theme.ColorNameForeground))
	title.TextSize = 32
	title.TextStyle.Bold = true
	sub := widget.NewLabel("Chat with a local model and watch its KV cache work. Choose a model to start:")
	open := widget.NewButtonWithIcon("1. Open a GGUF file…", theme.FolderOpenIcon(), func() { a.openDialog() })
	open.Importance = widget.HighImportance
	demo := widget.NewButtonWithIcon("2. Start now on the built-in demo model", theme.MediaPlayIcon(), func() { a.openAsync(DemoModel) })
	demoNote := widget.NewLabel("The demo model's weights are random values generated by kvscope, at a shape that fills the heatmap: the engine and the cache do real work, but the text is gibberish.")
	demoNote.Wrapping = fyne.TextWrapWord
	demoNote.Importance = widget.LowImportance
	a.recent = container.NewVBox()
	a.showRecent()
	get := widget.NewLabel("3. Or open a model you already have, or download a small chat model, below.")
	mv := a.models.view()
	box := container.NewVBox(container.NewCenter(title), sub, open, demo, demoNote, get, a.recent, widget.NewSeparator(), mv.root)
	scroll := container.NewVScroll(container.New(narrow{760}, container.NewPadded(box)))
	mv.outer = scroll
	return scroll
}

// showRecent lists the recent models on the first-run screen.
func (a *App) showRecent() {
	a.recent.Objects = nil
	if len(a.settings.RecentModels) > 0 {
		a.recent.Add(widget.NewLabelWithStyle("Recent models", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
	}
	for _, p := range a.settings.RecentModels {
		label := p
		if p == DemoModel {
			label = "built-in demo model"
		}
		a.recent.Add(widget.NewButton(label, func() { a.openAsync(p) }))
	}
	a.recent.Refresh()
}

// menu is the window's main menu.
func (a *App) menu() *fyne.MainMenu {
	return fyne.NewMainMenu(fyne.NewMenu("Model", a.modelMenu().Items...))
}

// modelMenu offers open, recent models, the demo and the model panel.
func (a *App) modelMenu() *fyne.Menu {
	items := []*fyne.MenuItem{
		fyne.NewMenuItem("Open a GGUF file…", a.openDialog),
		fyne.NewMenuItem("Built-in demo model (random weights)", func() { a.openAsync(DemoModel) }),
	}
	if len(a.settings.RecentModels) > 0 {
		recent := fyne.NewMenuItem("Recent models", nil)
		var sub []*fyne.MenuItem
		for _, p := range a.settings.RecentModels {
			sub = append(sub, fyne.NewMenuItem(p, func() { a.openAsync(p) }))
		}
		recent.ChildMenu = fyne.NewMenu("", sub...)
		items = append(items, recent)
	}
	items = append(items, fyne.NewMenuItem("Models on this machine and downloads", func() { a.tabs.Select(a.tabModels) }),
		fyne.NewMenuItem("Model information", func() { a.tabs.Select(a.tabModel) }))
	return fyne.NewMenu("Model", items...)
}

// openDialog asks for a GGUF file.
func (a *App) openDialog() {
	d := dialog.NewFileOpen(func(r fyne.URIReadCloser, err error) {
		if err != nil {
			a.setStatus("Cannot open the file: " + err.Error())
			return
		}
		if r == nil {
			return // cancelled
		}
		path := r.URI().Path()
		r.Close()
		a.openAsync(path)
	}, a.win)
	d.SetFilter(storage.NewExtensionFileFilter([]string{".gguf", ".GGUF"}))
	d.Resize(fyne.NewSize(900, 600))
	d.Show()
}

// openAsync loads a model off the UI goroutine and switches to it.
func (a *App) openAsync(path string) {
	name := path
	if path == DemoModel {
		name = "the demo model"
	}
	if a.opening != "" {
		a.setStatus("Still loading " + a.opening + ": open another model when it is ready.")
		return
	}
	a.opening = name
	a.setStatus("Loading " + name + "…")
	// Read here: the settings and the slider belong to the UI goroutine.
	cfg, delay, be := a.cacheConfig(), a.teach.delayValue(), a.settings.Backend
	go func() {
		l, e, problems, err := load(path, cfg, delay, be)
		uithread.Do(func() {
			a.opening = ""
			if err != nil {
				a.setStatus(err.Error())
				dialog.ShowError(err, a.win)
				return
			}
			a.use(l, e, problems, delay)
		})
	}()
}

// load opens a model on compute backend be (native.Choose's names; "":
// the best that loads) and starts an engine on it with cfg, the saved
// settings, at the slow-motion delay. It runs off the UI goroutine and
// touches nothing of the App: what the user should hear about (settings
// this model cannot take, a backend that does not load) comes back in
// problems, for use to show.
func load(path string, cfg engine.Config, delay time.Duration, be string) (l *loaded, e *engine.Engine, problems []string, err error) {
	l, problems, err = loadModel(path, be)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err = engine.New(l.m, l.tok, cfg)
	if err != nil {
		// Saved settings this model cannot take: fall back to the defaults.
		e2, err2 := engine.New(l.m, l.tok, engine.DefaultConfig())
		if err2 != nil {
			l.close()
			return nil, nil, nil, fmt.Errorf("cannot start the engine on %s: %w", l.name, err)
		}
		problems = append(problems, fmt.Sprintf("The saved cache settings do not suit %s (%v); the defaults are in use.", l.name, err))
		e = e2
	}
	if err := e.SetDelay(delay); err != nil {
		problems = append(problems, "Slow motion: "+err.Error())
	}
	return l, e, problems, nil
}

// OpenModel loads a model (a GGUF path, or DemoModel) on the calling
// goroutine, which must not be the UI goroutine, and switches the window to
// it. The UI uses openAsync; tests and scripts this.
func (a *App) OpenModel(path string) error {
	var cfg engine.Config
	var delay time.Duration
	var be string
	got := make(chan struct{})
	uithread.Do(func() {
		cfg, delay, be = a.cacheConfig(), a.teach.delayValue(), a.settings.Backend
		close(got)
	})
	<-got
	l, e, problems, err := load(path, cfg, delay, be)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	uithread.Do(func() {
		a.use(l, e, problems, delay)
		close(done)
	})
	<-done
	return nil
}

// cacheConfig is the engine config the controls hold.
func (a *App) cacheConfig() engine.Config {
	cfg, _ := engineConfig(a.settings.Cache)
	return cfg
}

// use switches the window to a loaded model and its engine (UI goroutine),
// telling the user the load's problems. The engine runs at delay, the
// slow-motion slider's value when the load started; the slider's value now
// goes to it if the slider moved since, so the slider never shows a delay
// that is not in force. After Close, use closes what it was given.
func (a *App) use(l *loaded, e *engine.Engine, problems []string, delay time.Duration) {
	if a.closed {
		go func() { e.Close(); l.close() }()
		return
	}
	a.teach.lessons.forget() // its engine goes; the new one runs on the saved settings
	a.teach.stopAll()
	a.problems = append(a.problems, problems...)
	a.teach.delayIn(e, delay)
	a.mu.Lock()
	oldE, oldM := a.eng, a.mdl
	a.eng, a.mdl = e, l
	a.mu.Unlock()
	a.chat.SetModel(e, l.format, l.problem, l.note())
	a.controls.forget()           // changes queued for the old engine are dropped
	a.controls.serve.moveTo(e, l) // the API server, when on, follows the engine
	if oldE != nil {
		go func() { oldE.Close(); oldM.close() }()
	}
	if a.live != nil {
		close(a.live)
	}
	a.live = make(chan struct{})
	a.cursor = 0
	a.lastSeq = nil
	clear(a.names)
	clear(a.groups)
	a.insp.Log.Clear()
	a.insp.History.Clear()
	a.insp.SetWindow(inspector.WindowOf(&l.m.Config))
	go a.liveLoop(e, a.live)

	a.settings.LastModel = l.path
	a.settings.AddRecent(l.path)
	a.saveSettings()
	a.showRecent()
	a.win.SetMainMenu(a.menu())
	a.modelBtn.SetText(l.name)
	items := a.info.Items[:0]
	for _, kv := range l.info() {
		v := widget.NewLabel(kv[1])
		v.Wrapping = fyne.TextWrapWord
		items = append(items, widget.NewFormItem(kv[0], v))
	}
	a.info.Items = items
	a.info.Refresh()
	a.controls.show(e.Config(), e.Snapshot())
	status := fmt.Sprintf("%s: %d layers, context %d tokens; %s.", l.name, l.m.Layers, l.m.Context, loader.ShortBackend(l.backend)) // the Model tab gives the library's path
	if len(a.problems) > 0 {
		status += " " + strings.Join(a.problems, " ")
		a.problems = nil
	}
	a.setStatus(status)
	a.content.Objects = []fyne.CanvasObject{a.main}
	a.content.Refresh()
}

// Engine returns the engine in use, or nil.
func (a *App) Engine() *engine.Engine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eng
}

// setStatus shows a line at the top of the window.
func (a *App) setStatus(s string) { a.status.SetText(strings.ReplaceAll(s, "\n", " ")) }

// saveSettings writes the settings, reporting a failure in the status line.
func (a *App) saveSettings() {
	if err := a.st.SaveSettings(a.settings); err != nil {
		a.setStatus("Saving the settings failed: " + err.Error())
	}
}

// liveLoop feeds the inspector, the chat pane and teaching mode from the
// engine's snapshots and events until stop is closed.
func (a *App) liveLoop(e *engine.Engine, stop chan struct{}) {
	t := time.NewTicker(LiveEvery)
	defer t.Stop()
	var last *engine.Snapshot
	var cursor uint64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s := e.Snapshot()
		evs, next, dropped := e.Events(cursor, 2000)
		if s == last && len(evs) == 0 {
			continue
		}
		last, cursor = s, next
		uithread.Do(func() {
			select {
			case <-stop:
				return // another model took over
			default:
			}
			a.showLive(s, evs, dropped)
		})
	}
}

// showLive shows a snapshot and new events (UI goroutine).
func (a *App) showLive(s *engine.Snapshot, evs []engine.Event, dropped uint64) {
	if s == nil || s.Cache == nil {
		return
	}
	for _, r := range s.Requests {
		// One name per thing: a request's label is its name everywhere (a
		// conversation's is chat.Name's), the same in the engine's log.
		name, group := r.Label, int64(1_000_000+r.ID)
		if id, ok := a.chat.ConversationOf(r.ID); ok {
			group = id
		}
		if name == "" {
			name = fmt.Sprintf("request %d", r.ID)
		}
		for i, sm := range r.Samples {
			n := name
			if len(r.Samples) > 1 {
				n += fmt.Sprintf(" sample %d", i+1)
			}
			a.names[sm.Seq], a.groups[sm.Seq] = n, group
		}
	}
	lines := make([]string, 0, len(evs))
	stepByStep := s.Paused || a.teach.delay.Value > 0
	for _, ev := range evs {
		if ev.Kind == engine.EventStep && !stepByStep {
			continue // one a step at full speed would bury the rest; the Teaching tab explains steps
		}
		lines = append(lines, ev.String()) // the engine's words, as they are
	}
	a.pruneNames(s)
	a.insp.ShowLines(s.Cache, lines, dropped, s.DecodeTPS)
	a.lastSeq = s
	a.chat.Observe(s)
	a.teach.observe(s)
	a.controls.showPool(s)
}

// pruneNames forgets the names and owner colours of sequences that are no
// longer in the cache or in a request, so the maps stay as small as what
// the inspector shows.
func (a *App) pruneNames(s *engine.Snapshot) {
	live := make(map[kvcache.SeqID]bool, len(s.Cache.Seqs))
	for _, q := range s.Cache.Seqs {
		live[q.ID] = true
	}
	for _, r := range s.Requests {
		for _, sm := range r.Samples {
			live[sm.Seq] = true
		}
	}
	for seq := range a.names {
		if !live[seq] {
			delete(a.names, seq)
		}
	}
	for seq := range a.groups {
		if !live[seq] {
			delete(a.groups, seq)
		}
	}
}

// seqName names a sequence for the inspector.
func (a *App) seqName(seq kvcache.SeqID) string {
	if n, ok := a.names[seq]; ok {
		return n
	}
	return fmt.Sprintf("sequence %d", seq)
}

// seqGroup maps a sequence to its owner colour: its conversation.
func (a *App) seqGroup(seq kvcache.SeqID) int64 {
	if g, ok := a.groups[seq]; ok {
		return g
	}
	return int64(seq)
}

// selectConversation draws the shown conversation's block table.
func (a *App) selectConversation() {
	if a.lastSeq == nil {
		return
	}
	id := a.chat.Selected()
	for _, r := range a.lastSeq.Requests {
		if c, ok := a.chat.ConversationOf(r.ID); ok && c == id && len(r.Samples) > 0 {
			a.insp.Select(r.Samples[0].Seq, true)
			return
		}
	}
}

// Close stops teaching mode, the chat pane (which saves) and the engine,
// gives up the data folder's lock, and waits for the engine to stop.
func (a *App) Close() { <-a.close() }

// close is Close without the wait (UI goroutine): the engine stops on its
// own goroutine, after the step under way, and the channel closes then.
func (a *App) close() <-chan struct{} {
	stopped := make(chan struct{})
	if a.closed {
		close(stopped)
		return stopped
	}
	a.closed = true
	served := a.controls.serve.close() // the API server: its requests cancelled, then its port closed
	a.models.close()                   // pauses downloads: their parts stay for the next start
	a.teach.stopAll()
	a.chat.Close()
	go a.remote.Close() // its vLLM subscribers and server feed; off the UI lock, which they may wait for
	if err := a.lock.Release(); err != nil {
		fmt.Fprintln(os.Stderr, "kvscope:", err)
	}
	a.mu.Lock()
	e, m := a.eng, a.mdl
	a.eng, a.mdl = nil, nil
	a.mu.Unlock()
	if a.live != nil {
		close(a.live)
		a.live = nil
	}
	go func() {
		defer close(stopped)
		<-served // before the engine its requests run on closes
		if e != nil {
			e.Close()
			m.close()
		}
		a.models.wait()
	}()
	return stopped
}
