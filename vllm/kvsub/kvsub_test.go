package kvsub

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvscope/vllm/kvevents"
)

const wait = 20 * time.Second

// start runs a subscriber for src in the background; the returned stop
// cancels it and checks that it returned the context's error.
func start(t *testing.T, src Source) (*Subscriber, <-chan Update, func()) {
	t.Helper()
	s, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan Update, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ch) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(wait):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return s, ch, stop
}

func seqs(us []Update) (seq []int64, replayed []bool) {
	for _, u := range us {
		seq = append(seq, u.Seq)
		replayed = append(replayed, u.Replayed)
	}
	return
}

// TestReplayOnConnectAndGapFill: batches published before the subscriber
// connects come from replay (from sequence 0), later ones live, and a batch
// missing from the live stream is fetched from replay; both encodings, int
// and bytes hashes.
func TestReplayOnConnectAndGapFill(t *testing.T) {
	p := newTestPub(t, "kv", 1000)
	payloads := [][]byte{
		pack(t, batchArray(1, storedArray([]any{uint64(1 << 63), 2}, nil, []any{1, 2, 3, 4}, 2))),
		pack(t, batchMap(2, storedMap([]any{[]byte{0xaa}}, uint64(2), []any{5, 6}, 2))),
		pack(t, batchArray(3, removedArray([]any{[]byte{0xaa}}))),
		pack(t, batchMap(4, removedMap([]any{uint64(2)}))),
		pack(t, batchArray(5, []any{"AllBlocksCleared"})),
	}
	for _, pl := range payloads { // 0..4, before anyone listens
		p.publish(pl, true)
	}
	s, ch, _ := start(t, Source{Name: "vllm-0", Endpoint: p.pubEP, Replay: p.replayEP, Topic: "kv"})
	first := collect(t, ch, 5, wait)
	p.waitSubscribed("kv")
	p.publish(payloads[0], true)  // 5 live
	p.publish(payloads[1], true)  // 6 live
	p.publish(payloads[2], false) // 7 lost from the live stream
	p.publish(payloads[3], true)  // 8: the gap is seen, 7 and 8 replayed
	rest := collect(t, ch, 4, wait)
	p.publish(payloads[4], true) // 9 live
	rest = append(rest, collect(t, ch, 1, wait)...)
	all := append(first, rest...)
	for _, u := range all {
		if u.Kind != KindBatch {
			t.Fatalf("update %v: %v", u.Kind, u.Err)
		}
		if u.Source != "vllm-0" || u.Topic != "kv" {
			t.Errorf("seq %d: source %q topic %q", u.Seq, u.Source, u.Topic)
		}
		want := kvevents.Array
		if u.Seq%5%2 == 1 {
			want = kvevents.Map
		}
		if u.Batch.Encoding != want || u.Batch.TS != float64(u.Seq%5+1) {
			t.Errorf("seq %d: encoding %v ts %v", u.Seq, u.Batch.Encoding, u.Batch.TS)
		}
	}
	gotSeq, gotReplayed := seqs(all)
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !reflect.DeepEqual(gotSeq, want) {
		t.Fatalf("seqs %v, want %v", gotSeq, want)
	}
	if want := []bool{true, true, true, true, true, false, false, true, true, false}; !reflect.DeepEqual(gotReplayed, want) {
		t.Errorf("replayed %v, want %v", gotReplayed, want)
	}
	if got := p.replayStarts(); !reflect.DeepEqual(got, []int64{0, 7}) {
		t.Errorf("replay requests from %v, want [0 7]", got)
	}
	e := all[0].Batch.Events[0].(*kvevents.BlockStored)
	if e.BlockHashes[0] != kvevents.IntHash(1<<63) || !all[1].Batch.Events[0].(*kvevents.BlockStored).BlockHashes[0].IsBytes() {
		t.Errorf("hashes %v / %v", e.BlockHashes, all[1].Batch.Events[0])
	}
	st := s.Stats()
	if st.Replayed != 7 || st.Live != 3 || st.Gaps != 1 || st.Filled != 1 || st.Lost != 0 || st.Duplicates != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestLostWhenBufferTooShort: what the publisher no longer buffers is
// reported lost, at connect and at a live gap.
func TestLostWhenBufferTooShort(t *testing.T) {
	p := newTestPub(t, "kv", 3)
	pl := pack(t, batchArray(1, []any{"AllBlocksCleared"}))
	for range 10 { // 0..9; the buffer keeps 7, 8, 9
		p.publish(pl, true)
	}
	s, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP})
	got := collect(t, ch, 4, wait)
	p.waitSubscribed("")
	for range 4 { // 10..13 not sent; the buffer keeps 12, 13 (and 14)
		p.publish(pl, false)
	}
	p.publish(pl, true) // 14
	got = append(got, collect(t, ch, 4, wait)...)
	want := []string{"lost:0-7", "batch:7r", "batch:8r", "batch:9r", "lost:10-12", "batch:12r", "batch:13r", "batch:14r"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
	if got[0].Source != p.pubEP {
		t.Errorf("source name %q, want the endpoint", got[0].Source)
	}
	if st := s.Stats(); st.Lost != 9 || st.Gaps != 1 || st.Filled != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestMalformedFrames: bad messages are reported and skipped; a bad
// payload still takes its sequence number.
func TestMalformedFrames(t *testing.T) {
	p := newTestPub(t, "kv", 100)
	s, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP, Topic: "kv"})
	p.waitSubscribed("kv")
	<-p.served // the replay on connect is done
	good := pack(t, batchMap(1, removedMap([]any{1})))
	p.publish(good, true)                                                                           // 0
	p.raw([]byte("kv"), kvevents.SeqBytes(1))                                                       // two frames
	p.raw([]byte("kv"), []byte{0, 1, 2}, good)                                                      // short seq frame
	p.raw([]byte("kv"), kvevents.SeqBytes(kvevents.EndSeq), good)                                   // negative seq
	p.publish([]byte{0x93, 0xc1, 0x00, 0x00}, true)                                                 // 1: not msgpack
	p.publish(pack(t, []any{"ts", []any{}}), true)                                                  // 2: ts a string
	p.publish(pack(t, batchArray(1, []any{"BlockStored", []any{1.5}, nil, []any{}, 1, nil})), true) // 3: float hash
	p.publish(good, true)                                                                           // 4
	got := collect(t, ch, 8, wait)
	want := []string{"batch:0", "malformed:-1", "malformed:-1", "malformed:-1", "malformed:1", "malformed:2", "malformed:3", "batch:4"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
	for _, u := range got[1:7] {
		if u.Err == nil || u.Err.Error() == "" {
			t.Errorf("malformed update without an error: %+v", u)
		}
	}
	if !strings.Contains(got[1].Err.Error(), "2 frames") || !strings.Contains(got[6].Err.Error(), "want an int or bytes") {
		t.Errorf("errors %q, %q", got[1].Err, got[6].Err)
	}
	if st := s.Stats(); st.Malformed != 6 || st.Gaps != 0 || st.Live != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestPublisherRestart: a sequence number going back is a reset, and the
// new publisher's buffer is replayed from 0.
func TestPublisherRestart(t *testing.T) {
	p := newTestPub(t, "kv", 100)
	_, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP})
	p.waitSubscribed("")
	<-p.served
	pl := pack(t, batchArray(1, []any{"AllBlocksCleared"}))
	p.publish(pl, true) // 0
	p.publish(pl, true) // 1
	collect(t, ch, 2, wait)
	p.restart()
	p.publish(pl, true) // 0 again
	p.publish(pl, true) // 1 again
	got := collect(t, ch, 3, wait)
	want := []string{"reset:0", "batch:0r", "batch:1"}
	if s := summary(got); !reflect.DeepEqual(s, want) && !reflect.DeepEqual(s, []string{"reset:0", "batch:0r", "batch:1r"}) {
		t.Errorf("updates %v, want %v", s, want)
	}
}

// TestPublisherProcessRestart: the publisher's process goes away and a new
// one binds the same ports, numbering from 0 again; the subscriber
// redials, reports the reset and replays the new buffer.
func TestPublisherProcessRestart(t *testing.T) {
	p := newTestPub(t, "kv", 100)
	_, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP, DialRetries: 40})
	pl := pack(t, batchArray(1, []any{"AllBlocksCleared"}))
	p.waitSubscribed("")
	<-p.served
	for range 3 {
		p.publish(pl, true) // 0, 1, 2
	}
	collect(t, ch, 3, wait)
	p2 := p.respawn(pl) // 0, before it binds: nobody hears it live
	p2.waitSubscribed("")
	p2.publish(pl, true) // 1: the sequence went back
	got := collectUpdates(t, ch, 3, wait)
	want := []string{"reset:1", "batch:0r", "batch:1r"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
	if got := p2.replayStarts(); !reflect.DeepEqual(got, []int64{0}) {
		t.Errorf("the new process was asked for replays from %v, want [0]", got)
	}
}

// TestPublisherProcessRestartAhead: the new process has already numbered
// past the old one's last batch when the subscriber is back; the replayed
// batch under the old number differs, so it is a reset all the same.
func TestPublisherProcessRestartAhead(t *testing.T) {
	p := newTestPub(t, "kv", 100)
	_, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP, DialRetries: 40})
	old := pack(t, batchArray(1, []any{"AllBlocksCleared"}))
	p.waitSubscribed("")
	<-p.served
	for range 3 {
		p.publish(old, true) // 0, 1, 2
	}
	collect(t, ch, 3, wait)
	var early [][]byte
	for i := range 5 { // 0..4 while the subscriber is away
		early = append(early, pack(t, batchMap(float64(100+i))))
	}
	p2 := p.respawn(early...)
	p2.waitSubscribed("")
	p2.publish(pack(t, batchMap(105)), true) // 5: ahead of the old process's 2
	got := collectUpdates(t, ch, 7, wait)
	want := []string{"reset:5", "batch:0r", "batch:1r", "batch:2r", "batch:3r", "batch:4r", "batch:5r"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
	for i, u := range got[1:] {
		if u.Batch.TS != float64(100+i) {
			t.Errorf("batch %d has ts %v, want the new process's %d", u.Seq, u.Batch.TS, 100+i)
		}
	}
	// Asked for batch 2 (is it still the one delivered?), then from 0.
	if got := p2.replayStarts(); !reflect.DeepEqual(got, []int64{2, 0}) {
		t.Errorf("the new process was asked for replays from %v, want [2 0]", got)
	}
}

// TestRedialAfterRetriesRunOut: a publisher away for longer than the dial
// retries last (a vLLM restart takes minutes) is waited for: each redial
// that runs out of them is reported, and the subscriber is back when the
// new process binds.
func TestRedialAfterRetriesRunOut(t *testing.T) {
	p := newTestPub(t, "kv", 100)
	_, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP, DialRetries: 1})
	p.waitSubscribed("")
	<-p.served
	p.publish(pack(t, batchArray(1, []any{"AllBlocksCleared"})), true) // 0
	collect(t, ch, 1, wait)
	p.stop()
	for { // the process stays away until a redial has run out of retries
		u := collect(t, ch, 1, wait)[0]
		if u.Kind != KindError {
			t.Fatalf("update %v while the publisher is away", summary([]Update{u}))
		}
		if strings.Contains(u.Err.Error(), "redial") && strings.Contains(u.Err.Error(), "could not dial") {
			break
		}
	}
	p2 := p.respawn(pack(t, batchMap(100))) // 0
	p2.waitSubscribed("")
	p2.publish(pack(t, batchMap(101)), true) // 1
	got := collectUpdates(t, ch, 3, wait)
	want := []string{"reset:1", "batch:0r", "batch:1r"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
}

// TestNoReplayEndpoint: without a replay socket, gaps are lost, per topic.
func TestNoReplayEndpoint(t *testing.T) {
	p := newTestPub(t, "kv@pod-a@llama", 100)
	_, ch, _ := start(t, Source{Name: "a", Endpoint: p.pubEP, Topic: "kv@"})
	p.waitSubscribed("kv@")
	pl := pack(t, batchArray(1, []any{"AllBlocksCleared"}))
	p.publish(pl, false)                                      // 0, missed
	p.publish(pl, true)                                       // 1
	p.publish(pl, true)                                       // 2
	p.publish(pl, false)                                      // 3, missed
	p.publish(pl, true)                                       // 4
	p.raw([]byte("kv@pod-b@llama"), kvevents.SeqBytes(0), pl) // another publisher's topic: its own sequence
	got := collect(t, ch, 6, wait)
	want := []string{"lost:0-1", "batch:1", "batch:2", "lost:3-4", "batch:4", "batch:0"}
	if s := summary(got); !reflect.DeepEqual(s, want) {
		t.Errorf("updates %v, want %v", s, want)
	}
	if got[5].Topic != "kv@pod-b@llama" || got[4].Topic != "kv@pod-a@llama" {
		t.Errorf("topics %q %q", got[4].Topic, got[5].Topic)
	}
}

// TestRunAllTopics: several publishers at once, each its own source; a
// topic outside the subscription is filtered out.
func TestRunAllTopics(t *testing.T) {
	pa := newTestPub(t, "kv@pod-a@llama", 100)
	pb := newTestPub(t, "kv@pod-b@llama", 100)
	pl := pack(t, batchMap(1, storedMap([]any{1}, nil, []any{1, 2}, 2)))
	for range 3 {
		pa.publish(pl, true)
		pb.publish(pl, true)
	}
	ch := make(chan Update, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunAll(ctx, []Source{
			{Name: "a", Endpoint: pa.pubEP, Replay: pa.replayEP, Topic: "kv@"},
			{Name: "b", Endpoint: pb.pubEP, Replay: pb.replayEP, Topic: "kv@"},
		}, ch)
	}()
	got := collect(t, ch, 6, wait)
	pa.waitSubscribed("kv@")
	pb.waitSubscribed("kv@")
	pa.raw([]byte("metrics"), kvevents.SeqBytes(99), []byte{0xc1}) // filtered by the subscription
	pa.publish(pl, true)
	pb.publish(pl, true)
	got = append(got, collect(t, ch, 2, wait)...)
	per := map[string][]int64{}
	for _, u := range got {
		if u.Kind != KindBatch {
			t.Fatalf("update %v: %v", u.Kind, u.Err)
		}
		per[u.Source] = append(per[u.Source], u.Seq)
	}
	if want := []int64{0, 1, 2, 3}; !reflect.DeepEqual(per["a"], want) || !reflect.DeepEqual(per["b"], want) {
		t.Errorf("per source %v", per)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunAll returned %v", err)
	}
	if err := RunAll(context.Background(), []Source{{Name: "x", Endpoint: "tcp://a:1"}, {Name: "x", Endpoint: "tcp://b:1"}}, ch); err == nil {
		t.Error("two sources with one name accepted")
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		src  Source
		want string
	}{
		{Source{}, "endpoint: empty"},
		{Source{Endpoint: "localhost:5557"}, "not transport://address"},
		{Source{Endpoint: "http://localhost:5557"}, "unknown transport \"http\""},
		{Source{Endpoint: "tcp://*:5557", Replay: "udp://x:1"}, "replay endpoint"},
		{Source{Endpoint: "tcp://*:5557", Replay: "tcp://x:1", Bind: true}, "cannot have one replay endpoint"},
	}
	for _, tt := range tests {
		_, err := New(tt.src)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestDialFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + l.Addr().String()
	l.Close()
	err = Run(context.Background(), Source{Name: "gone", Endpoint: ep, DialRetries: 1}, make(chan Update))
	if err == nil || !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Run: %v, want an error naming %s", err, ep)
	}
	p := newTestPub(t, "kv", 10)
	err = Run(context.Background(), Source{Endpoint: p.pubEP, Replay: ep, DialRetries: 1}, make(chan Update))
	if err == nil || !strings.Contains(err.Error(), ep) {
		t.Errorf("Run with a dead replay endpoint: %v", err)
	}
}

// TestSilentPeer: an endpoint that accepts but speaks no ZMTP (an HTTP
// port, say) is refused with a clear error instead of hanging the dial.
func TestSilentPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ep := "tcp://" + l.Addr().String()
	err = Run(context.Background(), Source{Endpoint: ep, HandshakeTimeout: 200 * time.Millisecond}, make(chan Update))
	if err == nil || !strings.Contains(err.Error(), "no ZeroMQ greeting") {
		t.Errorf("Run: %v, want a no-greeting error", err)
	}
	// Cancelling during the probe returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = Run(ctx, Source{Endpoint: ep, HandshakeTimeout: time.Minute}, make(chan Update))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
		t.Errorf("Run: %v after %v, want the context's deadline soon", err, time.Since(t0))
	}
}

// TestReplayTimeout: a replay socket that never answers is reported, and
// the live stream goes on.
func TestReplayTimeout(t *testing.T) {
	p := newTestPub(t, "kv", 10)
	p.mute.Store(true)
	_, ch, _ := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP, ReplayTimeout: 200 * time.Millisecond})
	got := collect(t, ch, 1, wait)
	if got[0].Kind != KindError || !strings.Contains(got[0].Err.Error(), "no answer") {
		t.Fatalf("update %v %v, want a replay timeout", got[0].Kind, got[0].Err)
	}
	p.waitSubscribed("")
	p.publish(pack(t, batchArray(1)), true)
	got = collect(t, ch, 1, wait)
	if got[0].Kind != KindBatch || got[0].Seq != 0 {
		t.Errorf("update %v, want batch 0", summary(got))
	}
}

// TestNoGoroutineLeak: after Run returns, none of its goroutines is left,
// zmq4's for its sockets included.
func TestNoGoroutineLeak(t *testing.T) {
	p := newTestPub(t, "kv", 10)
	p.publish(pack(t, batchArray(1)), true)
	before := runtime.NumGoroutine()
	_, ch, stop := start(t, Source{Endpoint: p.pubEP, Replay: p.replayEP})
	collect(t, ch, 1, wait)
	p.waitSubscribed("")
	p.publish(pack(t, batchArray(2)), true)
	collect(t, ch, 1, wait)
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		mine := strings.Contains(stacks, "kvscope/vllm/kvsub.(*sock).read") || strings.Contains(stacks, "kvscope/vllm/kvsub.(*Subscriber).Run")
		if !mine && runtime.NumGoroutine() <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before Run:\n%s", runtime.NumGoroutine(), before, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseTopic(t *testing.T) {
	tests := []struct {
		topic              string
		prefix, pod, model string
		ok                 bool
	}{
		{"kv@pod-1@meta-llama/Llama-3.1-8B", "kv", "pod-1", "meta-llama/Llama-3.1-8B", true},
		{"kv", "", "", "", false},
		{"kv@pod", "", "", "", false},
		{"@pod@m", "", "", "", false},
	}
	for _, tt := range tests {
		prefix, pod, model, ok := ParseTopic(tt.topic)
		if prefix != tt.prefix || pod != tt.pod || model != tt.model || ok != tt.ok {
			t.Errorf("ParseTopic(%q) = %q %q %q %v", tt.topic, prefix, pod, model, ok)
		}
	}
}
