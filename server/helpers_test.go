package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// testContext is the engine's context in the tests: short, so that a
// prompt that does not fit is cheap to make.
const testContext = 512

// newTestServer starts a server on a real engine over stories260K (the
// test skips where the shared model is missing). edit may change the
// engine's and the server's settings.
func newTestServer(t testing.TB, edit func(*engine.Config, *Config)) (*httptest.Server, *engine.Engine) {
	t.Helper()
	ts, e, _ := newTestServerFull(t, edit)
	return ts, e
}

// newTestServerFull is newTestServer that also returns the Server.
func newTestServerFull(t testing.TB, edit func(*engine.Config, *Config)) (*httptest.Server, *engine.Engine, *Server) {
	t.Helper()
	m, err := model.Load(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	form, err := chat.FromGGUF(m.File, tok)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.Context = testContext
	scfg := Config{Format: form, ModelID: "stories260K"}
	if edit != nil {
		edit(&ecfg, &scfg)
	}
	e, err := engine.New(m, tok, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	scfg.Engine = e
	s, err := New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, e, s
}

// post sends body (a string as it is, anything else as JSON) and returns
// the status and the decoded JSON reply.
func post(t testing.TB, url string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if s, ok := body.(string); ok {
		r = strings.NewReader(s)
	} else {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	resp, err := http.Post(url, "application/json", r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: status %d, reply is not JSON: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// checkError checks an OpenAI error reply: a 4xx status and
// {"error": {"message", "type", "param", "code"}}, the message containing
// want.
func checkError(t testing.TB, status int, reply map[string]any, want string) {
	t.Helper()
	if status < 400 || status > 499 {
		t.Errorf("status %d, want 4xx (reply %v)", status, reply)
	}
	e, ok := reply["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %v", reply)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("error has no %q: %v", k, e)
		}
	}
	if msg, _ := e["message"].(string); !strings.Contains(msg, want) {
		t.Errorf("error message %q does not contain %q", msg, want)
	}
}

// sseEvents reads a server-sent-event stream's data lines until [DONE]
// (returned as the last element, "[DONE]") or the end of the body.
func sseEvents(t testing.TB, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
			if d == "[DONE]" {
				break
			}
		}
	}
	return out
}

// usedBlocks is the engine's used-block count once it settles: the latest
// snapshot after the engine has had time to publish.
// pausedStream pauses e, starts a streamed completion of body (the server
// answers with its headers once the engine has the request) and waits
// until the engine holds the request: it then runs only as the test steps
// e, and stays until the test resumes e (which the test's cleanup does in
// any case). The engine generates far faster than a test reads, so a test
// that looks at a request while it runs needs this.
func pausedStream(t testing.TB, url string, e *engine.Engine, body string) *http.Response {
	t.Helper()
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Resume() })
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := e.WaitFor(ctx, func(s *engine.Snapshot) bool { return len(s.Requests) > 0 }); err != nil {
		t.Fatalf("the request never reached the engine: %v", err)
	}
	return resp
}

// step runs n steps of the paused engine e.
func step(t testing.TB, e *engine.Engine, n int) {
	t.Helper()
	for range n {
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
}

func waitUsed(t testing.TB, e *engine.Engine, want func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := e.Snapshot().Cache.Metrics.UsedBlocks
		if want(n) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}
