package kvsub

import (
	"context"
	"io"
	"log"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"kvscope/vllm/kvevents"
)

// testPub is a publisher written to vLLM's ZmqEventPublisher protocol: a
// PUB socket sending (topic, 8-byte big-endian seq, msgpack payload) and a
// ROUTER answering [identity, "", start_seq] with [identity, "", seq,
// payload] for each buffered batch from start_seq, then [identity, "",
// -1, ""].
type testPub struct {
	t        testing.TB
	topic    string
	pub      zmq4.Socket
	router   zmq4.Socket
	pubEP    string
	replayEP string

	mu     sync.Mutex
	buf    []entry
	maxBuf int
	next   int64
	starts []int64     // replay requests' start sequence numbers
	mute   atomic.Bool // take replay requests, answer none
	served chan struct{}
	stop   func() // closes the sockets, as a vLLM process that exits
}

type entry struct {
	seq     int64
	payload []byte
}

func newTestPub(t testing.TB, topic string, maxBuf int) *testPub {
	t.Helper()
	return newTestPubAt(t, topic, maxBuf, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", nil)
}

// newTestPubAt listens on the given endpoints (port 0 for any), with the
// batches early already published (numbered from 0) before it binds: in
// its replay buffer, heard live by nobody.
func newTestPubAt(t testing.TB, topic string, maxBuf int, pubEP, replayEP string, early [][]byte) *testPub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPub{t: t, topic: topic, maxBuf: maxBuf, served: make(chan struct{}, 100)}
	for _, payload := range early {
		p.publish(payload, false)
	}
	// The probe kvsub makes before dialing has zmq4 log a failed handshake.
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p.pub = zmq4.NewPub(ctx, quiet)
	p.router = zmq4.NewRouter(ctx, quiet)
	if err := p.pub.Listen(pubEP); err != nil {
		t.Fatal(err)
	}
	if err := p.router.Listen(replayEP); err != nil {
		t.Fatal(err)
	}
	p.pubEP = "tcp://" + p.pub.Addr().String()
	p.replayEP = "tcp://" + p.router.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.serveReplay()
	}()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			p.pub.Close()
			p.router.Close()
			<-done
		})
	}
	t.Cleanup(p.stop)
	return p
}

func (p *testPub) serveReplay() {
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 {
			continue // vLLM logs "Invalid replay request" and goes on
		}
		if p.mute.Load() {
			continue
		}
		id := msg.Frames[0]
		start, err := kvevents.ParseSeq(msg.Frames[2])
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.starts = append(p.starts, start)
		buf := slices.Clone(p.buf)
		p.mu.Unlock()
		for _, e := range buf {
			if e.seq >= start {
				if err := p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, kvevents.SeqBytes(e.seq), e.payload)); err != nil {
					return
				}
			}
		}
		if err := p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, kvevents.SeqBytes(kvevents.EndSeq), []byte{})); err != nil {
			return
		}
		p.served <- struct{}{}
	}
}

// publish buffers payload under the next sequence number and, if send,
// sends it on the PUB socket (send false makes a gap in the live stream).
func (p *testPub) publish(payload []byte, send bool) int64 {
	p.mu.Lock()
	seq := p.next
	p.next++
	p.buf = append(p.buf, entry{seq, payload})
	if len(p.buf) > p.maxBuf {
		p.buf = p.buf[len(p.buf)-p.maxBuf:]
	}
	p.mu.Unlock()
	if send {
		p.raw([]byte(p.topic), kvevents.SeqBytes(seq), payload)
	}
	return seq
}

// restart forgets the buffer and starts the sequence again at 0, as a new
// vLLM process does.
func (p *testPub) restart() {
	p.mu.Lock()
	p.buf, p.next = nil, 0
	p.mu.Unlock()
}

// respawn stops p, as its process exiting, and starts a new process on
// the same endpoints, numbering from 0 again, whose first batches early
// are published before it binds: the subscriber, redialing, finds them
// only in the replay buffer, whatever the timing.
func (p *testPub) respawn(early ...[]byte) *testPub {
	p.t.Helper()
	p.stop()
	return newTestPubAt(p.t, p.topic, p.maxBuf, p.pubEP, p.replayEP, early)
}

func (p *testPub) raw(frames ...[]byte) {
	if err := p.pub.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		p.t.Errorf("publish: %v", err)
	}
}

func (p *testPub) replayStarts() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.starts)
}

// waitSubscribed waits until a subscriber's subscription to prefix has
// reached the PUB socket, so that what is sent next is delivered live.
func (p *testPub) waitSubscribed(prefix string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if slices.Contains(p.pub.(zmq4.Topics).Topics(), prefix) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.t.Fatalf("no subscription to %q reached the publisher", prefix)
}

// omap is a msgpack map in the given key order, as msgspec writes a
// struct's fields in declaration order.
type omap []any

func (m omap) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(len(m) / 2); err != nil {
		return err
	}
	for _, v := range m {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Event builders in both of vLLM's encodings (vllm/distributed/kv_events.py:
// array_like up to about v0.23, maps after PR #42892).

func storedArray(hashes []any, parent any, tokens []any, blockSize int) any {
	return []any{"BlockStored", hashes, parent, tokens, blockSize, nil, "GPU", nil}
}

func storedMap(hashes []any, parent any, tokens []any, blockSize int) any {
	return omap{"type", "BlockStored", "block_hashes", hashes, "parent_block_hash", parent,
		"token_ids", tokens, "block_size", blockSize, "lora_id", nil, "medium", "GPU", "lora_name", nil}
}

func removedArray(hashes []any) any { return []any{"BlockRemoved", hashes, "GPU"} }

func removedMap(hashes []any) any {
	return omap{"type", "BlockRemoved", "block_hashes", hashes, "medium", "GPU"}
}

func batchArray(ts float64, events ...any) any { return []any{ts, append([]any{}, events...), 0} }

func batchMap(ts float64, events ...any) any {
	return omap{"ts", ts, "events", append([]any{}, events...), "data_parallel_rank", 0}
}

// collect reads n updates, failing after timeout.
func collect(t testing.TB, ch <-chan Update, n int, timeout time.Duration) []Update {
	t.Helper()
	var out []Update
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case u := <-ch:
			out = append(out, u)
		case <-timer.C:
			t.Fatalf("got %d updates in %v, want %d: %v", len(out), timeout, n, summary(out))
		}
	}
	return out
}

// collectUpdates reads updates until n of them are not KindError (the
// dropped connections and redials of a restart, whose number depends on
// timing), failing after timeout; it returns those n.
func collectUpdates(t testing.TB, ch <-chan Update, n int, timeout time.Duration) []Update {
	t.Helper()
	var out, errs []Update
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case u := <-ch:
			if u.Kind == KindError {
				errs = append(errs, u)
				continue
			}
			out = append(out, u)
		case <-timer.C:
			for _, u := range errs {
				t.Logf("error update: %v", u.Err)
			}
			t.Fatalf("got %d updates besides errors in %v, want %d: %v", len(out), timeout, n, summary(out))
		}
	}
	return out
}

// summary renders updates as "kind:seq[r]" items for failure messages.
func summary(us []Update) []string {
	var s []string
	for _, u := range us {
		x := u.Kind.String()
		switch u.Kind {
		case KindBatch, KindMalformed:
			x += ":" + itoa(u.Seq)
			if u.Replayed {
				x += "r"
			}
		case KindLost:
			x += ":" + itoa(u.From) + "-" + itoa(u.To)
		case KindReset:
			x += ":" + itoa(u.Seq)
		}
		s = append(s, x)
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
