package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"kvscope/engine"
	"kvscope/server"
)

// apiKeyEnv holds serve's API key when --api-key is not given.
const apiKeyEnv = server.APIKeyEnv

// serveStop is what ends serve: SIGINT or SIGTERM (tests replace it).
var serveStop = func() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

// serveCmd is kvscope serve: the OpenAI-compatible API, metrics and the
// cache's snapshots and events over one engine (package server).
func serveCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("serve", "-m FILE [--addr 127.0.0.1:8080] [--api-key KEY] [--allow-origin ORIGIN]... [--allow-host NAME]...", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	addr := fs.String("addr", "127.0.0.1:8080", "`address` to listen on (host:port; port 0 picks a free one); an address other than loopback needs an API key")
	key := fs.String("api-key", "", "API `key` clients must send as Authorization: Bearer KEY (default $"+apiKeyEnv+")")
	var origins, hosts []string
	fs.Var(list{&origins}, "allow-origin", "web `origin` (scheme://host[:port]) whose pages may call the server, with CORS answers; repeatable or comma-separated; '*' (any) needs an API key. Requests with any other Origin header are refused")
	fs.Var(list{&hosts}, "allow-host", "Host `name` to answer beside localhost, 127.0.0.1, [::1] and the address listened on (a proxy's or the LAN's name); repeatable or comma-separated. Requests with any other Host are refused (DNS rebinding)")
	name := fs.String("model-name", "", "model `name` in /v1/models and replies (default: the file's name without .gguf)")
	cfg := engine.DefaultConfig()
	intVar(fs, &cfg.Sched.MaxSeqs, "parallel", 1, maxParallel, "most sequences decoding at once")
	addCacheFlags(fs, &cfg)
	be := backendFlag(fs)
	var lim server.Limits
	lim.MaxBodyBytes = server.DefaultMaxBodyBytes
	fs.Var(&size{&lim.MaxBodyBytes}, "max-body", "largest request body, with units (default 1MiB)")
	intVar(fs, &lim.MaxPromptTokens, "max-prompt-tokens", 0, maxTokens, "most prompt tokens of a request (0: the context)")
	intVar(fs, &lim.MaxTokens, "max-tokens", 0, maxTokens, "largest max_tokens a request may ask (0: the context)")
	lim.MaxN = server.DefaultMaxN
	intVar(fs, &lim.MaxN, "max-n", 1, 64, "largest n (choices per prompt)")
	lim.MaxConcurrent = server.DefaultMaxConcurrent
	intVar(fs, &lim.MaxConcurrent, "max-concurrent", 1, 1<<16, "most completion requests at once; more get 429 with Retry-After")
	grace := 10 * time.Second
	fs.DurationVar(&grace, "shutdown-timeout", grace, "on SIGINT or SIGTERM, how long streams in flight may run before they are cancelled")
	var delay time.Duration
	fs.DurationVar(&delay, "step-delay", 0, "slow motion, as the app's Teaching tab: wait this `long` after each engine step (0 to 1m), to watch /v1/kvcache while requests run")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	if *key == "" {
		*key = os.Getenv(apiKeyEnv)
	}
	if lim.MaxBodyBytes == 0 {
		lim.MaxBodyBytes = server.DefaultMaxBodyBytes
	}
	if err := checkAddr(*addr, *key != ""); err != nil {
		return fs.usageErr("%v", err)
	}
	if err := checkAllowed(origins, hosts, *key != ""); err != nil {
		return fs.usageErr("%v", err)
	}
	if grace < 0 {
		return fs.usageErr("--shutdown-timeout cannot be negative")
	}
	if delay < 0 || delay > time.Minute {
		return fs.usageErr("--step-delay %v is outside 0 to 1m", delay)
	}
	cfg.Sched.StepTokens = max(cfg.Sched.StepTokens, cfg.Sched.MaxSeqs)
	l, e, err := chatEngine(*path, *be, cfg)
	if err != nil {
		return err
	}
	defer l.close()
	defer e.Close()
	if err := e.SetDelay(delay); err != nil {
		return err
	}
	form := l.format
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*path), ".gguf")
	}
	srv, err := server.New(server.Config{Engine: e, Format: form, ModelID: *name, APIKey: *key, Limits: lim, AllowedOrigins: origins, AllowedHosts: hosts})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	pages := "web pages refused"
	if len(origins) > 0 {
		pages = "web pages from " + strings.Join(origins, ", ")
	}
	fmt.Fprintf(stderr, "kvscope serve: listening on http://%s (model %s, chat format %s, context %d; %s); %s\n", ln.Addr(), *name, form.Name(), e.Snapshot().Context, pages, l.backend)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	sigs, stop := serveStop()
	defer stop()
	select {
	case err := <-served:
		return err
	case sig := <-sigs:
		fmt.Fprintf(stderr, "kvscope serve: %v: finishing the requests in flight (at most %s)\n", sig, grace)
	}
	// Stop accepting; let streams finish within the grace period, then
	// cancel them (each still ends with its last chunk and [DONE]).
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		srv.CancelAll(cctx)
		if err := hs.Shutdown(cctx); err != nil {
			hs.Close()
		}
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintf(stderr, "kvscope serve: stopped after %d requests\n", srv.Served())
	return nil
}

// checkAddr refuses an address that is not host:port, and one other than
// loopback without an API key (server.CheckAddr's rule), in the flags'
// words.
func checkAddr(addr string, hasKey bool) error {
	err := server.CheckAddr(addr, hasKey)
	switch {
	case errors.Is(err, server.ErrNeedsKey):
		return fmt.Errorf("--addr %s is reachable from other machines: give an API key (--api-key or $%s), or listen on 127.0.0.1", addr, apiKeyEnv)
	case err != nil:
		return fmt.Errorf("--addr %q: want host:port, such as 127.0.0.1:8080", addr)
	}
	return nil
}

// checkAllowed refuses --allow-origin and --allow-host values the server
// would refuse (server.CheckOrigins, server.CheckHosts), in the flags'
// words.
func checkAllowed(origins, hosts []string, hasKey bool) error {
	err := server.CheckOrigins(origins, hasKey)
	switch {
	case errors.Is(err, server.ErrWildcardNeedsKey):
		return fmt.Errorf("--allow-origin '*' lets every web page call the server: give an API key too (--api-key or $%s), or list the origins", apiKeyEnv)
	case err != nil:
		return fmt.Errorf("--allow-origin: %v", err)
	}
	if err := server.CheckHosts(hosts); err != nil {
		return fmt.Errorf("--allow-host: %v", err)
	}
	return nil
}

// list is a repeatable flag whose values may also be comma-separated.
type list struct{ p *[]string }

func (l list) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l list) Set(s string) error {
	n := len(*l.p)
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.p = append(*l.p, v)
		}
	}
	if len(*l.p) == n {
		return errors.New("empty")
	}
	return nil
}
