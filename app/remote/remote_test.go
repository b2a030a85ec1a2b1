package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
	"kvscope/server"
)

const testKey = "sesame"

// serve starts what `kvscope serve --api-key sesame` starts: a server.New
// on a real engine over the demo model, on a loopback listener.
func serve(t *testing.T) (*httptest.Server, *engine.Engine) {
	t.Helper()
	m, err := model.Load(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.Context = 512
	e, err := engine.New(m, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	s, err := server.New(server.Config{Engine: e, ModelID: "stories260K", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() { s.CancelAll(context.Background()) })
	return ts, e
}

// load sends rounds of completions from a few clients until ctx ends.
func load(ctx context.Context, t *testing.T, url string, clients int) *sync.WaitGroup {
	var wg sync.WaitGroup
	prompts := []string{"Once upon a time there was a little girl", "Lily had a dog", "The sun was shining and", "Tom and his friend went to"}
	for c := range clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				body, _ := json.Marshal(map[string]any{"prompt": prompts[(c+i)%len(prompts)], "max_tokens": 24 + 8*c, "temperature": 0})
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("completion: %v", err)
					}
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 && ctx.Err() == nil {
					t.Errorf("completion: %s", resp.Status)
					return
				}
			}
		})
	}
	return &wg
}

// record keeps every snapshot the engine publishes, by step.
type record struct {
	mu    sync.Mutex
	steps map[int64][]*engine.Snapshot
	last  int64
}

func (r *record) add(s *engine.Snapshot) {
	r.mu.Lock()
	r.steps[s.Step] = append(r.steps[s.Step], s)
	r.last = max(r.last, s.Step)
	r.mu.Unlock()
}

// near returns the engine's snapshots of steps step-1 to step+1.
func (r *record) near(step int64) []*engine.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*engine.Snapshot
	for s := step - 1; s <= step+1; s++ {
		out = append(out, r.steps[s]...)
	}
	return out
}

// sameBlocks says how two cache snapshots differ ("" where every block,
// table and metric agrees).
func sameBlocks(a, b *kvcache.Snapshot) string {
	if len(a.Blocks) != len(b.Blocks) || len(a.Host) != len(b.Host) || len(a.Seqs) != len(b.Seqs) {
		return fmt.Sprintf("%d/%d blocks, %d/%d host, %d/%d sequences", len(a.Blocks), len(b.Blocks), len(a.Host), len(b.Host), len(a.Seqs), len(b.Seqs))
	}
	for i := range a.Blocks {
		x, y := a.Blocks[i], b.Blocks[i]
		if x.ID != y.ID || x.State != y.State || x.Ref != y.Ref || x.Filled != y.Filled || x.Hashed != y.Hashed || x.Hash != y.Hash ||
			x.LastAccess != y.LastAccess || x.Hits != y.Hits || x.EvictRank != y.EvictRank || !slices.Equal(x.Owners, y.Owners) {
			return fmt.Sprintf("block %d: %+v vs %+v", i, x, y)
		}
	}
	for i := range a.Seqs {
		if a.Seqs[i].ID != b.Seqs[i].ID || !slices.Equal(a.Seqs[i].Blocks, b.Seqs[i].Blocks) {
			return fmt.Sprintf("sequence %d: %+v vs %+v", i, a.Seqs[i], b.Seqs[i])
		}
	}
	if a.Metrics != b.Metrics {
		return fmt.Sprintf("metrics %+v vs %+v", a.Metrics, b.Metrics)
	}
	return ""
}

// heatmap draws a snapshot as the inspector's heatmap does, in every
// colour mode.
func heatmap(s *kvcache.Snapshot) [][]byte {
	var out [][]byte
	for _, m := range inspector.Modes() {
		img, _ := inspector.Image(s, inspector.View{Mode: m}, 320, 200)
		out = append(out, img.Pix)
	}
	return out
}

// Must show 3: a kvscope server under load from four clients, and the
// remote inspector attached to it with the API key. Every snapshot the
// remote inspector draws is the server engine's own snapshot of that step
// (or the step before or after): the same blocks, tables and metrics, and
// the same heatmap pixels in every colour mode; when the load stops, the
// remote inspector catches up with the engine's last snapshot exactly.
// The event log shows the server's requests and the gauges its figures.
func TestRemoteInspectorMatchesServer(t *testing.T) {
	ts, e := serve(t)
	rec := &record{steps: map[int64][]*engine.Snapshot{}}
	t.Cleanup(e.Subscribe(rec.add))

	test.NewTempApp(t)
	insp := inspector.New()
	w := test.NewWindow(insp)
	t.Cleanup(w.Close)
	c, err := NewClient(ts.URL, testKey)
	if err != nil {
		t.Fatal(err)
	}
	var feed *Feed
	var statuses []string
	uithread.Locked(func() {
		feed = Attach(c, insp, 50*time.Millisecond, func(s string) { statuses = append(statuses, s) })
	})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			feed.Stop()
		}
	}
	t.Cleanup(stop)

	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, ts.URL, 4)
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the server goes, should the test stop early
	checked, busy := 0, 0
	var lastStep int64 = -1
	for checked < 30 || busy < 5 {
		var shown *kvcache.Snapshot
		var step int64
		uithread.WaitFor(t, "the remote inspector to show a new step", func() bool {
			r := feed.Shown()
			if r == nil || r.Snapshot.Step == lastStep {
				return false
			}
			shown, step = insp.Snapshot(), r.Snapshot.Step
			if shown != r.Snapshot.Cache {
				t.Errorf("the inspector draws another snapshot than the feed's last")
			}
			return true
		})
		lastStep = step
		cands := rec.near(step)
		var whys []string
		matched := false
		for _, s := range cands {
			why := sameBlocks(shown, s.Cache)
			if why == "" && !slices.EqualFunc(heatmap(shown), heatmap(s.Cache), bytes.Equal) {
				why = "the heatmaps differ"
			}
			if why == "" {
				matched = true
				break
			}
			whys = append(whys, fmt.Sprintf("step %d: %s", s.Step, why))
		}
		if !matched {
			t.Fatalf("remote snapshot of step %d matches none of the engine's %d snapshots of steps %d..%d: %s", step, len(cands), step-1, step+1, strings.Join(whys, "; "))
		}
		checked++
		if shown.Metrics.UsedBlocks > 0 {
			busy++
		}
	}
	cancel()
	wg.Wait()

	// Idle: the remote inspector shows the engine's last snapshot.
	uithread.WaitFor(t, "the remote inspector to catch up", func() bool {
		s := e.Snapshot()
		r := feed.Shown()
		return r != nil && r.Snapshot.Step == s.Step && sameBlocks(insp.Snapshot(), s.Cache) == ""
	})
	uithread.WaitFor(t, "the server's requests in the event log", func() bool {
		for _, l := range insp.Log.Lines() {
			if strings.Contains(l, "API: Lily had a dog") {
				return true
			}
		}
		return false
	})
	uithread.Locked(func() {
		if len(statuses) == 0 || !strings.Contains(statuses[len(statuses)-1], "Following "+ts.URL+" (stories260K)") {
			t.Errorf("statuses %q", statuses)
		}
	})
	stop()
}

// A wrong key, a server of another schema and a bad address are refused,
// each saying why.
func TestClientRefuses(t *testing.T) {
	ts, _ := serve(t)
	c, _ := NewClient(ts.URL, "wrong")
	if _, err := c.Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "API key") {
		t.Errorf("wrong key: %v", err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"schema_version": 99, "snapshot": {}}`)
	}))
	defer other.Close()
	c, _ = NewClient(other.URL, "")
	if _, err := c.Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("schema 99: %v", err)
	}
	for _, bad := range []string{"", "host:8080", "ftp://host", "http://host/?a=b"} {
		if _, err := NewClient(bad, ""); err == nil {
			t.Errorf("NewClient(%q) took it", bad)
		}
	}
}

// The event stream's dropped events and keep-alives are read as such.
func TestClientEvents(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("since") != "7" {
			http.Error(w, "since", 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: dropped\ndata: {\"dropped\": 3}\n\n: keep-alive\n\nid: 8\ndata: {\"ID\": 8, \"Kind\": \"alloc\", \"Text\": \"block 1 allocated\"}\n\nid: 9\ndata: {\"ID\": 9, \"Kind\": \"free\"}\n\n")
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "")
	var got []uint64
	var dropped uint64
	next, err := c.Events(context.Background(), 7, func(ev engine.Event) { got = append(got, ev.ID) }, func(n uint64) { dropped += n })
	if next != 9 || !slices.Equal(got, []uint64{8, 9}) || dropped != 3 || err == nil || !strings.Contains(err.Error(), "closed the stream") {
		t.Errorf("next %d, ids %v, dropped %d, err %v", next, got, dropped, err)
	}
}
