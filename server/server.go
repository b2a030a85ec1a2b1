package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"kvscope/engine"
	"kvscope/engine/chat"
)

// Limits bound what one request may ask for. A zero field takes its
// default.
type Limits struct {
	// MaxBodyBytes bounds a request body (default 1 MiB).
	MaxBodyBytes int64
	// MaxPromptTokens bounds a prompt (default: the engine's context).
	MaxPromptTokens int
	// MaxTokens bounds max_tokens (default: the engine's context).
	MaxTokens int
	// MaxN bounds n, the choices per prompt (default 16).
	MaxN int
	// MaxConcurrent bounds the completion requests in flight; one more
	// gets 429 with Retry-After (default 64).
	MaxConcurrent int
}

// The limits' defaults.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultMaxN          = 16
	DefaultMaxConcurrent = 64
)

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxN <= 0 {
		l.MaxN = DefaultMaxN
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = DefaultMaxConcurrent
	}
	return l
}

// Config configures a Server.
type Config struct {
	// Engine runs the requests; the server never closes it.
	Engine *engine.Engine
	// Format renders chat requests (chat.FromGGUF of the model); nil:
	// plain completion.
	Format *chat.Formatter
	// ModelID names the model in /v1/models and in replies.
	ModelID string
	// APIKey, when not empty, is required as "Authorization: Bearer KEY"
	// on every endpoint but /health.
	APIKey string
	// Limits bound the requests.
	Limits Limits
	// AllowedOrigins are the web origins (scheme://host[:port]) whose
	// pages may call the server, with CORS answers; a request with any
	// other Origin header is refused (403). "*" allows every origin and
	// needs APIKey. See CheckOrigins and guard.go.
	AllowedOrigins []string
	// AllowedHosts are the Host names answered beside loopback ones and
	// the address a request came to; any other Host is refused (403), as a
	// page's name rebound to this machine would be. See guard.go.
	AllowedHosts []string
}

// Server serves the API over one engine. Its methods are safe for
// concurrent use.
type Server struct {
	e       *engine.Engine
	form    *chat.Formatter
	model   string
	keyHash [32]byte
	hasKey  bool
	limits  Limits
	created int64
	origins map[string]bool // the allowed origins, normalised
	hosts   map[string]bool // the allowed hosts

	slots   chan struct{} // one token per completion request in flight
	replies replies       // chat replies, for the requests that continue them
	metrics *metrics
	mux     *http.ServeMux

	// stop is cancelled by CancelAll: every request in flight ends.
	stop    context.Context
	stopAll context.CancelFunc
	served  atomic.Uint64
	refused atomic.Uint64 // requests the guard refused
	active  atomic.Int64  // completion requests in flight
}

// New returns a server over cfg.Engine.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("server: no engine")
	}
	if cfg.ModelID == "" {
		cfg.ModelID = "kvscope"
	}
	form := cfg.Format
	if form == nil {
		form = chat.Plain()
	}
	l := cfg.Limits.withDefaults()
	s := &Server{
		e: cfg.Engine, form: form, model: cfg.ModelID, limits: l, created: time.Now().Unix(),
		slots: make(chan struct{}, l.MaxConcurrent),
	}
	if cfg.APIKey != "" {
		s.hasKey, s.keyHash = true, sha256.Sum256([]byte(cfg.APIKey))
	}
	var err error
	if s.origins, err = originSet(cfg.AllowedOrigins, s.hasKey); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.hosts, err = hostSet(cfg.AllowedHosts); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.stop, s.stopAll = context.WithCancel(context.Background())
	m, err := newMetrics(s.e)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.auth(s.models))
	mux.HandleFunc("GET /v1/models/{id...}", s.auth(s.modelByID))
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.completion(true)))
	mux.HandleFunc("POST /v1/completions", s.auth(s.completion(false)))
	mux.Handle("GET /metrics", s.auth(m.handler().ServeHTTP))
	mux.HandleFunc("GET /v1/kvcache/snapshot", s.auth(s.snapshot))
	mux.HandleFunc("GET /v1/kvcache/events", s.auth(s.events))
	mux.HandleFunc("/", s.auth(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, Message: "no endpoint " + r.Method + " " + r.URL.Path, Type: typeNotFound})
	}))
	s.mux = mux
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// serve answers a request, turning a panic into a 500 error (a handler's
// bug never takes the process down).
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			writeError(w, &apiError{status: http.StatusInternalServerError, Message: "internal error", Type: typeServer})
		}
	}()
	if s.guard(w, r) {
		s.mux.ServeHTTP(w, r)
	}
}

// Served returns the number of completion requests answered so far.
func (s *Server) Served() uint64 { return s.served.Load() }

// Refused returns the number of requests refused for their Host or
// Origin (guard.go).
func (s *Server) Refused() uint64 { return s.refused.Load() }

// CancelAll cancels every request in flight (each stream ends with its
// last chunk and [DONE]) and waits for their handlers to return, or for ctx
// to end. Call it after http.Server.Shutdown's deadline, so that streams
// still running do not hold the shutdown for ever.
func (s *Server) CancelAll(ctx context.Context) error {
	s.stopAll()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.active.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// auth wraps h with the API key check (constant time; 401 otherwise).
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.hasKey {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
			if subtle.ConstantTimeCompare(sum[:], s.keyHash[:]) != 1 || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kvscope"`)
				writeError(w, &apiError{status: http.StatusUnauthorized, Message: "a valid API key is required: send Authorization: Bearer KEY", Type: typeAuth, Code: strp("invalid_api_key")})
				return
			}
		}
		h(w, r)
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]string{"status": "ok"})
}

// modelInfo is one entry of /v1/models.
type modelInfo struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}

func (s *Server) modelInfo() modelInfo {
	return modelInfo{ID: s.model, Object: "model", Created: s.created, OwnedBy: "kvscope", MaxModelLen: s.context()}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []modelInfo{s.modelInfo()}})
}

func (s *Server) modelByID(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != s.model {
		writeError(w, &apiError{status: http.StatusNotFound, Message: "the model " + id + " does not exist (this server has " + s.model + ")", Type: typeNotFound, Param: strp("model"), Code: strp("model_not_found")})
		return
	}
	writeJSON(w, s.modelInfo())
}

// context is the engine's context length in force.
func (s *Server) context() int {
	if snap := s.e.Snapshot(); snap != nil {
		return snap.Context
	}
	return s.e.Model().Context
}
