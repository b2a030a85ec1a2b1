package server

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"

	"kvscope/engine/chat"
)

// maxReplies bounds the replies a server remembers.
const maxReplies = 512

// replies remembers the chat replies the server generated, by the
// conversation they answered and their text, so that a request whose
// messages extend a conversation the server has seen holds each of its
// replies as the ids the model generated (and the end-of-generation token
// it ended on): its prompt then starts with exactly what the prefix cache
// holds (see chat.ConversationIDs). A client sends the history back as
// text, and tokenizing it again need not give those ids. It forgets the
// oldest reply first.
type replies struct {
	mu    sync.Mutex
	byKey map[[32]byte]reply
	order [][32]byte // oldest first
}

// reply is a remembered reply's ids.
type reply struct{ ids, end []int }

// replyKey names a reply by the turns before it and its text.
func replyKey(turns []chat.Turn, content string) [32]byte {
	h := sha256.New()
	var n [8]byte
	add := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, t := range turns {
		add(t.Role)
		add(t.Content)
	}
	add(content)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// fill gives each assistant turn the server generated its ids.
func (r *replies) fill(turns []chat.Turn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range turns {
		if t.Role != "assistant" || t.IDs != nil {
			continue
		}
		if got, ok := r.byKey[replyKey(turns[:i], t.Content)]; ok {
			turns[i].IDs, turns[i].End = got.ids, got.end
		}
	}
}

// remember keeps a reply generated after turns.
func (r *replies) remember(turns []chat.Turn, content string, ids, end []int) {
	k := replyKey(turns, content)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = make(map[[32]byte]reply)
	}
	if _, ok := r.byKey[k]; !ok {
		r.order = append(r.order, k)
	}
	r.byKey[k] = reply{ids: slices.Clone(ids), end: slices.Clone(end)}
	for len(r.order) > maxReplies {
		delete(r.byKey, r.order[0])
		r.order = r.order[1:]
	}
}
