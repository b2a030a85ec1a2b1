package metrics

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one scrape's figures.
type Sample struct {
	Time time.Time
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0..1,
	// averaged over engines.
	KVCacheUsage float64
	// PrefixCacheQueries and PrefixCacheHits are counters of prompt tokens
	// looked up in the prefix cache and found there.
	PrefixCacheQueries float64
	PrefixCacheHits    float64
	// Preemptions is a counter of preempted requests.
	Preemptions float64
	// Running and Waiting are the requests now running and waiting.
	Running float64
	Waiting float64
	// Engines is the number of engines (series) that reported usage.
	Engines int
	// Missing names the figures the page lacked (left at 0).
	Missing []string
}

// HitRate returns hits/queries since the server started, or 0 where there
// were no queries.
func (s Sample) HitRate() float64 {
	if s.PrefixCacheQueries <= 0 {
		return 0
	}
	return s.PrefixCacheHits / s.PrefixCacheQueries
}

type figure struct {
	name  string   // for Missing
	names []string // metric family names, preferred first
	set   func(*Sample, float64)
	mean  bool
}

var figures = []figure{
	{"kv_cache_usage_perc", []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		func(s *Sample, v float64) { s.KVCacheUsage = v }, true},
	{"prefix_cache_queries", []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries",
		"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"},
		func(s *Sample, v float64) { s.PrefixCacheQueries = v }, false},
	{"prefix_cache_hits", []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits",
		"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"},
		func(s *Sample, v float64) { s.PrefixCacheHits = v }, false},
	{"num_preemptions", []string{"vllm:num_preemptions_total", "vllm:num_preemptions"},
		func(s *Sample, v float64) { s.Preemptions = v }, false},
	{"num_requests_running", []string{"vllm:num_requests_running"},
		func(s *Sample, v float64) { s.Running = v }, false},
	{"num_requests_waiting", []string{"vllm:num_requests_waiting"},
		func(s *Sample, v float64) { s.Waiting = v }, false},
}

// Parse reads a text exposition (Prometheus format 0.0.4). Where model is
// not "", only series whose model_name label is model count.
func Parse(r io.Reader, model string) (Sample, error) {
	p := expfmt.NewTextParser(modelValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("metrics: %w", err)
	}
	var s Sample
	for _, f := range figures {
		var fam *dto.MetricFamily
		for _, n := range f.names {
			if fam = fams[n]; fam != nil {
				break
			}
		}
		sum, n := 0.0, 0
		if fam != nil {
			for _, m := range fam.GetMetric() {
				if model != "" && label(m, "model_name") != model {
					continue
				}
				v, ok := value(m)
				if !ok {
					continue
				}
				sum += v
				n++
			}
		}
		if n == 0 {
			s.Missing = append(s.Missing, f.name)
			continue
		}
		if f.mean {
			s.Engines = n
			sum /= float64(n)
		}
		f.set(&s, sum)
	}
	return s, nil
}

var modelValidation = model.UTF8Validation

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Scrape fetches url (a vLLM server's /metrics) and parses it; see Parse.
// A nil client means http.DefaultClient.
func Scrape(ctx context.Context, client *http.Client, url, model string) (Sample, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("metrics: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	t := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return Sample{}, fmt.Errorf("metrics: GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "text/plain" && mt != "application/openmetrics-text" {
			return Sample{}, fmt.Errorf("metrics: GET %s: content type %q, want the Prometheus text format", url, ct)
		}
	}
	s, err := Parse(io.LimitReader(resp.Body, 64<<20), model)
	if err != nil {
		return Sample{}, fmt.Errorf("%w (from %s)", err, url)
	}
	s.Time = t
	return s, nil
}

// Poll scrapes url every interval (0 means 1 s) into ts until ctx ends,
// giving each failed scrape's error to onErr (nil ignores them). It returns
// ctx's error.
func Poll(ctx context.Context, client *http.Client, url, model string, interval time.Duration, ts *Series, onErr func(error)) error {
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s, err := Scrape(ctx, client, url, model)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			if onErr != nil {
				onErr(err)
			}
		default:
			ts.Add(s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
