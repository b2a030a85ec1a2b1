// This file holds the chat pane: its widget and layout, the model it
// generates on, and the conversations' data it keeps and saves.

package chat

import (
	"slices"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/engine"
	echat "kvscope/engine/chat"
)

// SaveEvery is how often the pane saves changed conversations (streamed
// text, drafts) in the background. Sending a message saves at once.
const SaveEvery = 500 * time.Millisecond

// Pane is the chat pane widget. Its methods must be called on the UI
// goroutine (background updates go through package uithread).
type Pane struct {
	widget.BaseWidget

	// OnError reports a failed save (also shown above the composer), on the
	// UI goroutine.
	OnError func(error)
	// OnSelect is called when the shown conversation changes.
	OnSelect func(id int64)

	st *store.Store // nil: nothing is saved

	paused bool // the engine's scheduler is paused (the last snapshot said so)

	mu    sync.Mutex // guards data, edits and saved: the saver goroutine reads them
	data  store.Conversations
	edits uint64 // how many changes data has had
	// saved is the edits count of the copy on disk. Writing it takes both
	// saveMu and mu; reading it, either.
	saved uint64
	// saveMu makes each write to the store, with its check that no newer
	// copy is on disk, one step: an older copy never replaces a newer one.
	saveMu sync.Mutex

	eng      *engine.Engine
	prompter *Prompter        // the engine's model's prompts (nil without an engine)
	context  int              // the engine's context limit in tokens
	counts   map[int64]*count // conversation id → its prompt's length, counted in the background
	runs     map[int64]*run   // conversation id → its generation
	reqConv  map[uint64]int64 // request id → conversation id
	live     map[int64]int    // conversation id → context tokens now (from snapshots)
	// editing is the index of the message being edited, or -1. While it is
	// set the composer holds that message, and the conversation's Draft
	// keeps what was typed before; it comes back when the edit ends.
	editing int

	ids       []int64 // sidebar order: newest first
	list      *widget.List
	title     *widget.Entry
	note      *widget.Label
	ctxBar    *widget.ProgressBar
	ctxLabel  *widget.Label
	msgs      *fyne.Container
	scroll    *container.Scroll
	views     []*messageView
	composer  *widget.Entry
	delBtn    *widget.Button
	sendBtn   *widget.Button
	stopBtn   *widget.Button
	editBar   *fyne.Container
	editLabel *widget.Label
	status    *widget.Label
	settings  *settingsForm
	mode      *modeBar
	root      fyne.CanvasObject

	stopSaver chan struct{}
	saverDone chan struct{}
	closed    bool
}

// New returns a pane over the conversations in data, saving to st (nil:
// never saved). With no conversation it starts one. It saves changes in
// the background until Close.
func New(st *store.Store, data store.Conversations) *Pane {
	p := &Pane{
		st: st, data: data, runs: map[int64]*run{}, reqConv: map[uint64]int64{}, live: map[int64]int{}, counts: map[int64]*count{}, editing: -1,
		stopSaver: make(chan struct{}), saverDone: make(chan struct{}),
	}
	if p.data.NextID < 1 {
		p.data.NextID = 1
	}
	for _, c := range p.data.List {
		p.data.NextID = max(p.data.NextID, c.ID+1)
	}
	p.build()
	if len(p.data.List) == 0 {
		p.NewConversation()
	} else {
		sel := p.data.Selected
		if p.find(sel) < 0 {
			sel = p.data.List[len(p.data.List)-1].ID
		}
		p.refreshList()
		p.Select(sel)
	}
	p.ExtendBaseWidget(p)
	go p.saver()
	return p
}

// build makes the widgets.
func (p *Pane) build() {
	p.list = widget.NewList(
		func() int { return len(p.ids) },
		func() fyne.CanvasObject {
			t := widget.NewLabelWithStyle("conversation title", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
			t.Truncation = fyne.TextTruncateEllipsis
			s := widget.NewLabel("status")
			s.Importance = widget.LowImportance
			s.Truncation = fyne.TextTruncateEllipsis
			return container.NewVBox(t, s)
		},
		func(i widget.ListItemID, o fyne.CanvasObject) {
			if i >= len(p.ids) {
				return
			}
			box := o.(*fyne.Container)
			c := p.conv(p.ids[i])
			if c == nil {
				return
			}
			box.Objects[0].(*widget.Label).SetText(c.Title)
			box.Objects[1].(*widget.Label).SetText(p.sidebarStatus(c))
		})
	p.list.OnSelected = func(i widget.ListItemID) {
		if i < len(p.ids) && p.ids[i] != p.data.Selected {
			p.Select(p.ids[i])
		}
	}
	newBtn := widget.NewButtonWithIcon("New chat", theme.ContentAddIcon(), func() { p.NewConversation() })
	sidebar := container.NewBorder(newBtn, nil, nil, nil, p.list)

	p.title = widget.NewEntry()
	p.title.OnChanged = func(s string) {
		p.edit(p.data.Selected, func(c *store.Conversation) { c.Title = s })
		p.list.Refresh()
	}
	p.delBtn = widget.NewButtonWithIcon("", theme.DeleteIcon(), func() { p.confirmDelete(p.data.Selected) })
	header := container.NewBorder(nil, nil, nil, p.delBtn, p.title)

	p.note = widget.NewLabel("")
	p.note.Wrapping = fyne.TextWrapWord
	p.note.Importance = widget.WarningImportance
	p.ctxBar = widget.NewProgressBar()
	p.ctxBar.TextFormatter = func() string { return "" }
	p.ctxLabel = widget.NewLabel("context")
	ctxRow := container.NewBorder(nil, nil, p.ctxLabel, nil, p.ctxBar)

	p.settings = newSettingsForm(p)
	acc := widget.NewAccordion(widget.NewAccordionItem("System prompt & sampling", p.settings.root))

	p.msgs = container.NewVBox()
	p.scroll = container.NewVScroll(p.msgs)

	p.composer = widget.NewMultiLineEntry()
	p.composer.SetPlaceHolder("Type a message (Shift+Enter sends)")
	p.composer.SetMinRowsVisible(3)
	p.composer.Wrapping = fyne.TextWrapWord
	p.composer.OnChanged = func(s string) {
		if p.editing < 0 { // while editing, the composer is not the draft
			p.edit(p.data.Selected, func(c *store.Conversation) { c.Draft = s })
		}
	}
	p.composer.OnSubmitted = func(string) { p.Send() }
	p.sendBtn = widget.NewButtonWithIcon("Send", theme.MailSendIcon(), func() { p.Send() })
	p.sendBtn.Importance = widget.HighImportance
	p.stopBtn = widget.NewButtonWithIcon("Stop", theme.MediaStopIcon(), func() { p.Stop(p.data.Selected) })
	p.editLabel = widget.NewLabel("")
	p.editBar = container.NewBorder(nil, nil, nil,
		widget.NewButton("Cancel edit", func() { p.cancelEdit() }), p.editLabel)
	p.editBar.Hide()
	p.status = widget.NewLabel("")
	p.status.Wrapping = fyne.TextWrapWord
	p.status.Importance = widget.DangerImportance
	p.status.Hide()
	buttons := container.NewVBox(p.sendBtn, p.stopBtn)
	composer := container.NewVBox(p.editBar, p.status, container.NewBorder(nil, nil, nil, buttons, p.composer))

	p.mode = newModeBar(p)
	top := container.NewVBox(header, p.note, p.mode.root, ctxRow, acc)
	main := container.NewBorder(top, composer, nil, nil, p.scroll)
	split := container.NewHSplit(sidebar, main)
	split.Offset = 0.28
	p.root = split
}

// CreateRenderer returns the pane's renderer.
func (p *Pane) CreateRenderer() fyne.WidgetRenderer { return widget.NewSimpleRenderer(p.root) }

// SetModel makes the pane generate on e (nil: none) with the chat
// template f (from echat.FromGGUF on e's model; nil or echat.Plain: plain
// completion). problem, when not "", says why the model's template is not
// used. note is shown above the messages. Replies running on the previous
// engine are stopped.
func (p *Pane) SetModel(e *engine.Engine, f *echat.Formatter, problem, note string) {
	for _, r := range p.runs {
		r.turn.Stop()
	}
	p.eng = e
	p.context = 0
	p.prompter = nil
	clear(p.counts)
	if e != nil {
		p.prompter = NewPrompter(f, e.Tokenizer(), problem)
		p.context = e.Config().Context
		if p.context == 0 {
			p.context = e.Model().Context
		}
	}
	if c := p.conv(p.data.Selected); c != nil {
		p.mode.show(c)
	}
	p.note.SetText(note)
	p.note.Hidden = note == ""
	p.note.Refresh()
	p.showContext()
	p.showButtons()
}

// find returns the index of conversation id in data.List, or -1.
func (p *Pane) find(id int64) int {
	return slices.IndexFunc(p.data.List, func(c store.Conversation) bool { return c.ID == id })
}

// conv returns conversation id (nil if none). Call on the UI goroutine; the
// pointer is valid until the list changes.
func (p *Pane) conv(id int64) *store.Conversation {
	if i := p.find(id); i >= 0 {
		return &p.data.List[i]
	}
	return nil
}

// edit changes conversation id under the lock and counts the change.
func (p *Pane) edit(id int64, f func(c *store.Conversation)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conv(id); c != nil {
		f(c)
		c.Updated = time.Now()
		p.edits++
	}
}

// Conversations returns a deep copy of the conversations.
func (p *Pane) Conversations() store.Conversations {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneData(p.data)
}

func cloneData(d store.Conversations) store.Conversations {
	out := d
	out.List = make([]store.Conversation, len(d.List))
	for i, c := range d.List {
		out.List[i] = cloneConv(c)
	}
	return out
}

// cloneConv copies c with its own message list. The messages' IDs slices
// are shared: the pane replaces them, never changes them.
func cloneConv(c store.Conversation) store.Conversation {
	c.Messages = slices.Clone(c.Messages)
	return c
}

// Selected returns the shown conversation's id.
func (p *Pane) Selected() int64 { return p.data.Selected }

// Observe takes the live state of the engine's requests from a snapshot:
// each generating conversation's context use. Call it on the UI goroutine.
func (p *Pane) Observe(s *engine.Snapshot) {
	if s == nil {
		return
	}
	if s.Context > 0 {
		p.context = s.Context
	}
	if s.Paused != p.paused {
		p.paused = s.Paused
		p.refreshList()
	}
	for _, ri := range s.Requests {
		id, ok := p.reqConv[ri.ID]
		if !ok || p.runs[id] == nil || p.runs[id].req != ri.ID || len(ri.Samples) == 0 {
			continue
		}
		p.live[id] = ri.Samples[0].Tokens
	}
	p.showContext()
}

// ConversationOf returns the conversation a request belongs to.
func (p *Pane) ConversationOf(req uint64) (int64, bool) {
	id, ok := p.reqConv[req]
	return id, ok
}

// Close stops every reply, the background saver, and saves.
func (p *Pane) Close() {
	if p.closed {
		return
	}
	p.closed = true
	for _, r := range p.runs {
		r.turn.Stop()
	}
	close(p.stopSaver)
	<-p.saverDone
	p.saveNow()
}

// Update changes conversation id through f (its system prompt, sampling or
// title) and shows the change.
func (p *Pane) Update(id int64, f func(c *store.Conversation)) {
	p.edit(id, f)
	if id == p.data.Selected {
		if c := p.conv(id); c != nil {
			p.title.SetText(c.Title)
			p.settings.show(c)
			p.mode.show(c)
			p.showContext()
		}
	}
	p.list.Refresh()
}
