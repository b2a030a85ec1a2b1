// Package metrics scrapes a vLLM server's Prometheus /metrics page (KV-cache
// usage, prefix-cache queries and hits, preemptions, running and waiting
// requests) into samples and a small time series with rates.
//
// The names are vLLM's v1 engine's (vllm/v1/metrics/loggers.py):
// vllm:kv_cache_usage_perc (a 0..1 gauge, despite its name),
// vllm:prefix_cache_queries and vllm:prefix_cache_hits (token counters,
// exposed with Prometheus' _total suffix), vllm:num_preemptions (a counter,
// _total too), vllm:num_requests_running and vllm:num_requests_waiting.
// Older releases' names (vllm:gpu_cache_usage_perc,
// vllm:gpu_prefix_cache_queries/_hits) are read where the new ones are
// missing. Series with several engine or model_name labels are summed
// (usage is averaged).
package metrics
