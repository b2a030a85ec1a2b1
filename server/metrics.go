package server

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
)

// prefix starts every metric name, as "vllm:" starts vLLM's.
const prefix = "kvscope:"

// Buckets of vLLM's latency histograms (seconds).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics are the server's Prometheus metrics: the request counters and
// histograms it observes, and the engine's cache read from its snapshot at
// each scrape.
type metrics struct {
	reg *prometheus.Registry

	promptTokens, cachedTokens, genTokens prometheus.Counter
	finished, refused                     *prometheus.CounterVec
	ttft, itl, e2e                        prometheus.Histogram
}

func newMetrics(e *engine.Engine) (*metrics, error) {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + name, Help: help})
	}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: prefix + name, Help: help, Buckets: b})
	}
	m.promptTokens = counter("prompt_tokens_total", "Prompt tokens of the requests served.")
	m.cachedTokens = counter("prompt_tokens_cached_total", "Of them, prompt tokens served from the prefix cache.")
	m.genTokens = counter("generation_tokens_total", "Tokens generated for the requests served.")
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "request_success_total", Help: "Choices finished, by finish reason."}, []string{"finished_reason"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "http_requests_refused_total", Help: "Requests refused for their Host or Origin header (web pages), by reason."}, []string{"reason"})
	m.ttft = hist("time_to_first_token_seconds", "Time from a request's arrival to its first generated token.", ttftBuckets)
	m.itl = hist("inter_token_latency_seconds", "Time between successive tokens of one choice.", itlBuckets)
	m.e2e = hist("e2e_request_latency_seconds", "Time from a request's arrival to its end.", e2eBuckets)
	for _, c := range []prometheus.Collector{
		m.promptTokens, m.cachedTokens, m.genTokens, m.finished, m.refused, m.ttft, m.itl, m.e2e,
		newCacheCollector(e),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// cacheCollector reports the engine's snapshot at each scrape.
type cacheCollector struct {
	e *engine.Engine

	usage, running, waiting, free, cached, used, total, swapped,
	internalFrag, externalFrag, prefixQueries, prefixHits, preemptions,
	evictions, kvBytes, kvUsedBytes, blockBytes *prometheus.Desc

	mu sync.Mutex
	// Evictions by policy: the cache counts evictions under whichever
	// policy is in force, so each scrape adds the growth since the last
	// one to the policy in force now.
	lastEvictions int64
	byPolicy      map[string]float64
}

func newCacheCollector(e *engine.Engine) *cacheCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, labels, nil)
	}
	return &cacheCollector{
		e:             e,
		usage:         d("kv_cache_usage_perc", "KV cache usage: used blocks over all device blocks, 0 to 1."),
		running:       d("num_requests_running", "Requests with a sequence prefilling or decoding."),
		waiting:       d("num_requests_waiting", "Requests whose sequences all wait for blocks (or are swapped out)."),
		free:          d("kv_cache_free_blocks", "Device blocks with no owner and no cached contents."),
		cached:        d("kv_cache_cached_blocks", "Device blocks with no owner kept for prefix reuse (evictable)."),
		used:          d("kv_cache_used_blocks", "Device blocks owned by a sequence."),
		total:         d("kv_cache_total_blocks", "Device blocks in the pool."),
		swapped:       d("kv_cache_swapped_blocks", "Blocks in the host swap pool."),
		internalFrag:  d("kv_cache_internal_fragmentation_perc", "Share of the used blocks' token slots holding no token, 0 to 1."),
		externalFrag:  d("kv_cache_external_fragmentation_perc", "Share of free blocks outside the largest free run (contiguous allocator), 0 to 1."),
		prefixQueries: d("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache."),
		prefixHits:    d("prefix_cache_hits_total", "Prompt tokens found in the prefix cache."),
		preemptions:   d("num_preemptions_total", "Sequences preempted (recompute or swap)."),
		evictions:     d("kv_cache_evictions_total", "Cached blocks evicted, by the eviction policy in force.", "policy"),
		kvBytes:       d("kv_cache_bytes", "Bytes of the device pool holding K or V, by precision.", "tensor", "precision"),
		kvUsedBytes:   d("kv_cache_used_bytes", "Bytes of the used blocks holding K or V, by precision.", "tensor", "precision"),
		blockBytes:    d("kv_cache_block_bytes", "Bytes of one block, all layers, K and V."),
		byPolicy:      map[string]float64{},
	}
}

// Describe sends the descriptions of the cache's metrics.
func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.usage, c.running, c.waiting, c.free, c.cached, c.used, c.total, c.swapped,
		c.internalFrag, c.externalFrag, c.prefixQueries, c.prefixHits, c.preemptions, c.evictions, c.kvBytes, c.kvUsedBytes, c.blockBytes} {
		ch <- d
	}
}

// Collect sends the cache's metrics from the engine's latest snapshot.
func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.e.Snapshot()
	if snap == nil || snap.Cache == nil {
		return
	}
	x := snap.Cache.Metrics
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(c.usage, x.UsagePercent/100)
	running, waiting := requestCounts(snap)
	gauge(c.running, float64(running))
	gauge(c.waiting, float64(waiting))
	gauge(c.free, float64(x.FreeBlocks))
	gauge(c.cached, float64(x.CachedBlocks))
	gauge(c.used, float64(x.UsedBlocks))
	gauge(c.total, float64(x.TotalBlocks))
	gauge(c.swapped, float64(x.HostBlocks))
	gauge(c.internalFrag, x.InternalFragmentation/100)
	gauge(c.externalFrag, x.ExternalFragmentation/100)
	counter(c.prefixQueries, float64(x.PrefixQueryTokens))
	counter(c.prefixHits, float64(x.PrefixHitTokens))
	counter(c.preemptions, float64(x.Preemptions))
	gauge(c.blockBytes, float64(x.BlockBytes))

	c.mu.Lock()
	grown := x.Evictions - c.lastEvictions
	if grown < 0 { // the cache was rebuilt (Reconfigure): its count restarted
		grown = x.Evictions
	}
	c.lastEvictions = x.Evictions
	pol := snap.Cache.Eviction.String()
	c.byPolicy[pol] += float64(grown)
	for _, p := range []kvcache.EvictionPolicy{kvcache.LRU, kvcache.LFU, kvcache.FIFO} {
		counter(c.evictions, c.byPolicy[p.String()], p.String())
	}
	c.mu.Unlock()

	k, v := kvBlockBytes(c.e, snap.Config.Cache)
	kp, vp := snap.Config.Cache.K.String(), snap.Config.Cache.V.String()
	gauge(c.kvBytes, float64(k)*float64(x.TotalBlocks), "k", kp)
	gauge(c.kvBytes, float64(v)*float64(x.TotalBlocks), "v", vp)
	gauge(c.kvUsedBytes, float64(k)*float64(x.UsedBlocks), "k", kp)
	gauge(c.kvUsedBytes, float64(v)*float64(x.UsedBlocks), "v", vp)
}

// requestCounts counts the snapshot's requests that run (some sample
// prefilling or decoding) and that wait.
func requestCounts(snap *engine.Snapshot) (running, waiting int) {
	for _, r := range snap.Requests {
		run := false
		for _, s := range r.Samples {
			if s.State == "prefill" || s.State == "decode" {
				run = true
			}
		}
		if run {
			running++
		} else {
			waiting++
		}
	}
	return running, waiting
}

// kvBlockBytes splits a block's bytes into its K and its V share. At f32
// keys and values have the same layout, so a block of f32 K and V is half
// K, half V; swapping one of them for another precision changes that half
// only.
func kvBlockBytes(e *engine.Engine, c engine.CacheConfig) (k, v int) {
	m := e.Model()
	plain := kvstore.BlockBytes(m.CacheConfig(c.BlockSize, 1, kvstore.F32, kvstore.F32)) / 2
	k = kvstore.BlockBytes(m.CacheConfig(c.BlockSize, 1, c.K, kvstore.F32)) - plain
	v = kvstore.BlockBytes(m.CacheConfig(c.BlockSize, 1, kvstore.F32, c.V)) - plain
	return k, v
}
