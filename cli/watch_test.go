package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvscope/vllm/vllmtest"
)

// stored is a BlockStored event whose token i of block h is h*100+i.
func stored(hashes []uint64, parent any, blockSize int) any {
	return vllmtest.Stored(hashes, parent, blockSize, func(h uint64, i int) int { return int(h)*100 + i })
}

// fillPrompts publishes three prompts sharing a two-block system prompt
// (blocks 1, 2), then an eviction of one prompt's last block: 6 blocks of
// 4 tokens stored, 1 removed, 5 cached in one tree (root 1).
func fillPrompts(p *vllmtest.Publisher) {
	p.Publish(stored([]uint64{1, 2, 3}, nil, 4))
	p.Publish(stored([]uint64{4, 5}, uint64(2), 4), stored([]uint64{6}, uint64(2), 4))
	p.Publish(vllmtest.Removed(6))
}

func vllmMetrics(t testing.TB, running int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
`, running)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func TestWatchOnce(t *testing.T) {
	p := vllmtest.NewPublisher(t)
	fillPrompts(p)
	met := vllmMetrics(t, 3)
	var out, errb bytes.Buffer
	if code := Main([]string{"watch", "--vllm", p.PubEndpoint, "--replay", p.ReplayEndpoint, "--metrics", met, "--once"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"cached blocks: 5\n", "cached tokens: 20\n", "chains: 1\n", "stored blocks: 6\n", "evicted blocks: 1\n", "batches: 3\n",
		"kv cache usage: 25.0%\n", "prefix hit rate: 25.0%\n", "preemptions: 2\n", "requests running: 3\n", "requests waiting: 1\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(out.String(), "cached blocks: 5\n") {
		t.Errorf("the first line is not the cached blocks:\n%s", out.String())
	}
}

// Two instances: the unprefixed lines are the total; each instance's
// follow, named.
func TestWatchOnceTwoInstances(t *testing.T) {
	a, b := vllmtest.NewPublisher(t), vllmtest.NewPublisher(t)
	fillPrompts(a)
	b.Publish(stored([]uint64{1, 2}, nil, 4)) // the same system prompt on the other instance
	b.Publish(stored([]uint64{7}, uint64(2), 4))
	var out, errb bytes.Buffer
	args := []string{"watch", "--vllm", a.PubEndpoint, "--vllm", b.PubEndpoint, "--replay", a.ReplayEndpoint, "--replay", b.ReplayEndpoint,
		"--metrics", vllmMetrics(t, 3), "--metrics", vllmMetrics(t, 4), "--once"}
	if code := Main(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"cached blocks: 8\n", "distinct blocks: 6\n", "instances: 2\n", "requests running: 7\n",
		a.PubEndpoint + ": cached blocks: 5\n", b.PubEndpoint + ": cached blocks: 3\n", b.PubEndpoint + ": requests running: 4\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

// (syncBuffer is chat_test.go's.)

// Live: the replay's figures show first, then those of batches published
// while watch runs, and the eviction is counted in the refresh after it.
func TestWatchLive(t *testing.T) {
	p := vllmtest.NewPublisher(t)
	fillPrompts(p)
	o, err := parseWatch([]string{"--vllm", p.PubEndpoint, "--replay", p.ReplayEndpoint, "--metrics", vllmMetrics(t, 3), "--every", "50ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- watch(ctx, o, &out) }()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(out.String(), want) {
				return
			}
		}
		t.Fatalf("no %q in\n%s", want, out.String())
	}
	waitFor("cached blocks: 5\n")
	p.WaitSubscribed()
	p.Publish(stored([]uint64{8, 9}, uint64(3), 4))
	waitFor("cached blocks: 7\n")
	p.Publish(vllmtest.Removed(8, 9))
	waitFor("evicted since last refresh: 2\n")
	waitFor("prefix hit rate (last 10s): 0.0%\n") // the counters did not move
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
	if !strings.Contains(out.String(), "cached blocks: 5\n") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestWatchRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"watch"}, "no vllm endpoint given"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--once"}, "--once reads the replay buffer"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--replay", "tcp://a:1", "--replay", "tcp://a:2"}, "2 --replay for 1 --vllm"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--metrics", "ftp://x"}, "want an http:// or https:// url"},
		{[]string{"watch", "--vllm", "127.0.0.1:5557"}, "is not transport://address"},
		{[]string{"watch", "--vllm", "tcp://a:1", "--vllm", "tcp://a:1"}, "given twice"},
		{[]string{"watch", "--vllm", "tcp://a:1", "--every", "0s"}, "--every 0s"},
		{[]string{"watch", "--vllm", "tcp://a:1", "stray"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		code := Main(tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(strings.ToLower(lines[0]), strings.ToLower(tc.want)) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// A replay endpoint where nothing listens fails with one line, in time.
func TestWatchOnceUnreachable(t *testing.T) {
	var out, errb bytes.Buffer
	start := time.Now()
	code := Main([]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--replay", "tcp://127.0.0.1:1", "--once", "--timeout", "3s"}, &out, &errb)
	if code != 1 || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 || !strings.Contains(errb.String(), "127.0.0.1:1") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %v", d)
	}
}
