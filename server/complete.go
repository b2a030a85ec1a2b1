package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"

	"kvscope/engine"
)

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// writeTimeout bounds one write to a streaming client: one that stops
// reading without hanging up is taken as gone, and its request cancelled.
const writeTimeout = 30 * time.Second

// completion returns the handler of /v1/chat/completions (isChat) or
// /v1/completions.
func (s *Server) completion(isChat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if s.stop.Err() != nil {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: typeServer, retryAfter: 1})
			return
		}
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			writeError(w, &apiError{status: http.StatusTooManyRequests, Message: fmt.Sprintf("the server is answering %d requests, its limit; retry shortly", cap(s.slots)), Type: typeRateLimit, Code: strp("rate_limit_exceeded"), retryAfter: 1})
			return
		}
		s.active.Add(1)
		defer s.active.Add(-1)
		f, e := readFields(w, r, s.limits.MaxBodyBytes)
		if e != nil {
			writeError(w, e)
			return
		}
		g, e := s.parse(f, isChat)
		if e != nil {
			writeError(w, e)
			return
		}
		s.generate(w, r, g, start)
	}
}

// item is one chunk of one prompt's stream.
type item struct {
	prompt int
	c      engine.Chunk
}

// choiceState follows one choice of a request.
type choiceState struct {
	text      []byte
	ids       []int // the tokens generated
	final     engine.Chunk
	done      bool
	lastToken time.Time
	tools     toolStream // what a streamed reply to tools has sent
}

// generate submits the request's prompts and answers with their choices,
// streamed or at the end.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, g *genRequest, start time.Time) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopWatch := context.AfterFunc(s.stop, cancel)
	defer stopWatch()

	streams := make([]*engine.Stream, 0, len(g.prompts))
	for _, ids := range g.prompts {
		sp := g.sampling
		st, err := s.e.Submit(ctx, engine.Request{Tokens: ids, Sampling: &sp, MaxTokens: s.tokensFor(g, len(ids)), Stop: g.stop, N: g.n, Label: g.label, Constraint: g.constraint})
		if err != nil {
			cancel()
			for _, st := range streams {
				go drain(st)
			}
			writeError(w, badRequest(g.param(), "", "%v", err))
			return
		}
		streams = append(streams, st)
	}
	out := make(chan item)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range st.C {
				out <- item{i, c}
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()

	id := newID(g.chat)
	if g.tools != nil {
		// Say how tools were handled: the model's own tool-call format, or
		// llama.cpp's generic one.
		w.Header().Set("X-Kvscope-Tool-Format", g.tools.format())
		if !g.tools.native {
			log.Printf("%s: the chat template has no tool support; tools fall back to llama.cpp's generic JSON tool-call format", id)
		}
	}
	choices := make([]choiceState, len(g.prompts)*g.n)
	var sse *sseWriter
	if g.stream {
		sse = newSSE(w, cancel)
		if g.chat {
			for i := range choices {
				sse.send(s.chunk(g, id, i, map[string]any{"role": "assistant", "content": ""}, nil, nil))
			}
		}
	}
	firstToken := true
	for it := range out {
		idx := it.prompt*g.n + it.c.Sample
		if idx < 0 || idx >= len(choices) {
			continue
		}
		ch := &choices[idx]
		now := time.Now()
		if it.c.Token >= 0 {
			if firstToken {
				s.metrics.ttft.Observe(now.Sub(start).Seconds())
				firstToken = false
			} else if !ch.lastToken.IsZero() {
				s.metrics.itl.Observe(now.Sub(ch.lastToken).Seconds())
			}
			ch.lastToken = now
			ch.text = append(ch.text, it.c.Text...)
			ch.ids = append(ch.ids, it.c.Token)
			switch {
			case sse == nil || it.c.Text == "":
			case g.tools == nil:
				sse.send(s.chunk(g, id, idx, map[string]any{"content": it.c.Text}, it.c.Text, nil))
			default:
				s.sendTools(sse, g, id, idx, ch)
			}
		}
		if it.c.Done {
			ch.final, ch.done = it.c, true
			if sse != nil {
				if it.c.Reason == engine.FinishError {
					sse.send(map[string]any{"error": &apiError{Message: fmt.Sprintf("choice %d failed: %v", idx, it.c.Err), Type: typeServer}})
				}
				reason := finishReason(it.c.Reason)
				if g.tools != nil {
					// The rest of the calls' arguments, or a reply that
					// was not sent as it came (the generic format's
					// response, or a call cut short), whole.
					s.sendTools(sse, g, id, idx, ch)
					msg, why := g.tools.message(ch, it.c.Reason)
					if _, calls := msg["tool_calls"]; !calls && ch.tools.mode != streamText {
						sse.send(s.chunk(g, id, idx, map[string]any{"content": msg["content"]}, nil, nil))
					}
					reason = why
				}
				sse.send(s.chunk(g, id, idx, map[string]any{}, "", &reason))
			}
		}
	}
	u := s.account(g, choices, start)
	s.served.Add(1)
	s.rememberReplies(g, choices)
	if sse != nil {
		if g.includeUsage {
			sse.send(map[string]any{"id": id, "object": g.object(true), "created": time.Now().Unix(), "model": s.model, "choices": []any{}, "usage": u})
		}
		sse.done()
		return
	}
	for i, ch := range choices {
		if ch.final.Reason == engine.FinishError {
			writeError(w, &apiError{status: http.StatusInternalServerError, Message: fmt.Sprintf("choice %d failed: %v", i, ch.final.Err), Type: typeServer})
			return
		}
	}
	list := make([]map[string]any, len(choices))
	for i, ch := range choices {
		c := map[string]any{"index": i, "logprobs": nil, "finish_reason": finishReason(ch.final.Reason)}
		switch {
		case g.tools != nil:
			c["message"], c["finish_reason"] = g.tools.message(&ch, ch.final.Reason)
		case g.chat:
			c["message"] = map[string]any{"role": "assistant", "content": string(ch.text)}
		default:
			c["text"] = string(ch.text)
		}
		list[i] = c
	}
	reply := map[string]any{"id": id, "object": g.object(false), "created": time.Now().Unix(), "model": s.model, "choices": list, "usage": u}
	if g.tools != nil {
		reply["tool_format"] = g.tools.format()
	}
	writeJSON(w, reply)
}

// sendTools sends what is new in a streamed choice's reply to tools.
func (s *Server) sendTools(sse *sseWriter, g *genRequest, id string, idx int, ch *choiceState) {
	deltas, text := g.tools.stream(&ch.tools, string(ch.text))
	if len(deltas) > 0 {
		sse.send(s.chunk(g, id, idx, map[string]any{"tool_calls": deltas}, nil, nil))
	}
	if text != "" {
		sse.send(s.chunk(g, id, idx, map[string]any{"content": text}, text, nil))
	}
}

// message is the assistant message of a choice answered to tools, and its
// finish reason: "tool_calls" for calls (with the ids a stream sent).
func (t *toolUse) message(ch *choiceState, r engine.FinishReason) (map[string]any, string) {
	reason := finishReason(r)
	tr := t.parseToolReply(string(ch.text), ch.tools.ids)
	switch {
	case r == engine.FinishStop && len(tr.calls) > 0:
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": tr.calls}, "tool_calls"
	case len(tr.calls) > 0: // cut short: the text as it came
		return map[string]any{"role": "assistant", "content": string(ch.text)}, reason
	}
	return map[string]any{"role": "assistant", "content": tr.content}, reason
}

// rememberReplies keeps the chat replies that ended on an
// end-of-generation token, a length limit or their constraint's end (a stop
// string's tokens are not in the text the client gets back), for the
// requests that continue their conversations.
func (s *Server) rememberReplies(g *genRequest, choices []choiceState) {
	if !g.chat {
		return
	}
	for _, ch := range choices {
		if ch.final.End != nil || ch.final.Complete || ch.final.Reason == engine.FinishLength && ch.final.Err == nil {
			s.replies.remember(g.turns, string(ch.text), ch.ids, ch.final.End)
		}
	}
}

// account records a finished request in the metrics and returns its usage.
func (s *Server) account(g *genRequest, choices []choiceState, start time.Time) usage {
	var u usage
	for p := range g.prompts {
		first := choices[p*g.n].final
		u.PromptTokens += first.PromptTokens
		u.PromptTokensDetails.CachedTokens += first.CachedTokens
	}
	for _, ch := range choices {
		u.CompletionTokens += ch.final.Generated
		s.metrics.finished.WithLabelValues(finishReason(ch.final.Reason)).Inc()
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	s.metrics.promptTokens.Add(float64(u.PromptTokens))
	s.metrics.cachedTokens.Add(float64(u.PromptTokensDetails.CachedTokens))
	s.metrics.genTokens.Add(float64(u.CompletionTokens))
	s.metrics.e2e.Observe(time.Since(start).Seconds())
	return u
}

// chunk is one streamed chunk of choice idx: a chat delta, or text.
func (s *Server) chunk(g *genRequest, id string, idx int, delta map[string]any, text any, reason *string) map[string]any {
	c := map[string]any{"index": idx, "logprobs": nil, "finish_reason": reason}
	if g.chat {
		c["delta"] = delta
	} else {
		if text == nil {
			text = ""
		}
		c["text"] = text
	}
	return map[string]any{"id": id, "object": g.object(true), "created": time.Now().Unix(), "model": s.model, "choices": []any{c}}
}

// object is the reply's object type.
func (g *genRequest) object(stream bool) string {
	switch {
	case g.chat && stream:
		return "chat.completion.chunk"
	case g.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// param is the field holding the prompt.
func (g *genRequest) param() string {
	if g.chat {
		return "messages"
	}
	return "prompt"
}

// finishReason is OpenAI's name of an engine finish reason ("abort", as
// vLLM says, for a request cancelled by the server's shutdown).
func finishReason(r engine.FinishReason) string {
	switch r {
	case engine.FinishStop:
		return "stop"
	case engine.FinishLength:
		return "length"
	case engine.FinishCancelled:
		return "abort"
	}
	return "error"
}

func newID(chat bool) string {
	var b [12]byte
	rand.Read(b[:])
	if chat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// drain reads a stream to its end.
func drain(st *engine.Stream) {
	for range st.C {
	}
}

// sseWriter writes server-sent events; after a failed write (the client
// has gone) it writes nothing more and cancels the request.
type sseWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	cancel context.CancelFunc
	failed bool
}

func newSSE(w http.ResponseWriter, cancel context.CancelFunc) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), cancel: cancel}
	s.flush()
	return s
}

// send writes v as one data event.
func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	s.raw("data: " + string(b) + "\n\n")
}

// raw writes text as it is.
func (s *sseWriter) raw(text string) {
	if s.failed {
		return
	}
	s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write([]byte(text)); err != nil {
		s.fail()
		return
	}
	s.flush()
}

func (s *sseWriter) flush() {
	if err := s.rc.Flush(); err != nil {
		s.fail()
	}
}

func (s *sseWriter) fail() {
	s.failed = true
	s.cancel()
}

// done ends the stream.
func (s *sseWriter) done() { s.raw("data: [DONE]\n\n") }
