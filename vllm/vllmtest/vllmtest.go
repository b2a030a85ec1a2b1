// Package vllmtest provides a vLLM KV-event publisher on loopback for tests,
// as net/http/httptest provides servers: a ZeroMQ PUB socket sending
// vLLM's three frames (topic, 8-byte big-endian sequence number, msgpack
// EventBatch) and a ROUTER replay socket answering [id, "", start] with the
// buffered batches, then an end marker of sequence -1, as vLLM's
// ZmqEventPublisher does (vllm/distributed/kv_events.py).
package vllmtest

import (
	"context"
	"io"
	"log"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"kvscope/vllm/kvevents"
)

// Publisher is a vLLM-protocol publisher on loopback, closed when its
// test ends.
type Publisher struct {
	// PubEndpoint and ReplayEndpoint are the sockets' addresses
	// ("tcp://127.0.0.1:PORT").
	PubEndpoint, ReplayEndpoint string

	t           testing.TB
	pub, router zmq4.Socket
	mu          sync.Mutex
	buf         [][]byte
}

// NewPublisher starts a publisher whose batches go out under topic "kv".
func NewPublisher(t testing.TB) *Publisher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{t: t, pub: zmq4.NewPub(ctx, quiet), router: zmq4.NewRouter(ctx, quiet)}
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := p.router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.PubEndpoint, p.ReplayEndpoint = "tcp://"+p.pub.Addr().String(), "tcp://"+p.router.Addr().String()
	done := make(chan struct{})
	go p.serveReplay(done)
	t.Cleanup(func() {
		cancel()
		p.pub.Close()
		p.router.Close()
		<-done
	})
	return p
}

// serveReplay answers replay requests until the router closes.
func (p *Publisher) serveReplay(done chan struct{}) {
	defer close(done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 {
			continue
		}
		start, err := kvevents.ParseSeq(msg.Frames[2])
		if err != nil {
			continue
		}
		p.mu.Lock()
		buf := slices.Clone(p.buf)
		p.mu.Unlock()
		for seq := max(start, 0); seq < int64(len(buf)); seq++ {
			if p.router.SendMulti(zmq4.NewMsgFrom(msg.Frames[0], []byte{}, kvevents.SeqBytes(seq), buf[seq])) != nil {
				return
			}
		}
		if p.router.SendMulti(zmq4.NewMsgFrom(msg.Frames[0], []byte{}, kvevents.SeqBytes(kvevents.EndSeq), []byte{})) != nil {
			return
		}
	}
}

// Publish sends one batch of events (vLLM's array encoding, up to v0.23)
// and keeps it for replay; it returns the batch's sequence number.
func (p *Publisher) Publish(events ...any) int64 {
	p.t.Helper()
	payload, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, events, 0})
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	seq := int64(len(p.buf))
	p.buf = append(p.buf, payload)
	p.mu.Unlock()
	if err := p.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), kvevents.SeqBytes(seq), payload)); err != nil {
		p.t.Errorf("publish: %v", err)
	}
	return seq
}

// WaitSubscribed waits until a subscriber's subscription has reached the
// PUB socket (batches sent before are only in the replay buffer).
func (p *Publisher) WaitSubscribed() {
	p.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(p.pub.(zmq4.Topics).Topics()) > 0 {
			return
		}
	}
	p.t.Fatal("no subscription reached the publisher")
}

// Stored is a BlockStored event in the array encoding: blocks hashes (each
// block's parent the one before it, the first's parent), blockSize tokens
// each, token i of block h being token(h, i).
func Stored(hashes []uint64, parent any, blockSize int, token func(hash uint64, i int) int) any {
	hs := make([]any, len(hashes))
	var toks []any
	for i, h := range hashes {
		hs[i] = h
		for j := range blockSize {
			toks = append(toks, token(h, j))
		}
	}
	return []any{"BlockStored", hs, parent, toks, blockSize, nil, "GPU", nil}
}

// Removed is a BlockRemoved event in the array encoding.
func Removed(hashes ...uint64) any {
	hs := make([]any, len(hashes))
	for i, h := range hashes {
		hs[i] = h
	}
	return []any{"BlockRemoved", hs, "GPU"}
}
