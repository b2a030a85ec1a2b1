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
// (auto, none, required, a named function). Tools go to the chat
// template's tools variable where it reads one; the reply is constrained
// to llama.cpp's generic tool-call JSON ({"tool_call": {"name",
// "arguments"}} or {"response": ...}), asked for in a system message, and
// returned as tool_calls with finish_reason "tool_calls" (streamed as one
// delta once complete). The X-Kvscope-Tool-Format header and the reply's
// tool_format field say "template" or "generic" (a template without tool
// support, also logged). Fields the server cannot honour (logprobs,
// logit_bias, echo, best_of, suffix, functions, guided_grammar, audio ...)
// are refused with a 400 naming them, never ignored.
package server
