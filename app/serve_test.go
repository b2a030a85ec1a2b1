package app

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/uithread"
	"kvscope/server"
)

// serveOn types addr into the Controls tab's server address and turns the
// toggle on, returning the address it listens on.
func serveOn(t *testing.T, a *App, addr string) string {
	t.Helper()
	v := a.controls.serve
	uithread.Locked(func() {
		a.tabs.Select(a.tabControls)
		v.addr.SetText(addr)
		test.Tap(v.toggle)
	})
	var bound string
	uithread.WaitFor(t, "the server to listen or refuse", func() bool {
		bound = v.Addr()
		return bound != "" || v.run == nil
	})
	if bound == "" {
		t.Fatalf("the server did not start on %s: %q", addr, v.Line())
	}
	return bound
}

// serveOff turns the toggle off and waits for the port to close.
func serveOff(t *testing.T, a *App) {
	t.Helper()
	v := a.controls.serve
	uithread.Locked(func() { test.Tap(v.toggle) })
	uithread.WaitFor(t, "the server to stop", func() bool { return v.run == nil })
}

// post sends one /v1/completions request with Go's client (and key, when
// not empty) and returns its status and body.
func post(addr, key, body string) (int, []byte, error) {
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// complete is post, failing the test when the request does not get an
// answer.
func complete(t *testing.T, addr, key, body string) (int, []byte) {
	t.Helper()
	status, b, err := post(addr, key, body)
	if err != nil {
		t.Fatalf("POST /v1/completions: %v", err)
	}
	return status, b
}

// closed fails the test when something still answers on addr.
func closed(t *testing.T, addr string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the server stopped", addr)
	}
}

// Must show 4 of issue 12: the Controls tab's toggle serves the app's
// engine on a free port; one request from Go's HTTP client shows in the
// snapshot the inspector draws as a sequence named "API: …", in the legend
// and in the event log; the count of requests served follows; turning the
// toggle off closes the port.
func TestServerToggleShowsAPIRequestsInTheInspector(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	// Slow motion, so the request's sequence is in the cache over many of
	// the live loop's polls.
	if err := a.Engine().SetDelay(15 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	v := a.controls.serve
	uithread.Locked(func() {
		if v.addr.Text != DefaultServeAddr || v.toggle.Checked {
			t.Errorf("the toggle starts %v on %q, want off on %s", v.toggle.Checked, v.addr.Text, DefaultServeAddr)
		}
	})
	addr := serveOn(t, a, "127.0.0.1:0")
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("the toggle shows %s, not the port it took", addr)
	}
	uithread.Locked(func() {
		if line := v.Line(); !strings.Contains(line, "http://"+addr+"/v1") || !strings.Contains(line, "0 requests served") {
			t.Errorf("the toggle's line: %q", line)
		}
	})

	type reply struct {
		status int
		body   []byte
		err    error
	}
	got := make(chan reply, 1)
	go func() {
		s, b, err := post(addr, "", `{"prompt": "Once upon a time there was a little girl", "max_tokens": 48, "temperature": 0}`)
		got <- reply{s, b, err}
	}()
	const want = "API: Once upon a time"
	var seen string
	uithread.WaitFor(t, "the inspector to draw the API request's sequence", func() bool {
		s := a.insp.Snapshot()
		if s == nil {
			return false
		}
		for _, q := range s.Seqs {
			if n := a.seqName(q.ID); strings.HasPrefix(n, want) && len(q.Blocks) > 0 {
				seen = n
				for _, e := range inspector.Legend(inspector.ByOwner, s, a.seqGroup, a.seqName) {
					if e.Label == n {
						return true
					}
				}
			}
		}
		return false
	})
	uithread.Locked(func() {
		if !strings.Contains(strings.Join(a.insp.Log.Lines(), "\n"), want) {
			t.Errorf("the event log never names %q: %q", want, a.insp.Log.Lines())
		}
		for _, r := range a.lastSeq.Requests {
			if _, ok := a.chat.ConversationOf(r.ID); ok && strings.HasPrefix(r.Label, "API: ") {
				t.Errorf("the API request %d became a conversation", r.ID)
			}
		}
	})
	r := <-got
	var out struct {
		Choices []struct{ Text string }
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if r.err != nil {
		t.Fatalf("POST /v1/completions: %v", r.err)
	}
	if err := json.Unmarshal(r.body, &out); r.status != http.StatusOK || err != nil || len(out.Choices) != 1 || out.Usage.CompletionTokens == 0 {
		t.Fatalf("the request got %d %s (%v)", r.status, r.body, err)
	}
	t.Logf("the inspector drew %q", seen)
	uithread.WaitFor(t, "the toggle to count the request", func() bool { return strings.Contains(v.Line(), "1 request served") })

	serveOff(t, a)
	uithread.Locked(func() {
		if v.toggle.Checked || v.toggle.Disabled() || !strings.Contains(v.Line(), "Stopped after 1 request") {
			t.Errorf("after turning it off: checked %v, disabled %v, %q", v.toggle.Checked, v.toggle.Disabled(), v.Line())
		}
	})
	closed(t, addr)
}

// A port already in use, an address other machines reach without a key
// and one that is not host:port each say why in the Controls tab, put the
// toggle back off and keep what was typed; with a key the server wants it.
func TestServerToggleRefuses(t *testing.T) {
	t.Setenv(server.APIKeyEnv, "")
	a, _ := newApp(t, t.TempDir())
	v := a.controls.serve
	uithread.Locked(func() {
		test.Tap(v.toggle)
		if v.toggle.Checked || v.run != nil || !strings.Contains(v.Line(), "Open a model first") {
			t.Errorf("without a model: checked %v, %q", v.toggle.Checked, v.Line())
		}
	})
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct{ addr, want string }{
		{taken.Addr().String(), taken.Addr().String() + " is in use by another program"},
		{"0.0.0.0:0", "give an API key"},
		{"nonsense", "not host:port"},
	} {
		uithread.Locked(func() {
			v.addr.SetText(c.addr)
			test.Tap(v.toggle)
		})
		uithread.WaitFor(t, "the toggle to go back off on "+c.addr, func() bool { return v.run == nil && !v.toggle.Checked })
		uithread.Locked(func() {
			if !strings.Contains(v.Line(), c.want) || v.toggle.Disabled() || v.addr.Disabled() {
				t.Errorf("%s: %q (toggle disabled %v), want %q", c.addr, v.Line(), v.toggle.Disabled(), c.want)
			}
			if v.addr.Text != c.addr {
				t.Errorf("the address typed, %q, became %q", c.addr, v.addr.Text)
			}
		})
	}

	// With a key, the server listens and wants it.
	uithread.Locked(func() { v.key.SetText("s3cret") })
	addr := serveOn(t, a, "127.0.0.1:0")
	uithread.Locked(func() {
		if !strings.Contains(v.Line(), "must send the API key") {
			t.Errorf("with a key the toggle's line does not say clients need it: %q", v.Line())
		}
	})
	body := `{"prompt": "Lily had a dog", "max_tokens": 4}`
	if s, b := complete(t, addr, "", body); s != http.StatusUnauthorized {
		t.Errorf("without the key: %d %s", s, b)
	}
	if s, b := complete(t, addr, "s3cret", body); s != http.StatusOK {
		t.Errorf("with the key: %d %s", s, b)
	}
	serveOff(t, a)
	uithread.Locked(func() {
		if v.key.Text != "s3cret" || v.key.Disabled() {
			t.Errorf("the key field after stopping: %q, disabled %v", v.key.Text, v.key.Disabled())
		}
	})
	closed(t, addr)
}

// A backend change reloads the model: the server stays on its address and
// answers on the new engine (the old one is closed), counting the requests
// of both; closing the app stops it and closes the port.
func TestServerFollowsReloadAndStopsOnClose(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	v := a.controls.serve
	addr := serveOn(t, a, "127.0.0.1:0")
	body := `{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}`
	if s, b := complete(t, addr, "", body); s != http.StatusOK {
		t.Fatalf("before the reload: %d %s", s, b)
	}
	old := a.Engine()
	uithread.Locked(func() { a.controls.backend.SetSelected("go") })
	uithread.WaitFor(t, "the model to reload on the Go backend", func() bool { return a.Engine() != old })
	uithread.Locked(func() {
		if v.Addr() != addr || !strings.Contains(v.Line(), "moved to the reloaded model") {
			t.Errorf("after the reload the server is on %q: %q", v.Addr(), v.Line())
		}
	})
	if s, b := complete(t, addr, "", body); s != http.StatusOK {
		t.Fatalf("after the reload: %d %s", s, b)
	}
	if n := a.Engine().Snapshot().Cache.Metrics.PrefixQueryTokens; n == 0 {
		t.Errorf("the new engine saw no prompt tokens: the request ran elsewhere")
	}
	uithread.WaitFor(t, "the count of both engines' requests", func() bool { return strings.Contains(v.Line(), "2 requests served") })
	uithread.Locked(a.Close)
	closed(t, addr)
}

// Must show of issue 24 for the app: the server toggle refuses web pages
// whose origin is not in its Allowed origins field, and a Host other than
// loopback (DNS rebinding); the origins typed reach the server, which
// answers them with CORS headers; "*" without a key is refused at start.
func TestServerToggleAllowsOnlyTheOriginsTyped(t *testing.T) {
	t.Setenv(server.APIKeyEnv, "")
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	v := a.controls.serve
	uithread.Locked(func() {
		a.tabs.Select(a.tabControls)
		v.addr.SetText("127.0.0.1:0")
		v.origins.SetText("*")
		test.Tap(v.toggle)
	})
	uithread.WaitFor(t, `the toggle to refuse "*" without a key`, func() bool { return v.run == nil && !v.toggle.Checked })
	uithread.Locked(func() {
		if !strings.Contains(v.Line(), "give an API key too") || v.origins.Text != "*" || v.origins.Disabled() {
			t.Errorf(`"*" without a key: %q, the field %q (disabled %v)`, v.Line(), v.origins.Text, v.origins.Disabled())
		}
	})

	const mine, theirs = "http://localhost:3000", "https://ui.example"
	uithread.Locked(func() { v.origins.SetText(mine + ", " + theirs) })
	addr := serveOn(t, a, "127.0.0.1:0")
	uithread.Locked(func() {
		if !v.origins.Disabled() {
			t.Error("the origins field can be edited while the server runs")
		}
		if got := v.run.origins; len(got) != 2 || got[0] != mine || got[1] != theirs {
			t.Errorf("the server runs with the origins %q", got)
		}
		if !strings.Contains(v.Line(), "Web pages from "+mine+", "+theirs+" may call it") {
			t.Errorf("the toggle's line does not name the origins: %q", v.Line())
		}
	})
	body := `{"prompt": "Lily had a dog", "max_tokens": 2}`
	for _, c := range []struct {
		method, host, origin string
		want                 int
	}{
		{"POST", "", "", 200},
		{"POST", "", mine, 200},
		{"POST", "", theirs, 200},
		{"OPTIONS", "", mine, 204},
		{"POST", "localhost:1", mine, 200},
		{"POST", "", "http://evil.example", 403},
		{"OPTIONS", "", "http://evil.example", 403},
		{"GET", "", "http://evil.example", 403},
		{"POST", "evil.example", "", 403},
	} {
		path, b := "/v1/completions", io.Reader(strings.NewReader(body))
		if c.method != "POST" {
			b = nil
		}
		if c.method == "GET" {
			path = "/v1/kvcache/events"
		}
		req, err := http.NewRequest(c.method, "http://"+addr+path, b)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.method == "OPTIONS" {
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		if c.host != "" {
			req.Host = c.host
		}
		served := v.run.served()
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		acao := resp.Header.Get("Access-Control-Allow-Origin")
		if resp.StatusCode != c.want || (c.want != 403 && acao != c.origin) || (c.want == 403 && acao != "") {
			t.Errorf("%s from %q to Host %q: %d, Access-Control-Allow-Origin %q; want %d", c.method, c.origin, c.host, resp.StatusCode, acao, c.want)
		}
		if ran := v.run.served() != served; ran != (c.want == 200) {
			t.Errorf("%s from %q to Host %q: ran a completion %v", c.method, c.origin, c.host, ran)
		}
	}
	serveOff(t, a)
	uithread.Locked(func() {
		if v.origins.Text != mine+", "+theirs || v.origins.Disabled() {
			t.Errorf("the origins field after stopping: %q, disabled %v", v.origins.Text, v.origins.Disabled())
		}
	})
}
