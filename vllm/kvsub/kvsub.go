package kvsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"kvscope/vllm/kvevents"
)

// Source is one publisher to watch.
type Source struct {
	// Name labels the source's updates; it defaults to Endpoint.
	Name string
	// Endpoint is the publisher's PUB endpoint, e.g. tcp://host:5557.
	Endpoint string
	// Replay is the publisher's ROUTER replay endpoint, e.g.
	// tcp://host:5558; "" for none.
	Replay string
	// Topic is the subscription: ZeroMQ delivers the messages whose topic
	// starts with it ("" for all, "kv@" for llm-d's kv@<pod>@<model>).
	Topic string
	// Bind makes the SUB socket listen on Endpoint for publishers that
	// connect to it, instead of dialing a publisher that binds.
	Bind bool
	// ReplayTimeout bounds the wait for each replayed message; 0 means 5 s.
	ReplayTimeout time.Duration
	// HandshakeTimeout bounds the wait for a tcp peer's ZeroMQ greeting
	// before dialing; 0 means 5 s.
	HandshakeTimeout time.Duration
	// DialRetries is how many times a refused dial is retried, 250 ms
	// apart: 0 means 10, -1 means until the context ends. At start,
	// running out of them fails Run; a dropped connection is redialed
	// until the context ends, each redial that runs out of them reported
	// (KindError).
	DialRetries int
}

// Kind says what an Update carries.
type Kind int

const (
	// KindBatch carries one decoded batch.
	KindBatch Kind = iota
	// KindLost says the batches From..To-1 are missing for good: the
	// publisher no longer buffers them, or there is no replay socket.
	KindLost
	// KindReset says the publisher restarted (its sequence numbers went
	// back): whatever was known of its cache is gone.
	KindReset
	// KindMalformed carries a message that could not be decoded (Err); it
	// was skipped.
	KindMalformed
	// KindError carries a transient trouble (Err) that the subscriber
	// rides out: a replay that did not answer, a dropped connection.
	KindError
)

func (k Kind) String() string {
	switch k {
	case KindBatch:
		return "batch"
	case KindLost:
		return "lost"
	case KindReset:
		return "reset"
	case KindMalformed:
		return "malformed"
	case KindError:
		return "error"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Update is one thing that happened on a source.
type Update struct {
	Kind   Kind
	Source string // Source.Name
	// Topic is the live message's topic; a replayed batch (which comes
	// without one) carries the last live topic seen, or Source.Topic
	// before any.
	Topic string
	// Seq is the batch's sequence number (KindBatch, and KindMalformed
	// where the sequence frame was readable; -1 otherwise).
	Seq   int64
	Batch kvevents.Batch
	// Replayed is true for a batch that came from the replay socket.
	Replayed bool
	// From and To bound the lost sequence numbers of KindLost: [From, To).
	From, To int64
	Err      error
}

// Stats counts what a Subscriber has seen.
type Stats struct {
	Live       int64 // batches delivered from the live stream
	Replayed   int64 // batches delivered from the replay socket
	Duplicates int64 // messages dropped as already delivered
	Malformed  int64
	Gaps       int64 // gaps detected in the live stream
	Filled     int64 // gaps wholly filled from replay
	Lost       int64 // sequence numbers lost for good
	Resets     int64
	Errors     int64
}

// Subscriber watches one Source.
type Subscriber struct {
	src     Source
	running atomic.Bool

	live, replayed, dups, malformed, gaps, filled, lost, resets, errs atomic.Int64
}

// New checks src and returns its Subscriber.
func New(src Source) (*Subscriber, error) {
	if err := checkEndpoint(src.Endpoint); err != nil {
		return nil, fmt.Errorf("kvsub: endpoint: %w", err)
	}
	if src.Replay != "" {
		if err := checkEndpoint(src.Replay); err != nil {
			return nil, fmt.Errorf("kvsub: replay endpoint: %w", err)
		}
		if src.Bind {
			return nil, fmt.Errorf("kvsub: %s: a bound SUB gathers many publishers; it cannot have one replay endpoint", src.Endpoint)
		}
	}
	if src.Name == "" {
		src.Name = src.Endpoint
	}
	if src.ReplayTimeout <= 0 {
		src.ReplayTimeout = 5 * time.Second
	}
	if src.HandshakeTimeout <= 0 {
		src.HandshakeTimeout = 5 * time.Second
	}
	if src.DialRetries == 0 {
		src.DialRetries = 10
	}
	return &Subscriber{src: src}, nil
}

func checkEndpoint(ep string) error {
	if ep == "" {
		return errors.New("empty")
	}
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return fmt.Errorf("%q is not transport://address", ep)
	}
	switch scheme {
	case "tcp", "ipc", "inproc":
		return nil
	}
	return fmt.Errorf("%q: unknown transport %q (want tcp, ipc or inproc)", ep, scheme)
}

// Source returns the subscriber's source, defaults filled in.
func (s *Subscriber) Source() Source { return s.src }

// Stats returns the counts so far; it is safe to call while Run runs.
func (s *Subscriber) Stats() Stats {
	return Stats{
		Live: s.live.Load(), Replayed: s.replayed.Load(), Duplicates: s.dups.Load(),
		Malformed: s.malformed.Load(), Gaps: s.gaps.Load(), Filled: s.filled.Load(),
		Lost: s.lost.Load(), Resets: s.resets.Load(), Errors: s.errs.Load(),
	}
}

// Run connects, replays from sequence 0 where there is a replay endpoint,
// then follows the live stream, sending updates to out in order, until ctx
// ends. It returns ctx's error then, or an error naming the endpoint that
// could not be reached. Run blocks while out is full; every goroutine it
// starts has ended when it returns. A Subscriber runs once at a time.
func (s *Subscriber) Run(ctx context.Context, out chan<- Update) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("kvsub: %s: already running", s.src.Name)
	}
	defer s.running.Store(false)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{s: s, ctx: ctx, out: out, seqs: map[string]*seqState{}}
	defer r.closeAll()

	var err error
	kind := dialedSub
	if s.src.Bind {
		kind = bound
	}
	if r.sub, err = r.open(kind, s.src.Endpoint); err != nil {
		return r.fail(err)
	}
	if s.src.Replay != "" {
		if r.dealer, err = r.open(dealer, s.src.Replay); err != nil {
			return r.fail(err)
		}
		// The SUB is subscribed before this, so nothing published after
		// the replay's snapshot is missed; what is published between the
		// subscription reaching the publisher and the snapshot arrives
		// twice and is dropped once.
		r.replay(r.state(s.src.Topic), 0)
	}
	for {
		var msg zmq4.Msg
		if len(r.pending) > 0 {
			msg, r.pending = r.pending[0], r.pending[1:]
		} else {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case msg = <-r.sub.ch:
			}
		}
		r.live(msg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (r *run) fail(err error) error {
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	return fmt.Errorf("kvsub: %s: %w", r.s.src.Name, err)
}

// Run runs one Subscriber for src; see Subscriber.Run.
func Run(ctx context.Context, src Source, out chan<- Update) error {
	s, err := New(src)
	if err != nil {
		return err
	}
	return s.Run(ctx, out)
}

// RunAll watches several sources at once, each with its own sequence, all
// sending to out. It returns when ctx ends or every source has failed: the
// sources' errors joined (a failed source does not stop the others).
func RunAll(ctx context.Context, srcs []Source, out chan<- Update) error {
	subs := make([]*Subscriber, len(srcs))
	names := map[string]bool{}
	for i, src := range srcs {
		s, err := New(src)
		if err != nil {
			return err
		}
		if names[s.src.Name] {
			return fmt.Errorf("kvsub: two sources named %q", s.src.Name)
		}
		names[s.src.Name] = true
		subs[i] = s
	}
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() { errs[i] = s.Run(ctx, out) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// ParseTopic splits an llm-d style topic kv@<pod>@<model>. ok is false for
// a topic of another shape.
func ParseTopic(topic string) (prefix, pod, model string, ok bool) {
	prefix, rest, ok1 := strings.Cut(topic, "@")
	pod, model, ok2 := strings.Cut(rest, "@")
	if !ok1 || !ok2 || prefix == "" || pod == "" || model == "" {
		return "", "", "", false
	}
	return prefix, pod, model, true
}
