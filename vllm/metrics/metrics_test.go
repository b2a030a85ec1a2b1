package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// exposition is a /metrics page as vLLM's v1 engine (prometheus_client)
// writes it: counters with _total and _created, two engines, a histogram
// and other figures that Parse skips.
func exposition(queries, hits, preempt float64) string {
	return fmt.Sprintf(`# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-0.6B"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} %g
vllm:prefix_cache_queries_total{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.7e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} %g
vllm:prefix_cache_hits_total{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-0.6B"} %g
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-0.6B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-0.6B"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.42
`, queries, hits, preempt)
}

// An older (v0) page: gpu_ names, untyped samples and no engine label.
const oldExposition = `vllm:gpu_cache_usage_perc{model_name="m"} 0.75
vllm:gpu_prefix_cache_queries_total{model_name="m"} 10
vllm:gpu_prefix_cache_hits_total{model_name="m"} 4
vllm:num_preemptions_total{model_name="m"} 2
vllm:num_requests_running{model_name="m"} 1
vllm:num_requests_waiting{model_name="m"} 5
vllm:num_requests_running{model_name="other"} 100
`

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		model string
		want  Sample
	}{
		{"v1 page, two engines", exposition(1000, 250, 3), "",
			Sample{KVCacheUsage: 0.375, PrefixCacheQueries: 1000, PrefixCacheHits: 250, Preemptions: 3, Running: 5, Waiting: 1, Engines: 2}},
		{"v1 page, model filter", exposition(1000, 250, 3), "Qwen/Qwen3-0.6B",
			Sample{KVCacheUsage: 0.375, PrefixCacheQueries: 1000, PrefixCacheHits: 250, Preemptions: 3, Running: 5, Waiting: 1, Engines: 2}},
		{"older names", oldExposition, "m",
			Sample{KVCacheUsage: 0.75, PrefixCacheQueries: 10, PrefixCacheHits: 4, Preemptions: 2, Running: 1, Waiting: 5, Engines: 1}},
		{"another model", oldExposition, "other",
			Sample{Running: 100, Missing: []string{"kv_cache_usage_perc", "prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "num_requests_waiting"}}},
		{"not vLLM", "# TYPE up gauge\nup 1\n", "",
			Sample{Missing: []string{"kv_cache_usage_perc", "prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "num_requests_running", "num_requests_waiting"}}},
		{"counters named without _total", "vllm:prefix_cache_queries 8\nvllm:prefix_cache_hits 2\nvllm:num_preemptions 1\n", "",
			Sample{PrefixCacheQueries: 8, PrefixCacheHits: 2, Preemptions: 1, Missing: []string{"kv_cache_usage_perc", "num_requests_running", "num_requests_waiting"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.text), tt.model)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := Parse(strings.NewReader("vllm:num_requests_running{engine=\"0\" 1\n"), ""); err == nil {
		t.Error("a broken page parsed")
	}
	if s, _ := Parse(strings.NewReader(exposition(1000, 250, 0)), ""); s.HitRate() != 0.25 {
		t.Errorf("hit rate %v", s.HitRate())
	}
}

func TestScrape(t *testing.T) {
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		i := n.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, exposition(float64(100*i), float64(50*i), 0))
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine dead", http.StatusInternalServerError)
	})
	mux.HandleFunc("/proto", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily")
		w.Write([]byte{1, 2, 3})
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "<html>not metrics{</html>\n")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	s, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	if s.PrefixCacheQueries != 100 || s.KVCacheUsage != 0.375 || s.Time.IsZero() || len(s.Missing) != 0 {
		t.Errorf("sample %+v", s)
	}
	for _, tt := range []struct{ path, want string }{
		{"/broken", "500 Internal Server Error: engine dead"},
		{"/proto", "content type"},
		{"/garbage", "/garbage"},
		{"/nothing", "404"},
	} {
		if _, err := Scrape(ctx, srv.Client(), srv.URL+tt.path, ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.path, err, tt.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Scrape(cctx, srv.Client(), srv.URL+"/metrics", ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled scrape: %v", err)
	}

	// Poll fills a series until cancelled.
	ts := NewSeries(10)
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Poll(pctx, srv.Client(), srv.URL+"/metrics", "", 5*time.Millisecond, ts, nil) }()
	for ts.Len() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	pcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Poll returned %v", err)
	}
	if r := ts.HitRate(0); r != 0.5 {
		t.Errorf("hit rate over the series %v, want 0.5", r)
	}
}

func TestSeries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(sec int, q, h, p float64) Sample {
		return Sample{Time: t0.Add(time.Duration(sec) * time.Second), PrefixCacheQueries: q, PrefixCacheHits: h, Preemptions: p}
	}
	tests := []struct {
		name     string
		samples  []Sample
		window   time.Duration
		hitRate  float64
		preempts float64 // per second
	}{
		{"empty", nil, 0, 0, 0},
		{"one sample", []Sample{at(0, 10, 5, 0)}, 0, 0, 0},
		{"steady", []Sample{at(0, 0, 0, 0), at(10, 100, 25, 5), at(20, 200, 50, 10)}, 0, 0.25, 0.5},
		{"window", []Sample{at(0, 0, 0, 0), at(10, 100, 0, 0), at(20, 200, 100, 10)}, 10 * time.Second, 1, 1},
		{"counter reset", []Sample{at(0, 500, 500, 50), at(10, 10, 0, 0), at(20, 110, 50, 2)}, 0, 0.5, 0.2},
		{"no queries", []Sample{at(0, 7, 1, 1), at(10, 7, 1, 1)}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := NewSeries(0)
			for _, s := range tt.samples {
				ts.Add(s)
			}
			if got := ts.HitRate(tt.window); got != tt.hitRate {
				t.Errorf("HitRate %v, want %v", got, tt.hitRate)
			}
			if got := ts.Rate(tt.window, Preemptions); got != tt.preempts {
				t.Errorf("preemptions/s %v, want %v", got, tt.preempts)
			}
		})
	}
	ts := NewSeries(2)
	for i := range 5 {
		ts.Add(at(i, float64(i), 0, 0))
	}
	if s := ts.Samples(); len(s) != 2 || s[0].PrefixCacheQueries != 3 {
		t.Errorf("kept %+v", s)
	}
	if last, ok := ts.Last(); !ok || last.PrefixCacheQueries != 4 {
		t.Errorf("last %+v", last)
	}
}

func ExampleParse() {
	page := `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 2000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1500
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2
`
	s, err := Parse(strings.NewReader(page), "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("usage %.0f%%, prefix hits %.0f%%, %v running, %v waiting\n", 100*s.KVCacheUsage, 100*s.HitRate(), s.Running, s.Waiting)
	// Output: usage 42%, prefix hits 75%, 4 running, 2 waiting
}
