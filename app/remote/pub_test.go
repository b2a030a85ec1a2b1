package remote

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

// vllmPub is a minimal publisher speaking vLLM's ZmqEventPublisher
// protocol on loopback: a PUB socket sending (topic, 8-byte big-endian
// seq, msgpack EventBatch) and a ROUTER answering [id, "", start] with
// [id, "", seq, payload] per buffered batch, then [id, "", -1, ""].
type vllmPub struct {
	t            testing.TB
	pub, router  zmq4.Socket
	pubEP, repEP string

	mu   sync.Mutex
	buf  [][]byte
	next int64
}

func newVLLMPub(t testing.TB) *vllmPub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &vllmPub{t: t, pub: zmq4.NewPub(ctx, quiet), router: zmq4.NewRouter(ctx, quiet)}
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := p.router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.pubEP, p.repEP = "tcp://"+p.pub.Addr().String(), "tcp://"+p.router.Addr().String()
	done := make(chan struct{})
	go func() {
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
			for seq := start; seq < int64(len(buf)); seq++ {
				if p.router.SendMulti(zmq4.NewMsgFrom(msg.Frames[0], []byte{}, kvevents.SeqBytes(seq), buf[seq])) != nil {
					return
				}
			}
			if p.router.SendMulti(zmq4.NewMsgFrom(msg.Frames[0], []byte{}, kvevents.SeqBytes(kvevents.EndSeq), []byte{})) != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		p.pub.Close()
		p.router.Close()
		<-done
	})
	return p
}

// publish sends a batch of events (vLLM's array encoding, up to v0.23).
func (p *vllmPub) publish(events ...any) {
	p.t.Helper()
	payload, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, events, 0})
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	seq := p.next
	p.next++
	p.buf = append(p.buf, payload)
	p.mu.Unlock()
	if err := p.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), kvevents.SeqBytes(seq), payload)); err != nil {
		p.t.Errorf("publish: %v", err)
	}
}

// waitSubscribed waits until a subscriber's subscription reached the PUB.
func (p *vllmPub) waitSubscribed() {
	p.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(p.pub.(zmq4.Topics).Topics()) > 0 {
			return
		}
	}
	p.t.Fatal("no subscription reached the publisher")
}

func stored(hashes []uint64, parent any, blockSize int) any {
	hs := make([]any, len(hashes))
	var toks []any
	for i, h := range hashes {
		hs[i] = h
		for j := range blockSize {
			toks = append(toks, 260+int(h*uint64(blockSize)+uint64(j))%250) // word pieces of the demo model's vocabulary (past its byte tokens)
		}
	}
	return []any{"BlockStored", hs, parent, toks, blockSize, nil, "GPU", nil}
}

func removed(hashes ...uint64) any {
	hs := make([]any, len(hashes))
	for i, h := range hashes {
		hs[i] = h
	}
	return []any{"BlockRemoved", hs, "GPU"}
}
