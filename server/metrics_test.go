package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"kvscope/engine"
)

// scrape reads /metrics and parses it with expfmt (failing the test if it
// does not parse).
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value is the value of a metric family's series whose labels include
// labels (name, value pairs).
func value(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no series of %s with labels %v", name, labels)
	return 0
}

func TestMetrics(t *testing.T) {
	ts, e := newTestServer(t, nil)
	before := scrape(t, ts.URL)
	for _, name := range []string{
		"kvscope:kv_cache_usage_perc", "kvscope:prefix_cache_queries_total", "kvscope:prefix_cache_hits_total",
		"kvscope:num_preemptions_total", "kvscope:num_requests_running", "kvscope:num_requests_waiting",
		"kvscope:prompt_tokens_total", "kvscope:prompt_tokens_cached_total", "kvscope:generation_tokens_total",
		"kvscope:time_to_first_token_seconds", "kvscope:inter_token_latency_seconds", "kvscope:e2e_request_latency_seconds",
		"kvscope:kv_cache_free_blocks", "kvscope:kv_cache_cached_blocks", "kvscope:kv_cache_swapped_blocks",
		"kvscope:kv_cache_internal_fragmentation_perc", "kvscope:kv_cache_external_fragmentation_perc",
		"kvscope:kv_cache_evictions_total", "kvscope:kv_cache_bytes", "kvscope:kv_cache_used_bytes",
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if v := value(t, before, "kvscope:kv_cache_usage_perc"); v != 0 {
		t.Fatalf("usage %v before any request", v)
	}
	total := value(t, before, "kvscope:kv_cache_total_blocks")
	if k := value(t, before, "kvscope:kv_cache_bytes", "tensor", "k", "precision", "f16"); k <= 0 || k != value(t, before, "kvscope:kv_cache_bytes", "tensor", "v", "precision", "f16") {
		t.Errorf("K bytes %v (f16 K and V take the same room)", k)
	}
	if block := value(t, before, "kvscope:kv_cache_block_bytes"); 2*value(t, before, "kvscope:kv_cache_bytes", "tensor", "k")/total != block {
		t.Errorf("K and V bytes do not add up to %v a block", block)
	}

	// A long streamed request: usage rises while it runs. The engine
	// generates far faster than the test reads, so it is paused and
	// stepped: the request is running, holding blocks, when /metrics is
	// read.
	resp := pausedStream(t, ts.URL, e, `{"prompt": "Once upon a time", "max_tokens": 300, "stream": true}`)
	step(t, e, 3) // the prompt, then two tokens
	during := scrape(t, ts.URL)
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	if v := value(t, during, "kvscope:kv_cache_usage_perc"); v <= 0 || v > 1 {
		t.Errorf("usage %v during a long request, want above 0", v)
	}
	if v := value(t, during, "kvscope:num_requests_running") + value(t, during, "kvscope:num_requests_waiting"); v != 1 {
		t.Errorf("%v requests running or waiting, want 1", v)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	resp.Body.Close()
	waitUsed(t, e, func(n int) bool { return n == 0 })
	after := scrape(t, ts.URL)
	if v := value(t, after, "kvscope:kv_cache_usage_perc"); v != 0 {
		t.Errorf("usage %v after the request, want 0", v)
	}
	if v := value(t, after, "kvscope:kv_cache_cached_blocks"); v == 0 {
		t.Errorf("no cached blocks after a request")
	}
	if gen := value(t, after, "kvscope:generation_tokens_total"); gen < 1 || gen > 300 {
		t.Errorf("generation tokens %v", gen)
	}
	if p := value(t, after, "kvscope:prompt_tokens_total"); p < 2 {
		t.Errorf("prompt tokens %v", p)
	}
	for _, h := range []string{"kvscope:time_to_first_token_seconds", "kvscope:e2e_request_latency_seconds"} {
		if n := value(t, after, h); n != 1 {
			t.Errorf("%s has %v observations, want 1", h, n)
		}
	}
	if n := value(t, after, "kvscope:inter_token_latency_seconds"); n < 1 {
		t.Errorf("inter-token latency has %v observations", n)
	}
	if q := value(t, after, "kvscope:prefix_cache_queries_total"); q < 2 {
		t.Errorf("prefix cache queries %v", q)
	}
}

// TestMetricsEvictionsByPolicy: a pool too small for two prompts evicts
// the first one's cached blocks, counted under the policy in force.
func TestMetricsEvictionsByPolicy(t *testing.T) {
	ts, e := newTestServer(t, func(c *engine.Config, _ *Config) {
		c.Cache.BlockSize = 16
		c.Cache.Budget = 0
		c.Sched.MaxSeqs = 1
	})
	total := e.Snapshot().Cache.Metrics.TotalBlocks
	// Fill the pool with cached blocks, then ask for all of it again.
	for i := range 3 {
		prompt := strings.Repeat(string(rune('a'+i))+" story. ", 60)
		if status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4}); status != 200 {
			t.Fatalf("%d %v", status, r)
		}
	}
	// The engine publishes its last steps' snapshot a little later.
	var fams map[string]*dto.MetricFamily
	var ev float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		fams = scrape(t, ts.URL)
		ev = value(t, fams, "kvscope:kv_cache_evictions_total", "policy", "lru")
		if m := e.Snapshot().Cache.Metrics; ev > 0 && float64(m.Evictions) == ev {
			break
		}
	}
	if m := e.Snapshot().Cache.Metrics; ev == 0 || float64(m.Evictions) != ev {
		t.Errorf("lru evictions %v, the cache counts %d (pool %d blocks)", ev, m.Evictions, total)
	}
	if v := value(t, fams, "kvscope:kv_cache_evictions_total", "policy", "fifo"); v != 0 {
		t.Errorf("fifo evictions %v", v)
	}
}

func TestSnapshotAndEvents(t *testing.T) {
	ts, _ := newTestServer(t, nil)
	if status, r := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "Once upon a time there", "max_tokens": 3}); status != 200 {
		t.Fatalf("%d %v", status, r)
	}
	resp, err := http.Get(ts.URL + "/v1/kvcache/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		SchemaVersion int               `json:"schema_version"`
		Settings      map[string]string `json:"settings"`
		Snapshot      engine.Snapshot   `json:"snapshot"`
	}
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil || snap.SchemaVersion != SnapshotSchemaVersion {
		t.Fatalf("snapshot: %v, schema %d", err, snap.SchemaVersion)
	}
	if snap.Settings["k"] != "f16" || snap.Settings["eviction"] != "lru" {
		t.Errorf("settings %v", snap.Settings)
	}
	if snap.Snapshot.Cache == nil || len(snap.Snapshot.Cache.Blocks) != snap.Snapshot.Cache.Metrics.TotalBlocks || snap.Snapshot.Context != testContext {
		t.Errorf("snapshot %+v", snap.Snapshot)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/kvcache/events?since=0", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	// The first request's events are there, named "API: …"; a second
	// request's events follow while the stream is open.
	go func() {
		if r, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Lily had a dog", "max_tokens": 2}`)); err == nil {
			r.Body.Close()
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var last uint64
	seen := map[string]bool{}
	for sc.Scan() && !(seen["API: Once upon a time there"] && seen["API: Lily had a dog"]) {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev engine.Event
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if ev.ID <= last {
			t.Errorf("event id %d after %d", ev.ID, last)
		}
		last = ev.ID
		for _, l := range []string{"API: Once upon a time there", "API: Lily had a dog"} {
			if ev.Kind == "submit" && strings.Contains(ev.Text, "("+l+")") {
				seen[l] = true
			}
		}
	}
	if !seen["API: Once upon a time there"] || !seen["API: Lily had a dog"] {
		t.Errorf("submit events seen: %v", seen)
	}
	resp2, _ := http.Get(ts.URL + "/v1/kvcache/events?since=x")
	resp2.Body.Close()
	if resp2.StatusCode != 400 {
		t.Errorf("since=x: %d", resp2.StatusCode)
	}
}
