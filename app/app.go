// This file holds the App: the window's parts, how they are built and
// closed, Run (the entry point) and the settings it saves.

package app

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/chat"
	"kvscope/app/inspector"
	"kvscope/app/remote"
	"kvscope/app/store"
	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// ID is the application identifier, as in FyneApp.toml.
const ID = "dev.kvscope.app"

// ConfigDirEnv names the environment variable that overrides where kvscope
// keeps its conversations and settings (default os.UserConfigDir()/kvscope).
const ConfigDirEnv = "KVSCOPE_CONFIG_DIR"

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
	load                                                        *loadStrip // above the content while a model loads
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
	w.SetContent(container.NewBorder(a.load.root, nil, nil, nil, a.content))
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
	a.load = newLoadStrip()
}

// Engine returns the engine in use, or nil.
func (a *App) Engine() *engine.Engine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eng
}

// setStatus shows a line at the top of the window.
func (a *App) setStatus(s string) { a.status.SetText(strings.ReplaceAll(s, "\n", " ")) }

// saveSettings writes the settings, reporting a failure in the status line
// (UI goroutine). After Close it writes nothing: the data folder's lock is
// given up, so the folder may be another kvscope's by then (a Reconfigure
// that was under way at Close reports after it, and used to save).
func (a *App) saveSettings() {
	if a.closed {
		return
	}
	if err := a.st.SaveSettings(a.settings); err != nil {
		a.setStatus("Saving the settings failed: " + err.Error())
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
	a.load.cancelLoad()                // a load in progress stops; use closes what it gives back
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
