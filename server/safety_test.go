package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/engine"
)

func TestAPIKey(t *testing.T) {
	ts, _ := newTestServer(t, func(_ *engine.Config, c *Config) { c.APIKey = "s3cret" })
	get := func(path, key string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r map[string]any
		json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r
	}
	for _, key := range []string{"", "wrong", "s3cret2", "s3cre"} {
		for _, p := range []string{"/v1/models", "/metrics", "/v1/kvcache/snapshot", "/v1/nothing"} {
			status, r := get(p, key)
			if status != 401 {
				t.Errorf("GET %s with key %q: %d, want 401", p, key, status)
			}
			checkError(t, status, r, "API key")
		}
	}
	status, _ := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Hi"})
	if status != 401 {
		t.Errorf("POST without a key: %d", status)
	}
	if status, _ := get("/v1/models", "s3cret"); status != 200 {
		t.Errorf("with the key: %d", status)
	}
	if status, _ := get("/health", ""); status != 200 {
		t.Errorf("/health without a key: %d", status)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	ts, e := newTestServer(t, func(_ *engine.Config, c *Config) { c.Limits.MaxConcurrent = 1 })
	// The first request holds its slot while the paused engine holds it.
	resp := pausedStream(t, ts.URL, e, `{"prompt": "Once upon a time", "max_tokens": 400, "stream": true}`)
	r2, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Hi", "max_tokens": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(r2.Body).Decode(&body)
	r2.Body.Close()
	checkError(t, r2.StatusCode, body, "its limit")
	if r2.StatusCode != 429 || r2.Header.Get("Retry-After") == "" {
		t.Errorf("status %d, Retry-After %q; want 429 with Retry-After", r2.StatusCode, r2.Header.Get("Retry-After"))
	}
	resp.Body.Close()
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, e, func(n int) bool { return n == 0 })
	// Once the first has gone, a request is served again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 2})
		if status == 200 {
			break
		}
		if status != 429 || time.Now().After(deadline) {
			t.Fatalf("after the first request: %d %v", status, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHangUpFreesBlocks: a client that hangs up mid-stream cancels its
// request; its blocks leave the used count at once.
func TestHangUpFreesBlocks(t *testing.T) {
	ts, e := newTestServer(t, nil)
	base := e.Snapshot().Cache.Metrics.UsedBlocks
	// The paused engine holds the request, with its blocks, until the
	// client hangs up.
	resp := pausedStream(t, ts.URL, e, `{"prompt": "Once upon a time", "max_tokens": 500, "stream": true}`)
	step(t, e, 3)
	if n := e.Snapshot().Cache.Metrics.UsedBlocks; n <= base {
		t.Fatalf("used blocks %d while streaming, %d before", n, base)
	}
	resp.Body.Close()
	t0 := time.Now()
	if n := waitUsed(t, e, func(n int) bool { return n == base }); n != base {
		t.Fatalf("used blocks %d after the client left, %d before", n, base)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the blocks came back %v after the hang-up", d)
	}
	if _, err := e.WaitFor(t.Context(), func(s *engine.Snapshot) bool { return len(s.Requests) == 0 }); err != nil {
		t.Errorf("requests still live: %v", err)
	}
}

// TestLoad: 32 streamed clients at once, half of which hang up early,
// beside malformed JSON, a 10 MB body, max_tokens of 10^12 and n of
// 100,000. Every bad request gets a 4xx JSON error, every client that
// stays gets its whole stream, the server stays up, and the KV usage ends
// where it started.
func TestLoad(t *testing.T) {
	ts, e := newTestServer(t, nil)
	start := e.Snapshot().Cache.Metrics.UsedBlocks
	client := &http.Client{Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt": "Once upon a time %d", "max_tokens": 48, "stream": true, "stream_options": {"include_usage": true}, "seed": %d}`, i, i)
			if i%2 == 0 {
				body = fmt.Sprintf(`{"messages": [{"role": "user", "content": "Tell me story %d"}], "max_tokens": 48, "stream": true}`, i)
			}
			path := "/v1/completions"
			if i%2 == 0 {
				path = "/v1/chat/completions"
			}
			resp, err := client.Post(ts.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				errs <- fmt.Errorf("client %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				errs <- fmt.Errorf("client %d: %d %s", i, resp.StatusCode, b)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			events := 0
			hangUp := i%4 < 2 // half of them, of both kinds
			for sc.Scan() {
				d, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				events++
				if hangUp && events == 3 {
					return // the deferred Close hangs up
				}
				if d == "[DONE]" {
					return
				}
				if !json.Valid([]byte(d)) {
					errs <- fmt.Errorf("client %d: chunk %q is not JSON", i, d)
					return
				}
			}
			errs <- fmt.Errorf("client %d: the stream ended without [DONE] after %d events (%v)", i, events, sc.Err())
		}()
	}
	bad := []struct {
		body []byte
		want int
	}{
		{[]byte(`{"prompt": "Hi", "max_tokens": 5`), 400},
		{[]byte(`{"prompt": [1, 2, "x"]}`), 400},
		{append(append([]byte(`{"prompt": "`), bytes.Repeat([]byte("a"), 10<<20)...), `"}`...), 413},
		{[]byte(`{"prompt": "Hi", "max_tokens": 1000000000000}`), 400},
		{[]byte(`{"prompt": "Hi", "n": 100000}`), 400},
		{[]byte(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1000000000000}`), 400},
		{[]byte(`{"messages": [{"role": "user", "content": "Hi"}], "n": 100000}`), 400},
		{[]byte(`{"messages": {"role": "user"}}`), 400},
	}
	for i, b := range bad {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/v1/completions"
			if bytes.Contains(b.body, []byte("messages")) {
				path = "/v1/chat/completions"
			}
			resp, err := client.Post(ts.URL+path, "application/json", bytes.NewReader(b.body))
			if err != nil {
				errs <- fmt.Errorf("bad request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			var r struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Error == nil || r.Error.Message == "" || r.Error.Type == "" {
				errs <- fmt.Errorf("bad request %d: status %d, not an error object (%v)", i, resp.StatusCode, err)
			}
			if resp.StatusCode != b.want {
				errs <- fmt.Errorf("bad request %d: status %d, want %d", i, resp.StatusCode, b.want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if status, _ := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Still there?", "max_tokens": 2}); status != 200 {
		t.Errorf("after the load: %d", status)
	}
	if n := waitUsed(t, e, func(n int) bool { return n == start }); n != start {
		t.Errorf("used blocks %d after the load, %d before", n, start)
	}
	fams := scrape(t, ts.URL)
	if v := value(t, fams, "kvscope:kv_cache_usage_perc"); v != 0 {
		t.Errorf("usage %v after the load", v)
	}
	if v := value(t, fams, "kvscope:request_success_total", "finished_reason", "abort"); v < 1 {
		t.Errorf("%v choices aborted, want the hung-up ones", v)
	}
}
