// Package server provides an OpenAI-compatible HTTP API (chat and text
// completions, streamed or not), Prometheus metrics and the KV cache's
// snapshots and events over one kvscope engine.
//
// The endpoints are POST /v1/chat/completions (the conversation rendered
// through the model's chat template, package engine/chat), POST
// /v1/completions, GET /v1/models, GET /health, GET /metrics (vLLM's metric
// names with a "kvscope:" prefix, and the cache's own), GET
// /v1/kvcache/snapshot (the engine's snapshot as JSON, with
// SnapshotSchemaVersion) and GET /v1/kvcache/events?since=N (the engine's
// events as server-sent events).
//
// Every request runs on the engine it is given, beside whatever else uses
// that engine (the app's chats), and is labelled "API: <first words>" in
// its snapshots and events. A client that hangs up cancels its request,
// which frees its blocks at once. Bad requests get OpenAI's error shape,
// {"error": {"message", "type", "param", "code"}}, with a 4xx status; the
// limits (body size, prompt and generated tokens, n, concurrent requests)
// are in Limits. Before anything else, a request whose Host is not this
// machine's (DNS rebinding) or whose Origin is not allowed (a web page) is
// refused with 403; allowed origins get CORS answers (guard.go).
//
// Structured output (structured.go) constrains the reply with package
// engine/constrain: response_format (json_object, json_schema), vLLM's
// guided_json, guided_regex and guided_choice, and tools with tool_choice
// (auto, none, required, a named function) and parallel_tool_calls. Tools
// go to the chat template's tools variable where it reads one, and the
// reply is constrained to the model family's own tool-call format where
// the template shows one, found as llama.cpp finds it (Hermes and Qwen
// 2.5's <tool_call> tags, Llama 3.x's {"name", "parameters"}, Mistral's
// [TOOL_CALLS]), else to llama.cpp's generic JSON ({"tool_calls": [...]}
// or {"response": ...}, asked for in a system message). Up to 8 calls come
// back as tool_calls with distinct ids and finish_reason "tool_calls",
// streamed as OpenAI streams them: a call's id and name first, then its
// arguments as they are generated (structured_scan.go reads the calls of
// a reply still being written). The X-Kvscope-Tool-Format header and the
// reply's tool_format field name the format (generic for a template
// without tool support, also logged). Fields the server cannot honour (logprobs,
// logit_bias, echo, best_of, suffix, functions, guided_grammar, audio ...)
// are refused with a 400 naming them, never ignored.
package server
