package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvscope/internal/testshared"
)

// lockedBuffer is a bytes.Buffer safe for a command writing and a test
// reading at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeCommand starts kvscope serve on a free port, sends a request,
// then SIGTERM while a stream is in flight (slowed by --step-delay, the
// Teaching tab's slow motion, so that it is): the stream ends with its last
// chunk and [DONE] once the grace period is over, and serve exits 0.
func TestServeCommand(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	sigs := make(chan os.Signal, 1)
	saved := serveStop
	serveStop = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	defer func() { serveStop = saved }()

	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main([]string{"serve", "-m", m, "--addr", "127.0.0.1:0", "-c", "512", "--shutdown-timeout", "300ms", "--max-n", "4", "--step-delay", "20ms",
			"--allow-origin", "http://app.example,https://ui.example", "--allow-origin", "http://localhost:3000", "--allow-host", "kvscope.lan"}, &bytes.Buffer{}, &stderr)
	}()
	addr := ""
	re := regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if mm := re.FindStringSubmatch(stderr.String()); mm != nil {
			addr = mm[1]
		}
		select {
		case c := <-code:
			t.Fatalf("serve exited %d: %s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s", stderr.String())
		}
	}
	resp, err := http.Post(addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if resp.StatusCode != 200 || r["model"] != "stories260K" {
		t.Fatalf("%d %v", resp.StatusCode, r)
	}
	// --max-n is in force.
	resp, err = http.Post(addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Hi", "n": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("n = 5 over --max-n 4: %d", resp.StatusCode)
	}

	// --allow-origin and --allow-host are in force; other origins and
	// hosts are refused.
	for _, c := range []struct {
		origin, host string
		want         int
	}{
		{"", "", 200},
		{"http://app.example", "", 200},
		{"https://ui.example", "", 200},
		{"http://localhost:3000", "", 200},
		{"", "kvscope.lan:8080", 200},
		{"http://evil.example", "", 403},
		{"http://app.example:8080", "", 403},
		{"", "evil.example", 403},
		{"http://app.example", "evil.example", 403},
	} {
		req, _ := http.NewRequest("POST", addr+"/v1/completions", strings.NewReader(`{"prompt": "Hi", "max_tokens": 1}`))
		req.Header.Set("Content-Type", "text/plain")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want || resp.Header.Get("Access-Control-Allow-Origin") != map[bool]string{true: c.origin}[c.want == 200] {
			t.Errorf("Origin %q Host %q: %d, Access-Control-Allow-Origin %q; want %d", c.origin, c.host, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), c.want)
		}
	}
	if !strings.Contains(stderr.String(), "web pages from http://app.example, https://ui.example, http://localhost:3000") {
		t.Errorf("the start line does not name the origins allowed: %s", stderr.String())
	}

	// A long stream, then SIGTERM. With --step-delay its 500 tokens take
	// 10 s, far past the grace period, so the shutdown cuts it.
	resp, err = http.Post(addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 500, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Scan()
	sigs <- syscall.SIGTERM
	var last []string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = append(last, d)
		}
	}
	if n := len(last); n < 2 || last[n-1] != "[DONE]" || !strings.Contains(last[n-2], `"finish_reason":"abort"`) {
		t.Errorf("the stream cut by the shutdown ends with %q", last[max(0, len(last)-2):])
	}
	select {
	case c := <-code:
		if c != 0 || !strings.Contains(stderr.String(), "stopped after") {
			t.Errorf("serve exited %d: %s", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestServeRefuses: an address reachable from other machines needs an API
// key; bad flags exit 2 with one line.
func TestServeRefuses(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	t.Setenv(apiKeyEnv, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "-m", m, "--addr", "0.0.0.0:0"}, "give an API key"},
		{[]string{"serve", "-m", m, "--addr", ":8080"}, "give an API key"},
		{[]string{"serve", "-m", m, "--addr", "example.com:80"}, "give an API key"},
		{[]string{"serve", "-m", m, "--addr", "nonsense"}, "want host:port"},
		{[]string{"serve", "-m", m, "--allow-origin", "*"}, "give an API key too"},
		{[]string{"serve", "-m", m, "--allow-origin", "http://a.example,*"}, "give an API key too"},
		{[]string{"serve", "-m", m, "--allow-origin", "localhost:3000"}, "--allow-origin: the origin \"localhost:3000\" is not scheme://host"},
		{[]string{"serve", "-m", m, "--allow-origin", "null", "--api-key", "k"}, "--allow-origin: the origin \"null\""},
		{[]string{"serve", "-m", m, "--allow-origin", ""}, "flag -allow-origin"},
		{[]string{"serve", "-m", m, "--allow-host", "kvscope.lan:8080"}, "--allow-host: the host \"kvscope.lan:8080\""},
		{[]string{"serve", "-m", m, "--allow-host", ","}, "flag -allow-host"},
		{[]string{"serve", "-m", m, "--max-n", "0"}, "flag -max-n"},
		{[]string{"serve", "-m", m, "--max-body", "-1"}, "flag -max-body"},
	} {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args[1:], code, errOut, c.want)
		}
	}
	if code, _, errOut := run(t, "serve", "--addr", "127.0.0.1:0"); code != 1 || !strings.Contains(errOut, "no model given") {
		t.Errorf("no model: exit %d, %q", code, errOut)
	}
	for _, a := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1"} {
		if err := checkAddr(a, false); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	if err := checkAddr("0.0.0.0:1", true); err != nil {
		t.Errorf("with a key: %v", err)
	}
	if err := checkAllowed([]string{"*"}, []string{"kvscope.lan", "192.168.1.5"}, true); err != nil {
		t.Errorf("'*' with a key: %v", err)
	}
}
