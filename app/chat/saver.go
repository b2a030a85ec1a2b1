// This file holds the pane's background saver of changed conversations.

package chat

import (
	"time"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

// The saver: the pane's conversations go to the store every SaveEvery
// from a goroutine of their own, and at once when a message is sent and on
// Close. A copy is
// taken under the pane's mutex and written without it; a copy older than
// the one on disk is never written over it.

// saver saves changed conversations every SaveEvery until Close.
func (p *Pane) saver() {
	defer close(p.saverDone)
	t := time.NewTicker(SaveEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stopSaver:
			return
		case <-t.C:
			if p.dirty() {
				if err := p.write(); err != nil {
					uithread.Do(func() { p.reportSave(err) })
				}
			}
		}
	}
}

// dirty reports whether the conversations changed since the copy on disk.
func (p *Pane) dirty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.edits != p.saved
}

// snapshot is a copy of the conversations and how many edits it holds.
type snapshot struct {
	data  store.Conversations
	edits uint64
}

// snapshot copies the conversations.
func (p *Pane) snapshot() snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return snapshot{cloneData(p.data), p.edits}
}

// commit saves s, unless the copy on disk is as new or newer: a copy taken
// before a later save never replaces it. On failure nothing counts as
// saved, so the next save tries again; edits made after s stay unsaved.
func (p *Pane) commit(s snapshot) error {
	if p.st == nil {
		return nil
	}
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	if s.edits <= p.saved {
		return nil
	}
	if err := p.st.SaveConversations(s.data); err != nil {
		return err
	}
	p.mu.Lock()
	p.saved = s.edits
	p.mu.Unlock()
	return nil
}

// write saves the conversations as they are now, if there is a store.
func (p *Pane) write() error { return p.commit(p.snapshot()) }

// saveNow saves on the UI goroutine and reports a failure.
func (p *Pane) saveNow() {
	if err := p.write(); err != nil {
		p.reportSave(err)
	}
}

func (p *Pane) reportSave(err error) {
	msg := "Your conversations could not be saved: " + err.Error()
	p.showError(msg)
	if p.OnError != nil {
		p.OnError(err)
	}
}
