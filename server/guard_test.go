package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"kvscope/engine"
)

// webReq is one request of the guard's tests: what a browser, a rebound
// page or curl would send.
type webReq struct {
	name    string
	method  string
	path    string
	host    string            // the Host header; "" keeps the server's address
	header  map[string]string // Origin, Content-Type, preflight headers...
	body    string
	want    int
	engine  bool // the request runs on the engine (a completion)
	allowed string
}

// send sends c to ts and returns the reply, its body read unless it is a
// stream (the events endpoint never ends: its body is closed unread).
func send(t *testing.T, ts *httptest.Server, c webReq) (*http.Response, []byte) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, ts.URL+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the reply: %v", c.name, err)
	}
	return resp, b
}

// servedTokens is the server's count of prompt tokens of the completions
// it served (kvscope:prompt_tokens_total).
func servedTokens(t *testing.T, s *Server) int64 {
	t.Helper()
	var m dto.Metric
	if err := s.metrics.promptTokens.Write(&m); err != nil {
		t.Fatal(err)
	}
	return int64(m.GetCounter().GetValue())
}

// checkGuarded sends each request and checks its status; a refused one
// (403) must be an OpenAI error naming c.allowed, counted as refused,
// without CORS headers, and must not reach the engine: the server's counts
// of completions and their prompt tokens stay, and once a last completion
// (with key, when the server wants one) is served, the engine has looked
// up exactly the prompt tokens the server served, no more.
func checkGuarded(t *testing.T, ts *httptest.Server, e *engine.Engine, s *Server, key string, cases []webReq) {
	t.Helper()
	for _, c := range cases {
		served, refused, tokens := s.Served(), s.Refused(), servedTokens(t, s)
		resp, b := send(t, ts, c)
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d: %.200s", c.name, resp.StatusCode, c.want, b)
			continue
		}
		if !strings.Contains(resp.Header.Get("Vary"), "Origin") {
			t.Errorf("%s: Vary %q, want Origin", c.name, resp.Header.Get("Vary"))
		}
		acao := resp.Header.Get("Access-Control-Allow-Origin")
		if c.want == http.StatusForbidden {
			var r map[string]any
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%s: the refusal is not JSON: %q", c.name, b)
			}
			checkError(t, resp.StatusCode, r, c.allowed)
			if typ, _ := r["error"].(map[string]any)["type"].(string); typ != typePermission {
				t.Errorf("%s: error type %q, want %s", c.name, typ, typePermission)
			}
			if s.Refused() != refused+1 {
				t.Errorf("%s: refused count %d, want %d", c.name, s.Refused(), refused+1)
			}
			if acao != "" {
				t.Errorf("%s: refused, yet Access-Control-Allow-Origin %q", c.name, acao)
			}
		} else if s.Refused() != refused {
			t.Errorf("%s: served, yet counted as refused", c.name)
		}
		if o := c.header["Origin"]; c.want != http.StatusForbidden && o != "" && acao != o {
			t.Errorf("%s: Access-Control-Allow-Origin %q, want %q", c.name, acao, o)
		}
		if ran := s.Served() != served || servedTokens(t, s) != tokens; ran != c.engine {
			t.Errorf("%s: ran a completion %v (served %d→%d, prompt tokens %d→%d), want %v",
				c.name, ran, served, s.Served(), tokens, servedTokens(t, s), c.engine)
		}
	}
	h := map[string]string{}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	if resp, b := send(t, ts, webReq{name: "the last completion", method: "POST", path: "/v1/completions", header: h, body: oneWord}); resp.StatusCode != 200 {
		t.Fatalf("the last completion: %d %s", resp.StatusCode, b)
	}
	want := servedTokens(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	snap, err := e.WaitFor(ctx, func(s *engine.Snapshot) bool { return s.Cache.Metrics.PrefixQueryTokens >= want })
	if err != nil {
		t.Fatalf("the engine never looked up the %d prompt tokens served: %v", want, err)
	}
	if got := snap.Cache.Metrics.PrefixQueryTokens; got != want {
		t.Errorf("the engine looked up %d prompt tokens, the server served %d: refused requests reached it", got, want)
	}
}

const (
	evil    = "http://evil.example"
	mine    = "http://localhost:3000"
	oneWord = `{"prompt": "Once upon a time", "max_tokens": 2}`
)

// Must show 1 of issue 24: a foreign Host (DNS rebinding), a page's
// cross-origin "simple" POST, an unlisted origin's preflight and its read
// of the cache's events are refused before they reach the engine; the
// same requests to loopback names (any port) and from an allowed origin
// are served, and so is curl's text/plain POST without an Origin.
func TestGuardRefusesWebPages(t *testing.T) {
	ts, e, s := newTestServerFull(t, func(_ *engine.Config, c *Config) { c.AllowedOrigins = []string{mine + "/"} })
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	plain := map[string]string{"Content-Type": "text/plain"}
	from := func(origin string, kv ...string) map[string]string {
		h := map[string]string{"Origin": origin}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	preflight := func(origin string) map[string]string {
		return from(origin, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type, x-stainless-os")
	}
	post := func(name, host string, h map[string]string, want int) webReq {
		return webReq{name: name, method: "POST", path: "/v1/completions", host: host, header: h, body: oneWord, want: want, engine: want == 200}
	}
	var cases []webReq
	for _, host := range []string{"evil.example", "evil.example:" + strconv.Itoa(port), "localhost.evil.example", "127.0.0.1.nip.io:" + strconv.Itoa(port)} {
		c := post("Host "+host, host, nil, 403)
		c.allowed = "--allow-host"
		cases = append(cases, c)
	}
	refusedOrigin := []webReq{
		post("text/plain POST from "+evil, "", from(evil, "Content-Type", "text/plain"), 403),
		post("POST from the null origin", "", from("null", "Content-Type", "text/plain"), 403),
		post("POST from "+mine+" over https", "", from("https://localhost:3000"), 403),
		{name: "preflight from " + evil, method: "OPTIONS", path: "/v1/completions", header: preflight(evil), want: 403},
		{name: "events from " + evil, method: "GET", path: "/v1/kvcache/events", header: from(evil), want: 403},
		{name: "snapshot from " + evil, method: "GET", path: "/v1/kvcache/snapshot", header: from(evil), want: 403},
		{name: "metrics from " + evil, method: "GET", path: "/metrics", header: from(evil), want: 403},
	}
	for _, c := range refusedOrigin {
		c.allowed = "--allow-origin"
		cases = append(cases, c)
	}
	for _, host := range []string{"localhost", "localhost:" + strconv.Itoa(port), "LocalHost:1", "127.0.0.1:" + strconv.Itoa(port), "127.0.0.1", "127.0.0.2:9", "[::1]:" + strconv.Itoa(port), "[::1]"} {
		cases = append(cases, post("Host "+host, host, plain, 200))
	}
	cases = append(cases,
		post("curl's text/plain POST without an Origin", "", plain, 200),
		post("text/plain POST from "+mine, "", from(mine, "Content-Type", "text/plain"), 200),
		post("POST from "+mine+" as browsers spell it", "localhost:"+strconv.Itoa(port), from("http://LOCALHOST:3000", "Content-Type", "application/json"), 200),
		webReq{name: "preflight from " + mine, method: "OPTIONS", path: "/v1/completions", header: preflight(mine), want: 204},
		webReq{name: "events from " + mine, method: "GET", path: "/v1/kvcache/events", header: from(mine), want: 200},
		webReq{name: "events without an Origin", method: "GET", path: "/v1/kvcache/events", want: 200},
		webReq{name: "snapshot from " + mine, method: "GET", path: "/v1/kvcache/snapshot", header: from(mine), want: 200},
		webReq{name: "metrics from " + mine, method: "GET", path: "/metrics", header: from(mine), want: 200},
		webReq{name: "health from " + mine, method: "GET", path: "/health", host: "[::1]:1", header: from(mine), want: 200},
	)
	checkGuarded(t, ts, e, s, "", cases)

	// The preflight's answer lets the page send what the SDKs send.
	resp, _ := send(t, ts, webReq{name: "preflight", method: "OPTIONS", path: "/v1/chat/completions", header: preflight(mine)})
	h := resp.Header
	for k, want := range map[string]string{
		"Access-Control-Allow-Origin":  mine,
		"Access-Control-Allow-Methods": "POST",
		"Access-Control-Allow-Headers": "Authorization",
		"Access-Control-Max-Age":       corsMaxAge,
	} {
		if !strings.Contains(h.Get(k), want) {
			t.Errorf("preflight: %s %q, want %q in it", k, h.Get(k), want)
		}
	}
	for _, want := range []string{"Content-Type", "x-stainless-os"} {
		if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
			t.Errorf("preflight: Access-Control-Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
		}
	}
	if v := strings.Join(h.Values("Vary"), ", "); !strings.Contains(v, "Access-Control-Request-Headers") {
		t.Errorf("preflight: Vary %q", v)
	}

	// The refusals show in /metrics, by reason.
	fams := scrape(t, ts.URL)
	if v := value(t, fams, "kvscope:http_requests_refused_total", "reason", "host"); v != 4 {
		t.Errorf("%v refused for their Host, want 4", v)
	}
	if v := value(t, fams, "kvscope:http_requests_refused_total", "reason", "origin"); v != float64(len(refusedOrigin)) {
		t.Errorf("%v refused for their Origin, want %d", v, len(refusedOrigin))
	}
}

// Must show 2 of issue 24: with an API key the Host and Origin rules hold
// on loopback; an allowed origin still needs the key (and can read the 401,
// which carries its CORS headers), and with it is served. "*" allows every
// origin, with a key only.
func TestGuardWithAPIKey(t *testing.T) {
	const key = "s3cret"
	ts, e, s := newTestServerFull(t, func(_ *engine.Config, c *Config) {
		c.APIKey, c.AllowedOrigins = key, []string{mine}
	})
	bearer := "Bearer " + key
	post := func(name, host string, h map[string]string, want int) webReq {
		return webReq{name: name, method: "POST", path: "/v1/completions", host: host, header: h, body: oneWord, want: want, engine: want == 200}
	}
	checkGuarded(t, ts, e, s, key, []webReq{
		func() webReq {
			c := post("Host evil.example with the key", "evil.example", map[string]string{"Authorization": bearer}, 403)
			c.allowed = "--allow-host"
			return c
		}(),
		func() webReq {
			c := post("POST from "+evil+" with the key", "", map[string]string{"Authorization": bearer, "Origin": evil, "Content-Type": "text/plain"}, 403)
			c.allowed = "--allow-origin"
			return c
		}(),
		post("POST from "+mine+" without the key", "", map[string]string{"Origin": mine}, 401),
		post("POST from "+mine+" with the key", "", map[string]string{"Origin": mine, "Authorization": bearer}, 200),
		post("POST with the key, no Origin", "[::1]:8080", map[string]string{"Authorization": bearer, "Content-Type": "text/plain"}, 200),
		{name: "preflight from " + mine + " (no key: browsers send none)", method: "OPTIONS", path: "/v1/completions",
			header: map[string]string{"Origin": mine, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}, want: 204},
	})

	ts2, e2, s2 := newTestServerFull(t, func(_ *engine.Config, c *Config) { c.APIKey, c.AllowedOrigins = key, []string{"*"} })
	checkGuarded(t, ts2, e2, s2, key, []webReq{
		post("POST from "+evil+" under * with the key", "", map[string]string{"Origin": evil, "Authorization": bearer}, 200),
		post("POST from "+evil+" under * without the key", "", map[string]string{"Origin": evil}, 401),
		func() webReq {
			c := post("Host evil.example under *", "evil.example", map[string]string{"Origin": evil, "Authorization": bearer}, 403)
			c.allowed = "--allow-host"
			return c
		}(),
	})
}

// TestGuardConfig: the allowed origins and hosts are checked when the
// server is made; "*" needs a key.
func TestGuardConfig(t *testing.T) {
	_, e, _ := newTestServerFull(t, nil)
	for _, c := range []struct {
		origins []string
		hosts   []string
		key     string
		want    string // "" for no error
	}{
		{origins: []string{"*"}, want: "needs an API key"},
		{origins: []string{"http://localhost:3000", "*"}, want: "needs an API key"},
		{origins: []string{"*"}, key: "k"},
		{origins: []string{"null"}, key: "k", want: "sandboxed"},
		{origins: []string{"localhost:3000"}, want: "scheme://host"},
		{origins: []string{"http://a.example/app"}, want: "scheme://host"},
		{origins: []string{""}, want: "scheme://host"},
		{origins: []string{"http://localhost:3000", "https://a.example", "chrome-extension://abcdefgh", "tauri://localhost"}},
		{hosts: []string{"kvscope.lan", "my-box", "192.168.1.5", "[fe80::1]"}},
		{hosts: []string{"kvscope.lan:8080"}, want: "without a port"},
		{hosts: []string{"http://kvscope.lan"}, want: "without a port"},
		{hosts: []string{""}, want: "without a port"},
	} {
		err := CheckOrigins(c.origins, c.key != "")
		if err == nil {
			err = CheckHosts(c.hosts)
		}
		_, newErr := New(Config{Engine: e, APIKey: c.key, AllowedOrigins: c.origins, AllowedHosts: c.hosts})
		if (err == nil) != (newErr == nil) {
			t.Errorf("origins %q hosts %q key %q: New says %v, the checks %v", c.origins, c.hosts, c.key, newErr, err)
		}
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("origins %q hosts %q key %q: %v, want %q", c.origins, c.hosts, c.key, err, c.want)
		}
		if c.want == "needs an API key" && !errors.Is(err, ErrWildcardNeedsKey) {
			t.Errorf("origins %q: %v does not wrap ErrWildcardNeedsKey", c.origins, err)
		}
	}
}

// TestNormOrigin: origins compare as browsers send them.
func TestNormOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:3000":      "http://localhost:3000",
		"HTTP://LocalHost:3000/":     "http://localhost:3000",
		"http://a.example:80":        "http://a.example",
		"https://a.example:443":      "https://a.example",
		"https://a.example:8443":     "https://a.example:8443",
		"http://[::1]:3000":          "http://[::1]:3000",
		"chrome-extension://abcdefg": "chrome-extension://abcdefg",
	} {
		if got, err := normOrigin(in); err != nil || got != want {
			t.Errorf("normOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "null", "NULL", "evil.example", "http://", "http://u:p@a.example", "http://a.example/x", "http://a.example?q", "http://a.example#f", "mailto:a@b"} {
		if got, err := normOrigin(in); err == nil {
			t.Errorf("normOrigin(%q) = %q, want an error", in, got)
		}
	}
}

// TestHostAllowed: the Host rule on connections to loopback and to other
// addresses, with and without a key (an address other than loopback is
// served only with one: CheckAddr), and with allowed hosts.
func TestHostAllowed(t *testing.T) {
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	lan := &net.TCPAddr{IP: net.IPv4(192, 168, 1, 5), Port: 8080}
	lo6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}
	for _, c := range []struct {
		local net.Addr // nil: the handler is used outside an http.Server
		key   bool
		hosts []string
		ok    []string
		no    []string
	}{
		{local: lo,
			ok: []string{"localhost", "localhost:1", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:8080", "127.255.0.1:9", "[::1]:8080", "[::1]", "::1", "[::ffff:127.0.0.1]:80"},
			no: []string{"", "evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", "localhost.", "192.168.1.5:8080", "0.0.0.0:8080", "[::]:8080", "2130706433"}},
		{local: lo6, ok: []string{"[::1]:8080", "localhost:8080", "127.0.0.1"}, no: []string{"evil.example"}},
		{local: lo, key: true, ok: []string{"localhost:8080"}, no: []string{"evil.example", "192.168.1.5:8080"}},
		{local: lan, ok: []string{"192.168.1.5:8080", "192.168.1.5", "localhost:8080"}, no: []string{"192.168.1.6:8080", "evil.example:8080", "kvscope.lan"}},
		{local: lan, key: true, ok: []string{"192.168.1.5:8080", "evil.example:8080", "kvscope.lan", "localhost"}},
		{local: lo, hosts: []string{"KVScope.lan", "10.0.0.2"}, ok: []string{"kvscope.lan", "kvscope.lan:8080", "10.0.0.2:1"}, no: []string{"a.kvscope.lan", "10.0.0.3"}},
		{local: nil, ok: []string{"localhost", "[::1]:1"}, no: []string{"evil.example", "192.168.1.5"}},
	} {
		hosts, err := hostSet(c.hosts)
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{hasKey: c.key, hosts: hosts}
		for _, list := range []struct {
			hosts []string
			want  bool
		}{{c.ok, true}, {c.no, false}} {
			for _, h := range list.hosts {
				r := httptest.NewRequest("GET", "/v1/models", nil)
				r.Host = h
				if c.local != nil {
					r = r.WithContext(contextWithLocal(r, c.local))
				}
				if _, got := s.hostAllowed(r); got != list.want {
					t.Errorf("Host %q on %v (key %v, hosts %q): allowed %v, want %v", h, c.local, c.key, c.hosts, got, list.want)
				}
			}
		}
	}
}

// contextWithLocal is r's context with local as the address it arrived
// at, as http.Server sets it.
func contextWithLocal(r *http.Request, local net.Addr) context.Context {
	return context.WithValue(r.Context(), http.LocalAddrContextKey, local)
}
