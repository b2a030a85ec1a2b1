package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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
			toks = append(toks, int(h)*100+j)
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

// fillPrompts publishes three prompts sharing a two-block system prompt
// (blocks 1, 2), then an eviction of one prompt's last block: 6 blocks of
// 4 tokens stored, 1 removed, 5 cached in one tree (root 1).
func fillPrompts(p *vllmPub) {
	p.publish(stored([]uint64{1, 2, 3}, nil, 4))
	p.publish(stored([]uint64{4, 5}, uint64(2), 4), stored([]uint64{6}, uint64(2), 4))
	p.publish(removed(6))
}

func vllmMetrics(t testing.TB, running int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
`, running)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func TestWatchOnce(t *testing.T) {
	p := newVLLMPub(t)
	fillPrompts(p)
	met := vllmMetrics(t, 3)
	var out, errb bytes.Buffer
	if code := Main([]string{"watch", "--vllm", p.pubEP, "--replay", p.repEP, "--metrics", met, "--once"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"cached blocks: 5\n", "cached tokens: 20\n", "chains: 1\n", "stored blocks: 6\n", "evicted blocks: 1\n", "batches: 3\n",
		"kv cache usage: 25.0%\n", "prefix hit rate: 25.0%\n", "preemptions: 2\n", "requests running: 3\n", "requests waiting: 1\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(out.String(), "cached blocks: 5\n") {
		t.Errorf("the first line is not the cached blocks:\n%s", out.String())
	}
}

// Two instances: the unprefixed lines are the total; each instance's
// follow, named.
func TestWatchOnceTwoInstances(t *testing.T) {
	a, b := newVLLMPub(t), newVLLMPub(t)
	fillPrompts(a)
	b.publish(stored([]uint64{1, 2}, nil, 4)) // the same system prompt on the other instance
	b.publish(stored([]uint64{7}, uint64(2), 4))
	var out, errb bytes.Buffer
	args := []string{"watch", "--vllm", a.pubEP, "--vllm", b.pubEP, "--replay", a.repEP, "--replay", b.repEP,
		"--metrics", vllmMetrics(t, 3), "--metrics", vllmMetrics(t, 4), "--once"}
	if code := Main(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"cached blocks: 8\n", "distinct blocks: 6\n", "instances: 2\n", "requests running: 7\n",
		a.pubEP + ": cached blocks: 5\n", b.pubEP + ": cached blocks: 3\n", b.pubEP + ": requests running: 4\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

// (syncBuffer is chat_test.go's.)

// Live: the replay's figures show first, then those of batches published
// while watch runs, and the eviction is counted in the refresh after it.
func TestWatchLive(t *testing.T) {
	p := newVLLMPub(t)
	fillPrompts(p)
	o, err := parseWatch([]string{"--vllm", p.pubEP, "--replay", p.repEP, "--metrics", vllmMetrics(t, 3), "--every", "50ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- watch(ctx, o, &out) }()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(out.String(), want) {
				return
			}
		}
		t.Fatalf("no %q in\n%s", want, out.String())
	}
	waitFor("cached blocks: 5\n")
	p.waitSubscribed()
	p.publish(stored([]uint64{8, 9}, uint64(3), 4))
	waitFor("cached blocks: 7\n")
	p.publish(removed(8, 9))
	waitFor("evicted since last refresh: 2\n")
	waitFor("prefix hit rate (last 10s): 0.0%\n") // the counters did not move
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
	if !strings.Contains(out.String(), "cached blocks: 5\n") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestWatchRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"watch"}, "no vllm endpoint given"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--once"}, "--once reads the replay buffer"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--replay", "tcp://a:1", "--replay", "tcp://a:2"}, "2 --replay for 1 --vllm"},
		{[]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--metrics", "ftp://x"}, "want an http:// or https:// url"},
		{[]string{"watch", "--vllm", "127.0.0.1:5557"}, "is not transport://address"},
		{[]string{"watch", "--vllm", "tcp://a:1", "--vllm", "tcp://a:1"}, "given twice"},
		{[]string{"watch", "--vllm", "tcp://a:1", "--every", "0s"}, "--every 0s"},
		{[]string{"watch", "--vllm", "tcp://a:1", "stray"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		code := Main(tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(strings.ToLower(lines[0]), strings.ToLower(tc.want)) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// A replay endpoint where nothing listens fails with one line, in time.
func TestWatchOnceUnreachable(t *testing.T) {
	var out, errb bytes.Buffer
	start := time.Now()
	code := Main([]string{"watch", "--vllm", "tcp://127.0.0.1:1", "--replay", "tcp://127.0.0.1:1", "--once", "--timeout", "3s"}, &out, &errb)
	if code != 1 || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 || !strings.Contains(errb.String(), "127.0.0.1:1") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %v", d)
	}
}
