// This file holds the Models tab (and its twin on the first-run screen):
// the lists it draws, the scan for the GGUF files already on the machine,
// and their rows.

package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/uithread"
	"kvscope/hub"
)

// modelTab is the Models tab and its twin on the first-run screen: the
// GGUF files the user has (hub.Scan over hub.DefaultDirs, the kvscope
// folder as modelsDir says) and the curated catalog (hub.Catalog), each
// entry with a resumable download. Its state belongs to the UI goroutine;
// scans, downloads and discards run on goroutines of their own, which
// never wait for the UI (their results go through uithread.Do), so that
// close can wait for them while holding the UI.
type modelTab struct {
	a       *App
	ctx     context.Context // cancelled by close: pauses every download
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the goroutines that touch the models folder
	client  *hub.Client    // nil until the start-up goroutine made it
	dirs    hub.Dirs
	problem string // why downloads cannot run ("" when they can)
	closed  bool

	scanning bool
	scanned  bool // a scan ended, so dirs is set
	locals   []hub.Local
	rows     []*catRow
	views    []*modelView
}

// modelView is one place the lists are drawn: the Models tab (views[0])
// or the first-run screen (views[1]).
type modelView struct {
	root    fyne.CanvasObject
	scan    *widget.Label   // the scan's state
	rescan  *widget.Button  // scans again
	locals  *fyne.Container // one row per file found
	catalog []*catView      // one per catalog entry, in rows' order
	hubLine *widget.Label   // where downloads come from, or why they cannot run
	box     *fyne.Container // the whole list
	// outer is the scroll the view is in, set by its maker: it is
	// refreshed when a row grows or shrinks, so that the scroll's
	// content takes its new height.
	outer fyne.CanvasObject
}

// relayout lays v out again after rows were shown, hidden, added or
// removed.
func (v *modelView) relayout() {
	if v.outer != nil {
		v.outer.Refresh()
	}
	v.box.Refresh()
}

// newModelTab makes the lists with no content yet; start fills them.
func newModelTab(a *App) *modelTab {
	m := &modelTab{a: a}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, e := range hub.Catalog {
		m.rows = append(m.rows, &catRow{e: e})
	}
	return m
}

// view makes one more place the lists are drawn.
func (m *modelTab) view() *modelView {
	v := &modelView{scan: widget.NewLabel("Looking for GGUF files on this machine…"), locals: container.NewVBox()}
	v.scan.Wrapping = fyne.TextWrapWord
	v.rescan = widget.NewButtonWithIcon("Look again", theme.ViewRefreshIcon(), m.startScan)
	v.hubLine = widget.NewLabel("")
	v.hubLine.Wrapping = fyne.TextWrapWord
	v.hubLine.Importance = widget.LowImportance
	cat := container.NewVBox()
	for i, r := range m.rows {
		cv := m.newCatView(i, r)
		v.catalog = append(v.catalog, cv)
		cat.Add(container.NewBorder(nil, nil, nil,
			container.NewVBox(container.NewHBox(cv.download, cv.pause, cv.resume, cv.discard, cv.open)),
			container.NewVBox(cv.title, cv.detail, cv.bar, cv.status, cv.speed, cv.errLine)))
		cat.Add(widget.NewSeparator())
	}
	bold := fyne.TextStyle{Bold: true}
	v.box = container.NewVBox(
		container.NewBorder(nil, nil, nil, v.rescan, widget.NewLabelWithStyle("Models on this machine", fyne.TextAlignLeading, bold)),
		v.scan, v.locals,
		widget.NewSeparator(),
		widget.NewLabelWithStyle("Download a small chat model", fyne.TextAlignLeading, bold),
		v.hubLine, cat,
	)
	v.root = v.box
	m.views = append(m.views, v)
	m.showLocals(v)
	for i, r := range m.rows {
		m.showRow(r, v.catalog[i])
	}
	return v
}

// start looks at the models folder for the catalog's files and parts, and
// scans for the user's GGUF files, both off the UI goroutine (UI
// goroutine). Each goroutine ends its count in wg before it hands its
// result to the UI, so that close, holding the UI, can wait for them.
func (m *modelTab) start() {
	rows := make([]hub.Entry, len(m.rows))
	for i, r := range m.rows {
		rows[i] = r.e
	}
	m.scanning = true
	m.showScan()
	m.wg.Add(2)
	go func() {
		dirs := hub.DefaultDirs()
		if d, err := modelsDir(); err == nil {
			dirs.Kvscope = d
		}
		m.scanWith(dirs) // wg.Done
	}()
	go func() {
		type found struct {
			state       dlState
			part, total int64
			path        string
			local       *hub.Local
			err         string
		}
		c, cerr := newHubClient()
		res := make([]found, len(rows))
		for i, e := range rows {
			if cerr != nil {
				res[i].state = dlNone
				continue
			}
			p, err := c.Path(e.Ref)
			if err != nil {
				res[i] = found{state: dlFailed, err: err.Error()}
				continue
			}
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				l := hub.Inspect(p)
				res[i] = found{state: dlDone, path: p, local: &l}
				continue
			}
			done, total, _ := c.Partial(e.Ref)
			if done > 0 {
				res[i] = found{state: dlPaused, part: done, total: total}
			} else {
				res[i].state = dlNone
			}
		}
		m.wg.Done()
		uithread.Do(func() {
			if m.closed {
				return
			}
			m.client = c
			if cerr != nil {
				m.problem = "Downloads cannot run: " + cerr.Error()
			}
			for i, f := range res {
				r := m.rows[i]
				if r.state != dlUnknown {
					continue
				}
				r.state, r.part, r.total, r.path, r.local, r.err = f.state, f.part, f.total, f.path, f.local, f.err
				m.show(i)
			}
			m.showHub()
		})
	}()
}

// startScan scans again (UI goroutine); a scan under way is left to end.
func (m *modelTab) startScan() {
	if m.scanning || m.closed || !m.scanned {
		return
	}
	m.scanning = true
	m.showScan()
	m.wg.Add(1)
	go m.scanWith(m.dirs)
}

// scanWith lists the GGUF files in dirs and shows them; it ends m.wg's
// count for its goroutine before handing the result to the UI.
func (m *modelTab) scanWith(dirs hub.Dirs) {
	found := hub.Scan(m.ctx, dirs)
	m.wg.Done()
	uithread.Do(func() {
		if m.closed {
			return
		}
		m.scanning = false
		m.dirs, m.scanned = dirs, true
		m.locals = found
		m.showScan()
	})
}

// showScan draws the scan's state and its files in every view.
func (m *modelTab) showScan() {
	for _, v := range m.views {
		m.showLocals(v)
	}
}

// showLocals draws the files found in v.
func (m *modelTab) showLocals(v *modelView) {
	v.rescan.Disable()
	switch {
	case m.scanning:
		v.scan.SetText("Looking for GGUF files on this machine…")
	case len(m.locals) == 0:
		v.rescan.Enable()
		v.scan.SetText("No GGUF files found in kvscope's, llama.cpp's, LM Studio's or the Hugging Face folders. Download one below or open a file.")
	default:
		v.rescan.Enable()
		n := 0
		for _, l := range m.locals {
			if l.Runnable() {
				n++
			}
		}
		v.scan.SetText(fmt.Sprintf("%d GGUF files found, %d of which kvscope can run.", len(m.locals), n))
	}
	v.locals.Objects = nil
	for _, l := range m.locals {
		v.locals.Add(m.localRow(l))
	}
	v.relayout()
}

// localRow is one found file: what it is, and an Open button or why
// kvscope cannot run it.
func (m *modelTab) localRow(l hub.Local) fyne.CanvasObject {
	name := l.Name
	if name == "" {
		name = filepath.Base(l.Path)
	}
	title := widget.NewLabelWithStyle(name, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	title.Truncation = fyne.TextTruncateEllipsis
	detail := widget.NewLabel(localDetail(l))
	detail.Wrapping = fyne.TextWrapWord
	path := l.Path
	open := widget.NewButtonWithIcon("Open", theme.FolderOpenIcon(), func() { m.a.openAsync(path) })
	body := container.NewVBox(title, detail)
	if !l.Runnable() {
		open.Disable()
		why := widget.NewLabel("kvscope cannot run it: " + whyNot(l))
		why.Wrapping = fyne.TextWrapWord
		why.Importance = widget.WarningImportance
		body.Add(why)
	}
	return container.NewBorder(nil, nil, nil, container.NewVBox(open), body)
}

// localDetail is a found file's architecture, size, quantization and place.
func localDetail(l hub.Local) string {
	var parts []string
	if l.Arch != "" {
		parts = append(parts, l.Arch)
	}
	parts = append(parts, humanize.Bytes(uint64(max(l.Size, 0))))
	if l.Quant != "" {
		parts = append(parts, l.Quant)
	}
	where := string(l.Source)
	if l.Repo != "" {
		where += " " + l.Repo
	}
	if where != "" {
		parts = append(parts, where)
	}
	parts = append(parts, l.Path)
	return strings.Join(parts, " · ")
}

// whyNot says why kvscope cannot run l.
func whyNot(l hub.Local) string {
	if l.Err != nil {
		return "it cannot be read as GGUF (" + l.Err.Error() + ")"
	}
	return l.Unsupported
}

// showHub says where downloads come from, or why they cannot run.
func (m *modelTab) showHub() {
	line := m.problem
	if line == "" && m.client != nil {
		line = fmt.Sprintf("From %s into %s; a download paused, failed or cut short by closing kvscope resumes where it stopped.", m.client.Endpoint, m.client.Dir)
	}
	for _, v := range m.views {
		v.hubLine.SetText(line)
	}
}

// addLocal adds a downloaded file to the files found, unless it is there.
func (m *modelTab) addLocal(l hub.Local) {
	for _, x := range m.locals {
		if x.Path == l.Path {
			return
		}
	}
	l.Source = hub.SourceKvscope
	m.locals = append([]hub.Local{l}, m.locals...)
	m.showScan()
}

// close pauses every download (their parts stay for the next start) and
// stops the scan (UI goroutine); wait waits for their goroutines to end.
func (m *modelTab) close() {
	m.closed = true
	m.cancel()
}

// wait returns when no goroutine of the tab touches the models folder any
// more. It never needs the UI goroutine, so it may be called holding it.
func (m *modelTab) wait() { m.wg.Wait() }

// narrow lays its objects out centred, at most width wide and at their
// minimum height: a readable column on a wide window.
type narrow struct{ width float32 }

// MinSize is the widest object's minimum width and the tallest's height.
func (n narrow) MinSize(objs []fyne.CanvasObject) fyne.Size {
	var s fyne.Size
	for _, o := range objs {
		s = s.Max(o.MinSize())
	}
	return s
}

// Layout centres each object at most n.width wide.
func (n narrow) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	w := min(size.Width, max(n.width, n.MinSize(objs).Width))
	for _, o := range objs {
		o.Resize(fyne.NewSize(w, max(size.Height, o.MinSize().Height)))
		o.Move(fyne.NewPos((size.Width-w)/2, 0))
	}
}
