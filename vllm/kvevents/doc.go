// Package kvevents decodes vLLM's KV-cache event stream (the ZMQ frames and
// their msgpack EventBatch payloads, in both the array and the map encoding).
//
// vLLM publishes, when started with --kv-events-config and the "zmq"
// publisher, one multipart message per scheduler step: the topic, an 8-byte
// big-endian sequence number and a msgpack EventBatch. The layouts decoded
// here follow vllm/distributed/kv_events.py:
//
//   - vllm-project/vllm@b4e69e0af33f4698e157a262cc787fe61983cd3d (early
//     releases): array_like structs; EventBatch = [ts, events];
//     BlockStored = ["BlockStored", block_hashes, parent_block_hash,
//     token_ids, block_size, lora_id]; BlockRemoved = ["BlockRemoved",
//     block_hashes]; AllBlocksCleared = ["AllBlocksCleared"].
//   - later array_like releases (up to about v0.23; e.g. the tree at
//     1CatAI/1Cat-vLLM@92a785cb21e2b2acbd4be1dfd87e799c9c632a37): EventBatch
//     gains data_parallel_rank (omitted when None); BlockStored appends
//     medium and lora_name; BlockRemoved appends medium.
//   - after vLLM PR #42892 (vllm-project/vllm@0181ea3173e53eea8cf04a86891488e3dc89bb34):
//     plain (map) structs: EventBatch = {"ts", "events", "data_parallel_rank"},
//     each event a map whose "type" key names it; BlockStored adds
//     extra_keys, group_idx, kv_cache_spec_kind and
//     kv_cache_spec_sliding_window, BlockRemoved adds group_idx, each
//     omitted while it holds its default.
//
// Both levels (the batch and each event) are decoded in either form, so a
// mixed stream decodes too. Block hashes are integers (vLLM's default sends
// the low 64 bits) or byte strings; [Hash] holds either. Unknown event types
// decode to [UnknownEvent] instead of failing their batch. Decoding never
// panics: malformed input (truncated, too deep, wrong types) is an error.
package kvevents
