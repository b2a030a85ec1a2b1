package kvsub

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"kvscope/vllm/kvevents"
)

// sock is a socket of the run with a goroutine that feeds its messages to
// ch. The goroutine owns the socket: it closes it when its context ends,
// and it replaces a dialed SUB whose connection dropped by a freshly
// dialed one.
type sock struct {
	z    zmq4.Socket
	ep   string
	kind sockKind
	ch   chan zmq4.Msg
	// dropped is set when a receive fails (the connection went), before
	// any message of a later connection is read.
	dropped atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// sockKind says what becomes of a socket whose connection drops.
type sockKind int

const (
	// bound: a listening SUB; one publisher's connection went, the others
	// and later ones are still taken.
	bound sockKind = iota
	// dialedSub: the SUB is dialed afresh, until it connects or the run
	// ends.
	dialedSub
	// dealer: the run replaces it before its next replay request.
	dealer
)

// redialPause separates two failed redials (each one zmq4's DialRetries
// attempts, 250 ms apart).
const redialPause = 250 * time.Millisecond

type run struct {
	s      *Subscriber
	ctx    context.Context
	out    chan<- Update
	sub    *sock
	dealer *sock // nil where there is no replay endpoint, or after a timeout until redialed

	seqs      map[string]*seqState
	lastTopic string     // the live topic last seen, for replayed batches
	pending   []zmq4.Msg // live messages held during a replay, oldest first
}

// seqState tracks one publisher's sequence numbers.
type seqState struct {
	topic    string
	next     int64  // the next sequence number due
	lastLive int64  // the last live sequence number seen, -1 before any
	started  bool   // a batch has been delivered or a replay done
	lastSum  uint64 // digest of the payload of batch next-1
}

// open makes a socket on ep and starts its reading goroutine.
func (r *run) open(kind sockKind, ep string) (*sock, error) {
	ctx, cancel := context.WithCancel(r.ctx)
	z, err := r.connect(ctx, kind, ep)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &sock{z: z, ep: ep, kind: kind, ch: make(chan zmq4.Msg), cancel: cancel, done: make(chan struct{})}
	go s.read(ctx, r)
	return s, nil
}

// connect makes a socket of kind and binds or dials it. zmq4's automatic
// reconnect is off: it dials again from inside the dropped connection's
// reader, gives up silently when its retries run out or a handshake fails
// (the socket then sends into nothing and never receives), and can land
// on the listener of a zmq4 publisher that is closing (it closes its
// connections before its listener, and one accepted meanwhile stays open,
// served by nobody). The run redials itself, so it knows which messages
// come from a new connection.
func (r *run) connect(ctx context.Context, kind sockKind, ep string) (zmq4.Socket, error) {
	if kind != bound {
		if err := probe(ctx, ep, r.s.src.HandshakeTimeout); err != nil {
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
	}
	opts := []zmq4.Option{zmq4.WithDialerMaxRetries(r.s.src.DialRetries), zmq4.WithAutomaticReconnect(false)}
	var z zmq4.Socket
	if kind == dealer {
		z = zmq4.NewDealer(ctx, opts...)
	} else {
		z = zmq4.NewSub(ctx, opts...)
		if err := z.SetOption(zmq4.OptionSubscribe, r.s.src.Topic); err != nil {
			z.Close()
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
	}
	var err error
	if kind == bound {
		err = z.Listen(ep)
	} else {
		err = z.Dial(ep)
	}
	if err != nil {
		z.Close()
		return nil, fmt.Errorf("%s: %w", ep, err)
	}
	return z, nil
}

// read forwards the socket's messages until its context ends. A receive
// error (a dropped connection) is reported and sets dropped; then a
// dialed SUB is dialed afresh, a dealer waits to be replaced and a bound
// SUB reads on after a pause.
func (s *sock) read(ctx context.Context, r *run) {
	defer close(s.done)
	defer func() {
		if s.z != nil {
			s.z.Close()
		}
	}()
	for {
		msg, err := s.z.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.dropped.Store(true)
			r.report(Update{Kind: KindError, Seq: -1, Err: fmt.Errorf("%s: receive: %w", s.ep, err)})
			switch s.kind {
			case dialedSub:
				if !s.redial(ctx, r) {
					return
				}
			case dealer:
				<-ctx.Done()
				return
			case bound:
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		select {
		case s.ch <- msg:
		case <-ctx.Done():
			return
		}
	}
}

// redial replaces the socket by a freshly dialed one, trying again while
// the publisher is away (a vLLM restart takes minutes); it reports false
// when ctx ends first.
func (s *sock) redial(ctx context.Context, r *run) bool {
	s.z.Close()
	s.z = nil
	for {
		z, err := r.connect(ctx, s.kind, s.ep)
		if err == nil {
			s.z = z
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.report(Update{Kind: KindError, Seq: -1, Err: fmt.Errorf("redial: %w", err)})
		select {
		case <-ctx.Done():
			return false
		case <-time.After(redialPause):
		}
	}
}

func (s *sock) close() {
	s.cancel()
	<-s.done
}

func (r *run) closeAll() {
	if r.sub != nil {
		r.sub.close()
	}
	if r.dealer != nil {
		r.dealer.close()
	}
}

// report sends u unless the run is over. It is safe from any goroutine.
func (r *run) report(u Update) {
	u.Source = r.s.src.Name
	switch u.Kind {
	case KindBatch:
		if u.Replayed {
			r.s.replayed.Add(1)
		} else {
			r.s.live.Add(1)
		}
	case KindLost:
		r.s.lost.Add(u.To - u.From)
	case KindReset:
		r.s.resets.Add(1)
	case KindMalformed:
		r.s.malformed.Add(1)
	case KindError:
		r.s.errs.Add(1)
	}
	select {
	case r.out <- u:
	case <-r.ctx.Done():
	}
}

// state returns topic's sequence state. With a replay socket the source is
// one publisher, so every topic shares one state.
func (r *run) state(topic string) *seqState {
	key := topic
	if r.s.src.Replay != "" {
		key = ""
	}
	st, ok := r.seqs[key]
	if !ok {
		st = &seqState{topic: topic, lastLive: -1}
		r.seqs[key] = st
	}
	return st
}

// live handles one message from the SUB socket.
func (r *run) live(msg zmq4.Msg) {
	if len(msg.Frames) != 3 {
		r.report(Update{Kind: KindMalformed, Seq: -1, Err: fmt.Errorf("live message has %d frames, want 3 (topic, seq, payload)", len(msg.Frames))})
		return
	}
	topic := string(msg.Frames[0])
	seq, err := kvevents.ParseSeq(msg.Frames[1])
	if err == nil && seq < 0 {
		err = fmt.Errorf("negative sequence number %d", seq)
	}
	if err != nil {
		r.report(Update{Kind: KindMalformed, Topic: topic, Seq: -1, Err: fmt.Errorf("live message: %w", err)})
		return
	}
	r.lastTopic = topic
	st := r.state(topic)
	st.topic = topic
	restarted := st.lastLive >= 0 && seq <= st.lastLive // the live stream only goes forward
	dropped := r.sub.dropped.Swap(false)
	if dropped {
		// The dealer's connection went with the SUB's, or leads to the
		// process that left: the next request dials afresh, so that it
		// asks whoever now publishes on the endpoint.
		r.dropDealer()
	}
	if dropped && !restarted && r.s.src.Replay != "" && st.started && st.next > 0 {
		// The connection dropped and came back: the same publisher, or a
		// new process on the same port whose numbers mean other batches?
		restarted = !r.sameProcess(st)
	}
	if restarted {
		r.report(Update{Kind: KindReset, Topic: topic, Seq: seq})
		*st = seqState{topic: topic, lastLive: -1}
		if r.s.src.Replay != "" {
			r.replay(st, 0)
		}
	}
	st.lastLive = seq
	switch {
	case st.started && seq < st.next:
		r.s.dups.Add(1)
		return
	case !st.started && r.s.src.Replay == "":
		if seq > 0 {
			r.report(Update{Kind: KindLost, Topic: topic, From: 0, To: seq})
		}
	case seq > st.next:
		r.s.gaps.Add(1)
		complete := false
		if r.s.src.Replay != "" {
			complete = r.replay(st, st.next)
		}
		if seq > st.next {
			r.report(Update{Kind: KindLost, Topic: topic, From: st.next, To: seq})
			complete = false
		}
		if complete {
			r.s.filled.Add(1)
		}
		if seq < st.next {
			r.s.dups.Add(1)
			return
		}
	}
	r.deliver(st, topic, seq, msg.Frames[2], false)
}

// deliver decodes and sends batch seq and moves st past it.
func (r *run) deliver(st *seqState, topic string, seq int64, payload []byte, replayed bool) {
	st.next = seq + 1
	st.started = true
	st.lastSum = digest(payload)
	b, err := kvevents.DecodeBatch(payload)
	if err != nil {
		r.report(Update{Kind: KindMalformed, Topic: topic, Seq: seq, Replayed: replayed, Err: fmt.Errorf("seq %d: %w", seq, err)})
		return
	}
	r.report(Update{Kind: KindBatch, Topic: topic, Seq: seq, Batch: b, Replayed: replayed})
}

// replay asks the replay socket for everything from start and delivers
// what st has not seen, until the end marker; it reports whether nothing
// was lost. Live messages that arrive meanwhile are queued on r.pending,
// which the main loop drains first.
func (r *run) replay(st *seqState, start int64) (complete bool) {
	topic := st.topic
	if r.s.src.Replay != "" && r.lastTopic != "" {
		topic = r.lastTopic
	}
	lost := false
	ok := r.request(start, func(seq int64, payload []byte) {
		if st.started && seq < st.next || seq < start {
			r.s.dups.Add(1)
			return
		}
		if seq > st.next {
			// The publisher's buffer no longer reaches back this far.
			r.report(Update{Kind: KindLost, Topic: topic, From: st.next, To: seq})
			lost = true
		}
		r.deliver(st, topic, seq, payload, true)
	})
	if ok {
		st.started = true
	}
	return ok && !lost
}

// sameProcess asks the replay socket for the last batch st delivered and
// reports whether it is still the same batch: false means that the
// publisher behind the endpoint is a new process (or has rolled its buffer
// past what was seen), whose sequence numbers mean other batches. Where
// the replay does not answer, it cannot tell and says true.
func (r *run) sameProcess(st *seqState) bool {
	last := st.next - 1
	found := false
	ok := r.request(last, func(seq int64, payload []byte) {
		if seq == last && digest(payload) == st.lastSum {
			found = true
		}
	})
	return found || !ok
}

// request sends a replay request from start and gives each answered batch
// to fn, up to the end marker; it reports whether the end marker came.
func (r *run) request(start int64, fn func(seq int64, payload []byte)) bool {
	if r.dealer != nil && r.dealer.dropped.Load() {
		r.dropDealer()
	}
	if r.dealer == nil {
		d, err := r.open(dealer, r.s.src.Replay)
		if err != nil {
			r.report(Update{Kind: KindError, Seq: -1, Err: fmt.Errorf("replay: %w", err)})
			return false
		}
		r.dealer = d
	}
	if err := r.dealer.z.Send(zmq4.NewMsgFrom([]byte{}, kvevents.SeqBytes(start))); err != nil {
		r.report(Update{Kind: KindError, Seq: -1, Err: fmt.Errorf("replay from %d: send: %w", start, err)})
		r.dropDealer()
		return false
	}
	timer := time.NewTimer(r.s.src.ReplayTimeout)
	defer timer.Stop()
	for {
		var msg zmq4.Msg
		select {
		case <-r.ctx.Done():
			return false
		case m := <-r.sub.ch:
			r.pending = append(r.pending, m)
			continue
		case <-timer.C:
			r.report(Update{Kind: KindError, Seq: -1, Err: fmt.Errorf("replay from %d: no answer from %s in %v", start, r.s.src.Replay, r.s.src.ReplayTimeout)})
			// A late answer must not be taken for the next request's.
			r.dropDealer()
			return false
		case msg = <-r.dealer.ch:
		}
		timer.Reset(r.s.src.ReplayTimeout)
		frames := msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 {
			frames = frames[1:] // the empty delimiter
		}
		if len(frames) != 2 {
			r.report(Update{Kind: KindMalformed, Seq: -1, Replayed: true, Err: fmt.Errorf("replay message has %d frames, want (\"\", seq, payload)", len(msg.Frames))})
			continue
		}
		seq, err := kvevents.ParseSeq(frames[0])
		if err != nil {
			r.report(Update{Kind: KindMalformed, Seq: -1, Replayed: true, Err: fmt.Errorf("replay message: %w", err)})
			continue
		}
		if seq == kvevents.EndSeq {
			return true
		}
		if seq < 0 {
			r.report(Update{Kind: KindMalformed, Seq: -1, Replayed: true, Err: fmt.Errorf("replay message: negative sequence number %d", seq)})
			continue
		}
		fn(seq, frames[1])
	}
}

func digest(p []byte) uint64 {
	h := fnv.New64a()
	h.Write(p)
	return h.Sum64()
}

func (r *run) dropDealer() {
	if r.dealer != nil {
		r.dealer.close()
		r.dealer = nil
	}
}
