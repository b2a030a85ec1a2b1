// This file holds the Controls tab's server card: kvscope's OpenAI-compatible
// server started on the app's engine, moved with it, and stopped.

package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/server"
)

// DefaultServeAddr is the address the Controls tab's server toggle offers
// first: loopback, as kvscope serve's default.
const DefaultServeAddr = "127.0.0.1:8080"

// servedEvery is how often the toggle's line re-reads the number of
// requests served while the server runs.
const servedEvery = 200 * time.Millisecond

// stopGrace bounds how long stopping the server waits for the requests in
// flight to end after they are cancelled, and for its connections to
// close.
const stopGrace = 5 * time.Second

// serveView is the Controls tab's server toggle: package server's
// OpenAI-compatible API over the engine the app runs, so that outside
// clients' requests show in the heatmap beside the chats (the server labels
// them "API: <first words>"). Its methods run on the UI goroutine; the
// listener and the server's life run on goroutines of their own, which
// report back through uithread.Do.
type serveView struct {
	a      *App
	toggle *widget.Check
	addr   *widget.Entry
	key    *widget.Entry
	// origins are the web origins whose pages may call the server
	// (comma- or space-separated); requests from any other page are refused.
	origins *widget.Entry
	line    *widget.Label // what the server does, or why it is off
	root    fyne.CanvasObject

	run     *serving // the server on (starting, running or stopping); nil when off
	setting bool     // the toggle is being set from here: do not act
	closed  bool     // the app closed
}

func newServeView(a *App) *serveView {
	v := &serveView{a: a}
	v.toggle = widget.NewCheck("Serve the OpenAI-compatible API on this model", func(on bool) {
		if v.setting {
			return
		}
		if on {
			v.start()
		} else {
			v.stop("")
		}
	})
	v.addr = widget.NewEntry()
	v.addr.SetText(DefaultServeAddr)
	v.key = widget.NewPasswordEntry()
	v.key.SetPlaceHolder("needed on an address other than loopback (default $" + server.APIKeyEnv + ")")
	v.origins = widget.NewEntry()
	v.origins.SetPlaceHolder("web pages that may call the server, such as http://localhost:3000 (none: all refused)")
	v.line = widget.NewLabel("Off. Outside clients (the openai SDKs, Open WebUI, editors' assistants) can use the model running here; their requests show in the heatmap as \"API: <first words>\".")
	v.line.Wrapping = fyne.TextWrapWord
	form := widget.NewForm(
		widget.NewFormItem("Server", v.toggle),
		widget.NewFormItem("Address", v.addr),
		widget.NewFormItem("API key", v.key),
		widget.NewFormItem("Allowed origins", v.origins),
	)
	v.root = container.NewVBox(widget.NewSeparator(), form, v.line)
	return v
}

// serving is one server the toggle started: a listener, an http.Server and
// package server's handler over the app's engine, which moves to the new
// engine when the app reloads its model.
type serving struct {
	want    string // the address asked for
	key     string
	origins []string                      // the web origins allowed
	cur     atomic.Pointer[server.Server] // answers the requests now
	quit    chan struct{}                 // closed to stop the server
	ended   chan struct{}                 // closed when it has stopped

	mu  sync.Mutex
	old []*server.Server // the servers on engines the app replaced: what they served still counts

	// UI goroutine:
	bound    string // the address listened on ("" until it listens)
	model    string // the model served
	stopping bool
	why      string // why it stops, when not the user's choice
	moved    bool   // it followed a reload: the line says so until it stops
}

// ServeHTTP hands a request to the server on the engine in use.
func (sv *serving) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sv.cur.Load().Handler().ServeHTTP(w, r)
}

// all returns every server this one has run, the one in use last.
func (sv *serving) all() []*server.Server {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return append(append([]*server.Server(nil), sv.old...), sv.cur.Load())
}

// served counts the requests answered, on every engine the server ran on.
func (sv *serving) served() uint64 {
	var n uint64
	for _, s := range sv.all() {
		n += s.Served()
	}
	return n
}

// swap puts srv in place of the server in use and returns that one.
func (sv *serving) swap(srv *server.Server) *server.Server {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	old := sv.cur.Swap(srv)
	sv.old = append(sv.old, old)
	return old
}

// life listens, serves until quit is closed or serving fails, then stops:
// it cancels every request in flight and shuts the http.Server down. It
// closes ended before it reports (listening, counts and the end go through
// report's functions), so nothing waiting for ended waits for the UI.
func (sv *serving) life(listening func(bound string), counted func(n uint64), stopped func(err error, n uint64)) {
	ln, err := net.Listen("tcp", sv.want)
	if err != nil {
		close(sv.ended)
		stopped(err, 0)
		return
	}
	hs := &http.Server{Handler: sv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	go listening(ln.Addr().String())
	go func() {
		t := time.NewTicker(servedEvery)
		defer t.Stop()
		var last uint64
		for {
			select {
			case <-sv.ended:
				return
			case <-t.C:
			}
			if n := sv.served(); n != last {
				last = n
				counted(n)
			}
		}
	}()
	var failed error
	select {
	case <-sv.quit:
	case failed = <-done:
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	for _, s := range sv.all() {
		s.CancelAll(ctx) // each stream ends with its last chunk and [DONE]
	}
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	if failed == nil {
		<-done
	}
	close(sv.ended)
	stopped(failed, sv.served())
}

// newServer makes package server's handler over e, which runs l, with the
// key and the origins of sv.
func newServer(e *engine.Engine, l *loaded, sv *serving) (*server.Server, string, error) {
	id := "kvscope-demo"
	if l != nil && l.path != DemoModel {
		id = strings.TrimSuffix(filepath.Base(l.path), filepath.Ext(l.path))
	}
	cfg := server.Config{Engine: e, ModelID: id, APIKey: sv.key, AllowedOrigins: sv.origins}
	if l != nil {
		cfg.Format = l.format // the chat pane's template: the same prompts as the chats
	}
	s, err := server.New(cfg)
	return s, id, err
}

// start turns the server on over the engine in use, on the address typed
// (UI goroutine), answering web pages only from the origins typed. A
// refusal says why and puts the toggle back off; the typed address, key
// and origins stay as they are.
func (v *serveView) start() {
	if v.run != nil || v.closed {
		return
	}
	e := v.a.Engine()
	if e == nil {
		v.refuse("Open a model first: the server runs on the model the app is running.")
		return
	}
	addr := strings.TrimSpace(v.addr.Text)
	key := v.key.Text
	if key == "" {
		key = os.Getenv(server.APIKeyEnv)
	}
	if err := server.CheckAddr(addr, key != ""); err != nil {
		if errors.Is(err, server.ErrNeedsKey) {
			v.refuse(fmt.Sprintf("%s is reachable from other machines: give an API key (or set $%s), or listen on 127.0.0.1.", addr, server.APIKeyEnv))
		} else {
			v.refuse("The address " + err.Error() + ".")
		}
		return
	}
	origins := splitOrigins(v.origins.Text)
	if err := server.CheckOrigins(origins, key != ""); err != nil {
		if errors.Is(err, server.ErrWildcardNeedsKey) {
			v.refuse("Allowed origins: \"*\" lets every web page call the server: give an API key too, or list the origins.")
		} else {
			v.refuse("Allowed origins: " + err.Error() + ".")
		}
		return
	}
	sv := &serving{want: addr, key: key, origins: origins, quit: make(chan struct{}), ended: make(chan struct{})}
	srv, id, err := newServer(e, v.a.mdl, sv)
	if err != nil {
		v.refuse("The server cannot start: " + err.Error() + ".")
		return
	}
	sv.model = id
	sv.cur.Store(srv)
	v.run = sv
	v.toggle.Disable() // until it listens, or says why it cannot
	v.addr.Disable()
	v.key.Disable()
	v.origins.Disable()
	v.say(widget.MediumImportance, "Starting on "+addr+"…")
	go sv.life(
		func(bound string) { uithread.Do(func() { v.listening(sv, bound) }) },
		func(n uint64) { uithread.Do(func() { v.counted(sv, n) }) },
		func(err error, n uint64) { uithread.Do(func() { v.stopped(sv, err, n) }) },
	)
}

// refuse says why the server is off and puts the toggle back off.
func (v *serveView) refuse(msg string) {
	v.say(widget.DangerImportance, msg)
	v.setToggle(false)
}

// listening shows the bound address (UI goroutine).
func (v *serveView) listening(sv *serving, bound string) {
	if v.run != sv || sv.stopping {
		return
	}
	sv.bound = bound
	v.toggle.Enable()
	v.showRunning(sv, sv.served(), "")
}

// counted shows the requests served (UI goroutine).
func (v *serveView) counted(sv *serving, n uint64) {
	if v.run != sv || sv.stopping || sv.bound == "" {
		return
	}
	v.showRunning(sv, n, "")
}

// showRunning says where the server listens and what it served.
func (v *serveView) showRunning(sv *serving, n uint64, note string) {
	if sv.bound == "" {
		v.say(widget.MediumImportance, "Starting on "+sv.want+"…"+note)
		return
	}
	if sv.key != "" {
		note = " Clients must send the API key." + note
	}
	if len(sv.origins) > 0 {
		note = " Web pages from " + strings.Join(sv.origins, ", ") + " may call it." + note
	}
	if sv.moved {
		// Said with every count, so that a count does not wipe it.
		note += " It moved to the reloaded model."
	}
	v.say(widget.SuccessImportance, fmt.Sprintf("Serving http://%s/v1 (model %s): %d %s served.%s",
		sv.bound, sv.model, n, plural(int(n), "request", "requests"), note))
}

// stop turns the server off (UI goroutine): the requests in flight are
// cancelled and the port closes. why, when not empty, says why it stops.
func (v *serveView) stop(why string) {
	sv := v.run
	if sv == nil || sv.stopping {
		return
	}
	sv.stopping, sv.why = true, why
	close(sv.quit)
	v.toggle.Disable() // until the port is closed, so that it can be taken again
	v.setToggle(false)
	v.say(widget.MediumImportance, "Stopping… (requests in flight are cancelled)")
}

// stopped shows how the server ended (UI goroutine): the port is closed.
func (v *serveView) stopped(sv *serving, err error, n uint64) {
	if v.run != sv || v.closed {
		return
	}
	v.run = nil
	v.setToggle(false)
	v.toggle.Enable()
	v.addr.Enable()
	v.key.Enable()
	v.origins.Enable()
	switch {
	case err != nil && errors.Is(err, syscall.EADDRINUSE):
		v.say(widget.DangerImportance, fmt.Sprintf("%s is in use by another program: choose another port (port 0 picks a free one).", sv.want))
	case err != nil && sv.bound == "":
		v.say(widget.DangerImportance, fmt.Sprintf("Cannot listen on %s: %v.", sv.want, err))
	case err != nil:
		v.say(widget.DangerImportance, fmt.Sprintf("The server stopped after %d %s: %v.", n, plural(int(n), "request", "requests"), err))
	case sv.why != "":
		v.say(widget.WarningImportance, fmt.Sprintf("Stopped after %d %s: %s.", n, plural(int(n), "request", "requests"), sv.why))
	default:
		v.say(widget.MediumImportance, fmt.Sprintf("Stopped after %d %s; %s is closed.", n, plural(int(n), "request", "requests"), sv.bound))
	}
}

// moveTo moves the server to e, the engine the app now runs l on (UI
// goroutine; use calls it on a model or backend change): the address stays,
// the old engine's requests are cancelled with it. Where the server cannot
// run on e it stops, saying why.
func (v *serveView) moveTo(e *engine.Engine, l *loaded) {
	sv := v.run
	if sv == nil || sv.stopping {
		return
	}
	srv, id, err := newServer(e, l, sv)
	if err != nil {
		v.stop("it cannot run on the new model (" + err.Error() + ")")
		return
	}
	old := sv.swap(srv)
	sv.model = id
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		old.CancelAll(ctx) // its engine is closing
	}()
	sv.moved = true
	v.showRunning(sv, sv.served(), "")
}

// close stops the server as the app closes (UI goroutine): the channel
// closes when the requests in flight are cancelled and the port is closed.
func (v *serveView) close() <-chan struct{} {
	sv := v.run
	v.stop("")
	v.closed = true
	if sv == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return sv.ended
}

// Addr returns the address the server listens on, or "" when it does not.
func (v *serveView) Addr() string {
	if v.run == nil || v.run.stopping {
		return ""
	}
	return v.run.bound
}

// Line returns what the toggle's line says.
func (v *serveView) Line() string { return v.line.Text }

// setToggle sets the toggle without acting on it.
func (v *serveView) setToggle(on bool) {
	v.setting = true
	v.toggle.SetChecked(on)
	v.setting = false
}

// say shows msg under the toggle.
func (v *serveView) say(imp widget.Importance, msg string) {
	v.line.Importance = imp
	v.line.SetText(msg)
}

// splitOrigins returns the origins typed, which commas or spaces separate.
func splitOrigins(text string) []string {
	return strings.FieldsFunc(text, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}
