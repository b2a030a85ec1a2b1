package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"

	"kvscope/vllm/kvevents"
	"kvscope/vllm/kvsub"
	"kvscope/vllm/metrics"
	"kvscope/vllm/prefixcache"
)

// watchOpts are kvscope watch's settings, checked.
type watchOpts struct {
	srcs    []kvsub.Source
	metrics []string // one per source, "" for none
	model   string   // model_name label to keep in /metrics, "" for all
	once    bool
	every   time.Duration // refresh period
	window  time.Duration // churn window
	timeout time.Duration // --once: bound on the replay and the scrape
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("want an endpoint, not an empty string")
	}
	*r = append(*r, s)
	return nil
}

// watchCmd prints a vLLM cluster's prefix-cache figures from its KV-cache
// events (and its /metrics), refreshing, or once from the replay buffer.
func watchCmd(args []string, stdout, stderr io.Writer) error {
	o, err := parseWatch(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return watch(ctx, o, stdout)
}

func parseWatch(args []string, stderr io.Writer) (watchOpts, error) {
	fs := newFlags("watch", "--vllm tcp://HOST:5557 [--replay tcp://HOST:5558] [--metrics http://HOST:8000/metrics] [--once] (--vllm, --replay and --metrics once per instance, in the same order)", stderr)
	var pubs, replays, mets repeated
	fs.Var(&pubs, "vllm", "a vLLM instance's KV-event PUB endpoint (kv-events-config's endpoint); once per instance")
	fs.Var(&replays, "replay", "its ROUTER replay endpoint (replay_endpoint); none or once per --vllm, in order")
	fs.Var(&mets, "metrics", "its Prometheus /metrics URL; none or once per --vllm, in order")
	topic := fs.String("topic", "", "subscribe to topics starting with this (vLLM's config names it, e.g. kv); all by default")
	model := fs.String("model", "", "count only /metrics series with this model_name label")
	once := fs.Bool("once", false, "replay from sequence 0, print the totals one per line and exit")
	var o watchOpts
	o.every, o.window, o.timeout = time.Second, 10*time.Second, 10*time.Second
	fs.DurationVar(&o.every, "every", o.every, "refresh period")
	fs.DurationVar(&o.window, "window", o.window, "churn is measured over this much of the publisher's time")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "with --once: how long to wait for the replay and the metrics")
	if err := fs.parse(args); err != nil {
		return o, err
	}
	switch {
	case len(pubs) == 0:
		return o, fs.usageErr("no vLLM endpoint given: pass --vllm tcp://HOST:5557")
	case len(replays) != 0 && len(replays) != len(pubs):
		return o, fs.usageErr("%d --replay for %d --vllm: give one per --vllm, in the same order, or none", len(replays), len(pubs))
	case len(mets) != 0 && len(mets) != len(pubs):
		return o, fs.usageErr("%d --metrics for %d --vllm: give one per --vllm, in the same order, or none", len(mets), len(pubs))
	case *once && len(replays) == 0:
		return o, fs.usageErr("--once reads the replay buffer: pass --replay tcp://HOST:5558")
	case o.every < 10*time.Millisecond || o.every > time.Hour:
		return o, fs.usageErr("--every %v: want 10ms to 1h", o.every)
	case o.window <= 0 || o.window > 24*time.Hour:
		return o, fs.usageErr("--window %v: want above 0, at most 24h", o.window)
	case o.timeout <= 0 || o.timeout > time.Hour:
		return o, fs.usageErr("--timeout %v: want above 0, at most 1h", o.timeout)
	}
	seen := map[string]bool{}
	for i, p := range pubs {
		src := kvsub.Source{Name: p, Endpoint: p, Topic: *topic}
		if len(replays) > 0 {
			src.Replay = replays[i]
		}
		if seen[p] {
			return o, fs.usageErr("--vllm %s given twice", p)
		}
		seen[p] = true
		// kvsub.New checks the endpoints' syntax.
		if _, err := kvsub.New(src); err != nil {
			return o, fs.usageErr("%v", err)
		}
		o.srcs = append(o.srcs, src)
		m := ""
		if len(mets) > 0 {
			m = mets[i]
			if !strings.HasPrefix(m, "http://") && !strings.HasPrefix(m, "https://") {
				return o, fs.usageErr("--metrics %q: want an http:// or https:// URL", m)
			}
		}
		o.metrics = append(o.metrics, m)
	}
	o.model, o.once = *model, *once
	return o, nil
}

// watch runs kvscope watch until ctx ends (or, with once, after one
// report).
func watch(ctx context.Context, o watchOpts, stdout io.Writer) error {
	if o.once {
		return watchOnce(ctx, o, stdout)
	}
	cl := prefixcache.NewCluster(prefixcache.Options{})
	for _, s := range o.srcs {
		cl.Source(s.Name) // each source shows, even before its first batch
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	updates := make(chan kvsub.Update, 1024)
	var runErr error
	runDone := make(chan struct{})
	wg.Go(func() {
		defer close(runDone)
		runErr = kvsub.RunAll(ctx, o.srcs, updates)
	})
	series := make([]*metrics.Series, len(o.srcs))
	var mu sync.Mutex
	problems := map[string]string{} // source → its last trouble
	note := func(name string, err error) {
		mu.Lock()
		problems[name] = firstLine(err.Error())
		mu.Unlock()
	}
	for i, url := range o.metrics {
		if url == "" {
			continue
		}
		series[i] = metrics.NewSeries(0)
		name := o.srcs[i].Name
		wg.Go(func() {
			metrics.Poll(ctx, nil, url, o.model, o.every, series[i], func(err error) { note(name, err) })
		})
	}
	tty := false
	if f, ok := stdout.(*os.File); ok {
		tty = isTerminal(f)
	}
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	evCursor := map[string]int64{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-runDone:
			if runErr != nil && ctx.Err() == nil {
				return runErr
			}
			return nil
		case u := <-updates:
			cl.Apply(u)
			if u.Kind == kvsub.KindMalformed || u.Kind == kvsub.KindError {
				note(u.Source, u.Err)
			}
		case <-tick.C:
			var b strings.Builder
			if tty {
				b.WriteString("\x1b[H\x1b[2J")
			}
			fmt.Fprintf(&b, "kvscope watch, %s\n", time.Now().Format("15:04:05"))
			mu.Lock()
			probs := make(map[string]string, len(problems))
			for k, v := range problems {
				probs[k] = v
			}
			mu.Unlock()
			writeWatch(&b, o, cl, series, evCursor, probs)
			if !tty {
				b.WriteString("\n")
			}
			if _, err := io.WriteString(stdout, b.String()); err != nil {
				return err
			}
		}
	}
}

// writeWatch writes one report: the total first (unprefixed, for
// scripts), then each instance's lines prefixed by its name when there are
// several. cursor (nil: none) follows each source's evictions so that the
// report can say how many happened since the last one.
func writeWatch(w io.Writer, o watchOpts, cl *prefixcache.Cluster, series []*metrics.Series, cursor map[string]int64, problems map[string]string) {
	total, distinct := cl.Total()
	var storedPS, removedPS float64
	var recent int
	for _, s := range o.srcs {
		c := cl.Source(s.Name)
		a, r := c.Churn(o.window)
		storedPS += a
		removedPS += r
		if cursor != nil {
			evs, next := c.EvictionsSince(cursor[s.Name])
			cursor[s.Name] = next
			recent += len(evs)
		}
	}
	var samples []metrics.Sample
	for _, ts := range series {
		if ts == nil {
			continue
		}
		if s, ok := ts.Last(); ok {
			samples = append(samples, s)
		}
	}
	writeFigures(w, "", total, storedPS, removedPS, recent, cursor != nil, sumSamples(samples), len(samples) > 0)
	if len(o.srcs) > 1 {
		fmt.Fprintf(w, "instances: %d\n", len(o.srcs))
		fmt.Fprintf(w, "distinct blocks: %d\n", distinct)
	}
	for i, s := range o.srcs {
		prefix := ""
		if len(o.srcs) > 1 {
			prefix = s.Name + ": "
			c := cl.Source(s.Name)
			a, r := c.Churn(o.window)
			var m metrics.Sample
			has := false
			if series[i] != nil {
				m, has = series[i].Last()
			}
			writeFigures(w, prefix, c.Stats(), a, r, 0, false, m, has)
		}
		if series[i] != nil && series[i].Len() >= 2 && len(o.srcs) == 1 {
			fmt.Fprintf(w, "%sprefix hit rate (last %v): %s\n", prefix, o.window, pct(series[i].HitRate(o.window)))
			fmt.Fprintf(w, "%spreemptions per second: %.2f\n", prefix, series[i].Rate(o.window, metrics.Preemptions))
		}
		if p := problems[s.Name]; p != "" {
			fmt.Fprintf(w, "%slast problem: %s\n", prefix, p)
		}
	}
}

// writeFigures writes one source's (or the total's) lines.
func writeFigures(w io.Writer, prefix string, s prefixcache.Stats, storedPS, removedPS float64, recent int, showRecent bool, m metrics.Sample, hasMetrics bool) {
	line := func(format string, a ...any) { fmt.Fprintf(w, prefix+format+"\n", a...) }
	line("cached blocks: %d", s.Blocks)
	line("cached tokens: %d", s.Tokens)
	line("chains: %d", s.Roots)
	line("stored blocks: %d", s.Stored)
	line("evicted blocks: %d", s.Removed)
	if showRecent {
		line("evicted since last refresh: %d", recent)
	}
	line("churn stored per second: %.2f", storedPS)
	line("churn removed per second: %.2f", removedPS)
	line("batches: %d", s.Batches)
	if s.Lost > 0 {
		line("lost batches: %d", s.Lost)
	}
	if s.Resets > 0 {
		line("publisher restarts: %d", s.Resets)
	}
	if !hasMetrics {
		return
	}
	line("kv cache usage: %s", pct(m.KVCacheUsage))
	line("prefix hit rate: %s", pct(m.HitRate()))
	line("prefix cache queries: %.0f", m.PrefixCacheQueries)
	line("prefix cache hits: %.0f", m.PrefixCacheHits)
	line("preemptions: %.0f", m.Preemptions)
	line("requests running: %.0f", m.Running)
	line("requests waiting: %.0f", m.Waiting)
	if len(m.Missing) > 0 {
		line("metrics missing: %s", strings.Join(m.Missing, ", "))
	}
}

// sumSamples adds several servers' samples (usage is averaged).
func sumSamples(ss []metrics.Sample) metrics.Sample {
	var t metrics.Sample
	for _, s := range ss {
		t.KVCacheUsage += s.KVCacheUsage / float64(len(ss))
		t.PrefixCacheQueries += s.PrefixCacheQueries
		t.PrefixCacheHits += s.PrefixCacheHits
		t.Preemptions += s.Preemptions
		t.Running += s.Running
		t.Waiting += s.Waiting
	}
	if len(ss) == 1 {
		t.Missing = ss[0].Missing
	}
	return t
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// watchOnce replays every source from sequence 0, scrapes each /metrics
// once and prints the figures.
func watchOnce(ctx context.Context, o watchOpts, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cl := prefixcache.NewCluster(prefixcache.Options{})
	series := make([]*metrics.Series, len(o.srcs))
	errs := make([]error, 2*len(o.srcs))
	var wg sync.WaitGroup
	for i, s := range o.srcs {
		c := cl.Source(s.Name)
		wg.Go(func() {
			lost, err := replayAll(ctx, s.Replay, func(seq int64, b kvevents.Batch) { c.Apply(b) })
			if lost > 0 {
				c.MarkLost(lost)
			}
			if err != nil {
				errs[2*i] = fmt.Errorf("%s: %w", s.Name, err)
			}
		})
		if url := o.metrics[i]; url != "" {
			wg.Go(func() {
				m, err := metrics.Scrape(ctx, nil, url, o.model)
				if err != nil {
					errs[2*i+1] = err
					return
				}
				series[i] = metrics.NewSeries(1)
				series[i].Add(m)
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	writeWatch(stdout, o, cl, series, nil, nil)
	return nil
}

// replayAll asks a vLLM replay socket (a ZeroMQ ROUTER) for every batch
// it buffers, from sequence 0, and gives each decoded one to fn in order,
// until the end marker. It returns how many sequence numbers were missing
// (the publisher no longer buffers them) and an error where the socket
// could not be reached, did not answer before ctx ended, or a batch could
// not be decoded.
func replayAll(ctx context.Context, endpoint string, fn func(seq int64, b kvevents.Batch)) (lost int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(10), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer d.Close()
	// zmq4's handshake waits for a silent peer for ever: dial aside.
	dialed := make(chan error, 1)
	go func() { dialed <- d.Dial(endpoint) }()
	select {
	case err := <-dialed:
		if err != nil {
			return 0, fmt.Errorf("replay %s: %w", endpoint, err)
		}
	case <-ctx.Done():
		return 0, fmt.Errorf("replay %s: no ZeroMQ peer answered: %w", endpoint, ctx.Err())
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, kvevents.SeqBytes(0))); err != nil {
		return 0, fmt.Errorf("replay %s: send: %w", endpoint, err)
	}
	type recv struct {
		msg zmq4.Msg
		err error
	}
	msgs := make(chan recv)
	go func() {
		for {
			m, err := d.Recv()
			select {
			case msgs <- recv{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	next := int64(0)
	var bad error
	for {
		var r recv
		select {
		case <-ctx.Done():
			return lost, fmt.Errorf("replay %s: no end marker: %w", endpoint, ctx.Err())
		case r = <-msgs:
		}
		if r.err != nil {
			return lost, fmt.Errorf("replay %s: %w", endpoint, r.err)
		}
		frames := r.msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 {
			frames = frames[1:]
		}
		if len(frames) != 2 {
			bad = fmt.Errorf("replay %s: a message of %d frames, want (\"\", seq, payload)", endpoint, len(r.msg.Frames))
			continue
		}
		seq, err := kvevents.ParseSeq(frames[0])
		if err != nil {
			bad = fmt.Errorf("replay %s: %w", endpoint, err)
			continue
		}
		if seq == kvevents.EndSeq {
			return lost, bad
		}
		if seq < next {
			continue
		}
		lost += seq - next
		next = seq + 1
		b, err := kvevents.DecodeBatch(frames[1])
		if err != nil {
			bad = fmt.Errorf("replay %s: seq %d: %w", endpoint, seq, err)
			continue
		}
		fn(seq, b)
	}
}
