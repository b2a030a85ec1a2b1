package remote

import (
	"fmt"
	"image"
	"image/png"
	"kvscope/vllm/vllmtest"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"kvscope/app/uithread"
	"kvscope/internal/testshared"
)

func mustPack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countingMetrics serves a vLLM /metrics page whose figures move with
// each scrape.
func countingMetrics(t testing.TB) string {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} %g\n", 0.3+0.1*float64(i%5))
		fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\"} %d\n", 1000*i)
		fmt.Fprintf(w, "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\"} %d\n", 600*i+50*(i%3))
		fmt.Fprintf(w, "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine=\"0\"} %d\n", i/2)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} %d\n", 3+i%4)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} %d\n", i%2)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// screenshotLoad publishes a cache like a chat service's: a long shared
// system prompt, conversations branching from it over several turns, some
// of their blocks evicted at the end; it selects one chain.
func screenshotLoad(t *testing.T, p *vllmPanel, pub *vllmtest.Publisher) {
	rng := rand.New(rand.NewPCG(1, 2))
	next := uint64(1)
	chain := func(parent any, n int) []uint64 {
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = next
			next++
		}
		pub.Publish(stored(hs, parent, 16))
		return hs
	}
	system := chain(nil, 6)
	var leaves []uint64
	for range 7 {
		turn := chain(system[len(system)-1], 1+rng.IntN(4))
		for range rng.IntN(3) {
			more := chain(turn[len(turn)-1], 1+rng.IntN(5))
			leaves = append(leaves, more[len(more)-1])
		}
		leaves = append(leaves, turn[len(turn)-1])
	}
	other := chain(nil, 3) // a prompt without the system prompt
	chain(other[1], 2)
	want := int(next - 1)
	uithread.WaitFor(t, "the published cache", func() bool { return p.tree.Tree().Blocks == want })
	time.Sleep(4 * time.Second) // a few metrics samples for the charts
	pub.WaitSubscribed()
	pub.Publish(vllmtest.Removed(leaves[0], leaves[3]))
	uithread.WaitFor(t, "the evictions", func() bool { return p.tree.Tree().Blocks == want-2 && len(p.tree.Marks()) == 2 })
	if tok, err := LoadTokenizer(testshared.Dir() + "/models/stories260K.gguf"); err == nil {
		uithread.Locked(func() { p.SetTokenizer(tok, "stories260K.gguf") })
	}
	uithread.Locked(func() {
		for i, n := range p.tree.Tree().Nodes {
			if n.Depth == 8 {
				p.tree.Select(i)
				break
			}
		}
		p.details.SetText(p.tree.Describe(p.tree.Selected()))
	})
}

func savePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
