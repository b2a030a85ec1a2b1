// This file holds the Models tab's catalog: each entry's download (start,
// pause, resume, discard, open), where downloads go, and the lines a row
// shows while it runs.

package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/uithread"
	"kvscope/hub"
)

// ModelsDirEnv names the environment variable that overrides kvscope's own
// models folder, where downloads go and the first place the scan looks
// (default hub.ModelsDir(), os.UserCacheDir()/kvscope/models).
const ModelsDirEnv = "KVSCOPE_MODELS_DIR"

// modelsDir is kvscope's models folder: ModelsDirEnv, else hub.ModelsDir.
func modelsDir() (string, error) {
	if d := strings.TrimSpace(os.Getenv(ModelsDirEnv)); d != "" {
		return d, nil
	}
	return hub.ModelsDir()
}

// hubFreeSpace, when not nil, answers the downloads' free-space check
// instead of the file system (hub.Client.FreeSpace): tests set it to play
// a short disk. Set it before the App is made.
var hubFreeSpace func(dir string) (uint64, error)

// newHubClient is hub.NewClient on the folder modelsDir names: the
// endpoint of HF_ENDPOINT, the token of HF_TOKEN (or the token file), five
// retries. It reads files, so it runs off the UI goroutine.
func newHubClient() (*hub.Client, error) {
	e, err := hub.Endpoint()
	if err != nil {
		return nil, err
	}
	dir, err := modelsDir()
	if err != nil {
		return nil, err
	}
	return &hub.Client{Endpoint: e, Token: hub.Token(), Dir: dir, Retries: 5, FreeSpace: hubFreeSpace}, nil
}

// downloadError is the one line a failed download shows. A short disk,
// found before a byte is written, says how much is missing where and what
// to do about it in the app.
func downloadError(err error) string {
	if se, ok := errors.AsType[*hub.SpaceError](err); ok {
		return fmt.Sprintf("Not enough disk space: the download needs %s more and only %s is free in %s. Free some space (or start kvscope with %s set to a folder on another disk), then press Download again.",
			humanize.IBytes(se.Need), humanize.IBytes(se.Free), se.Dir, ModelsDirEnv)
	}
	return "Download failed: " + oneLine(err.Error())
}

// dlState is where a catalog entry's download stands.
type dlState int

const (
	dlUnknown    dlState = iota // not looked at yet (start-up)
	dlNone                      // nothing on disk
	dlRunning                   // a download runs
	dlPausing                   // its context was cancelled; it has not ended yet
	dlPaused                    // a part is kept for a resume
	dlFailed                    // the last try failed (a part may be kept)
	dlDone                      // the file is in the models folder
	dlDiscarding                // its part is being deleted
)

// catRow is one catalog entry's download state (UI goroutine).
type catRow struct {
	e      hub.Entry
	state  dlState
	run    int // counts the runs, so that a late progress event of an old one is ignored
	cancel context.CancelFunc
	p      hub.Progress // the last progress event of the run
	part   int64        // bytes kept for a resume
	total  int64        // the file's size as the hub said, when known
	err    string       // the last failure, one line
	note   string       // the last remark of the download
	path   string       // the finished file
	local  *hub.Local   // the finished file, inspected
}

// catView is one catalog entry's widgets in one modelView.
type catView struct {
	title, detail, status, speed, errLine  *widget.Label
	bar                                    *widget.ProgressBar
	download, pause, resume, discard, open *widget.Button
}

// newCatView makes the widgets of catalog row i.
func (m *modelTab) newCatView(i int, r *catRow) *catView {
	cv := &catView{
		title:   widget.NewLabelWithStyle(r.e.Title, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		detail:  widget.NewLabel(catalogDetail(r.e)),
		status:  widget.NewLabel(""),
		speed:   widget.NewLabel(""),
		errLine: widget.NewLabel(""),
		bar:     widget.NewProgressBar(),
	}
	cv.detail.Wrapping = fyne.TextWrapWord
	cv.status.Wrapping = fyne.TextWrapWord
	cv.errLine.Wrapping = fyne.TextWrapWord
	cv.errLine.Importance = widget.DangerImportance
	cv.speed.Importance = widget.LowImportance
	cv.download = widget.NewButtonWithIcon("Download", theme.DownloadIcon(), func() { m.startDownload(i) })
	cv.pause = widget.NewButtonWithIcon("Pause", theme.MediaPauseIcon(), func() { m.pause(i) })
	cv.resume = widget.NewButtonWithIcon("Resume", theme.MediaPlayIcon(), func() { m.startDownload(i) })
	cv.discard = widget.NewButtonWithIcon("Discard", theme.DeleteIcon(), func() { m.discard(i) })
	cv.open = widget.NewButtonWithIcon("Open", theme.FolderOpenIcon(), func() { m.openRow(i) })
	cv.open.Importance = widget.HighImportance
	return cv
}

// catalogDetail is an entry's line under its title.
func catalogDetail(e hub.Entry) string {
	size := humanize.Bytes(uint64(e.Size))
	if e.SizeApprox {
		size = "about " + size
	}
	s := fmt.Sprintf("%s · %s · %s · %s/%s", e.Arch, e.Quant, size, e.Ref.Repo, e.Ref.File)
	if !e.Runnable() {
		s += fmt.Sprintf(" · kvscope does not run architecture %s yet", e.Arch)
	}
	return s
}

// show draws row i in every view.
func (m *modelTab) show(i int) {
	for _, v := range m.views {
		if m.showRow(m.rows[i], v.catalog[i]) {
			v.relayout()
		}
	}
}

// showRow draws r's state in cv, and reports whether an item was shown
// or hidden (the view must then be laid out again).
func (m *modelTab) showRow(r *catRow, cv *catView) (moved bool) {
	shown := cv.visible()
	defer func() { moved = cv.visible() != shown }()
	for _, b := range []*widget.Button{cv.download, cv.pause, cv.resume, cv.discard, cv.open} {
		b.Hide()
		b.Enable()
	}
	cv.bar.Hide()
	cv.speed.SetText("")
	cv.speed.Hide()
	cv.errLine.SetText(r.err)
	cv.errLine.Hidden = r.err == ""
	cv.errLine.Refresh()
	status := ""
	canRun := m.problem == "" && m.client != nil
	switch r.state {
	case dlUnknown:
		status = "Looking for an earlier download…"
	case dlNone:
		cv.download.Show()
		if !canRun {
			cv.download.Disable()
		}
	case dlRunning, dlPausing:
		cv.bar.Show()
		cv.bar.SetValue(r.p.Fraction())
		status = progressLine(r.p)
		if s := speedLine(r.p); s != "" {
			cv.speed.SetText(s)
			cv.speed.Show()
		}
		cv.pause.Show()
		if r.state == dlPausing {
			status = "Pausing…"
			cv.pause.Disable()
		}
	case dlPaused, dlFailed:
		if r.part > 0 {
			cv.bar.Show()
			if r.total > 0 {
				cv.bar.SetValue(min(1, float64(r.part)/float64(r.total)))
			} else {
				cv.bar.SetValue(0)
			}
			status = "Paused at " + humanize.Bytes(uint64(r.part))
			if r.total > 0 {
				status += " of " + humanize.Bytes(uint64(r.total))
			}
			status += " — Resume"
			cv.resume.Show()
			cv.discard.Show()
			if !canRun {
				cv.resume.Disable()
			}
		} else {
			cv.download.Show()
			if !canRun {
				cv.download.Disable()
			}
		}
	case dlDone:
		cv.bar.Show()
		cv.bar.SetValue(1)
		status = "Downloaded: " + r.path
		cv.open.Show()
		if r.local != nil && !r.local.Runnable() {
			cv.open.Disable()
			status += " (kvscope cannot run it: " + whyNot(*r.local) + ")"
		}
	case dlDiscarding:
		status = "Discarding the partial download…"
	}
	if r.note != "" && r.state != dlDone {
		status += " " + r.note
	}
	cv.status.SetText(strings.TrimSpace(status))
	cv.status.Hidden = cv.status.Text == ""
	cv.status.Refresh()
	return
}

// visible lists which of cv's items are shown, one letter each.
func (cv *catView) visible() string {
	var b strings.Builder
	for _, o := range []fyne.CanvasObject{cv.status, cv.speed, cv.errLine, cv.bar, cv.download, cv.pause, cv.resume, cv.discard, cv.open} {
		if o.Visible() {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// progressLine says what a running download is doing.
func progressLine(p hub.Progress) string {
	switch p.Phase {
	case hub.PhaseConnecting:
		return "Connecting to the hub…"
	case hub.PhaseChecking:
		return fmt.Sprintf("Checking the %s downloaded before…", humanize.Bytes(uint64(p.Done)))
	case hub.PhaseDone:
		return "Done."
	}
	s := "Downloading: " + humanize.Bytes(uint64(p.Done))
	if p.Total > 0 {
		s += " of " + humanize.Bytes(uint64(p.Total))
	}
	if p.Resumed > 0 {
		s += fmt.Sprintf(" (resumed at %s)", humanize.Bytes(uint64(p.Resumed)))
	}
	if p.Attempt > 1 {
		s += fmt.Sprintf(", connection %d", p.Attempt)
	}
	return s
}

// speedLine is a running download's speed and time left, or "" while
// unknown.
func speedLine(p hub.Progress) string {
	if p.Phase != hub.PhaseDownloading || p.Speed <= 0 {
		return ""
	}
	s := humanize.Bytes(uint64(p.Speed)) + "/s"
	if p.ETA >= 0 {
		s += ", " + p.ETA.Round(time.Second).String() + " left"
	}
	return s
}

// startDownload downloads (or resumes) catalog row i on a goroutine (UI
// goroutine). Progress reaches the UI through a one-slot mailbox read by a
// goroutine of its own, so the download never waits for the UI.
func (m *modelTab) startDownload(i int) {
	r := m.rows[i]
	if m.closed || m.client == nil || m.problem != "" {
		return
	}
	switch r.state {
	case dlNone, dlPaused, dlFailed:
	default:
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	r.run++
	run := r.run
	r.state, r.cancel, r.err, r.note = dlRunning, cancel, "", ""
	r.p = hub.Progress{Ref: r.e.Ref, Phase: hub.PhaseConnecting, ETA: -1, Done: r.part, Total: r.total}
	m.show(i)

	var latest atomic.Pointer[hub.Progress]
	kick := make(chan struct{}, 1)
	go func() { // the mailbox's reader: it may wait for the UI
		for range kick {
			p := *latest.Load()
			uithread.Do(func() {
				if m.closed || r.run != run || r.state != dlRunning && r.state != dlPausing {
					return
				}
				if p.Note != "" {
					r.note = p.Note
				}
				r.p = p
				m.show(i)
			})
		}
	}()
	c, ref := m.client, r.e.Ref
	m.wg.Add(1)
	go func() {
		res, err := c.Download(ctx, ref, func(p hub.Progress) {
			latest.Store(&p)
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		close(kick)
		cancel()
		var part, total int64
		var local *hub.Local
		if err != nil {
			part, total, _ = c.Partial(ref)
		} else {
			l := hub.Inspect(res.Path)
			local = &l
		}
		m.wg.Done()
		uithread.Do(func() {
			if m.closed || r.run != run {
				return
			}
			r.cancel = nil
			r.part, r.total = part, total
			switch {
			case err == nil:
				r.state, r.path, r.local, r.note = dlDone, res.Path, local, ""
				r.p.Done, r.p.Total, r.p.Phase = res.Size, res.Size, hub.PhaseDone
				m.addLocal(*local)
			case errors.Is(err, context.Canceled):
				r.state = dlPaused
			default:
				r.state, r.err = dlFailed, downloadError(err)
			}
			m.show(i)
		})
	}()
}

// oneLine joins a message's lines.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// pause cancels row i's download; its part stays for Resume (UI goroutine).
func (m *modelTab) pause(i int) {
	r := m.rows[i]
	if r.state != dlRunning || r.cancel == nil {
		return
	}
	r.state = dlPausing
	r.cancel()
	m.show(i)
}

// discard deletes row i's part on a goroutine (UI goroutine).
func (m *modelTab) discard(i int) {
	r := m.rows[i]
	if m.closed || m.client == nil || r.state != dlPaused && r.state != dlFailed {
		return
	}
	r.state, r.err, r.note = dlDiscarding, "", ""
	r.run++
	run := r.run
	m.show(i)
	c, ref := m.client, r.e.Ref
	m.wg.Add(1)
	go func() {
		err := c.Discard(ref)
		part, total, _ := c.Partial(ref)
		m.wg.Done()
		uithread.Do(func() {
			if m.closed || r.run != run {
				return
			}
			r.part, r.total = part, total
			r.state = dlNone
			if err != nil {
				r.state, r.err = dlFailed, "Discarding failed: "+oneLine(err.Error())
			}
			m.show(i)
		})
	}()
}

// openRow opens row i's finished file with the app's open path.
func (m *modelTab) openRow(i int) {
	r := m.rows[i]
	if r.state == dlDone && r.path != "" {
		m.a.openAsync(r.path)
	}
}
