package remote

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/uithread"
	"kvscope/cli"
	"kvscope/internal/testshared"
)

// serveChild is the environment variable that makes this test binary run
// `kvscope serve` with the arguments in serveArgs (split on newlines)
// instead of the tests: a second kvscope process.
const (
	serveChild = "KVSCOPE_REMOTE_SERVE_CHILD"
	serveArgs  = "KVSCOPE_REMOTE_SERVE_ARGS"
)

func TestMain(m *testing.M) {
	if os.Getenv(serveChild) == "1" {
		os.Exit(cli.Main(strings.Split(os.Getenv(serveArgs), "\n"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestRemoteInspectorAttachesToAnotherProcess is the two processes:
// `kvscope serve` in a process of its own, under load from four clients,
// and an inspector here attached to it over HTTP with its API key. While
// the load runs, the inspector follows the server's steps with blocks in
// use; once it stops, the inspector shows exactly the server's own last
// snapshot (blocks, tables, metrics and the heatmap's pixels in every
// colour mode). TestRemoteInspectorMatchesServer checks the same within one
// step, against the engine's own snapshots, with the server in this process.
func TestRemoteInspectorAttachesToAnotherProcess(t *testing.T) {
	path := testshared.Path(t, "models/stories260K.gguf")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChild+"=1", serveArgs+"="+strings.Join([]string{
		"serve", "-m", path, "--addr", "127.0.0.1:0", "--api-key", testKey, "--backend", "go"}, "\n"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatal("kvscope serve did not say where it listens")
	}

	test.NewTempApp(t)
	insp := inspector.New()
	w := test.NewWindow(insp)
	t.Cleanup(w.Close)
	c, err := NewClient(url, testKey)
	if err != nil {
		t.Fatal(err)
	}
	var feed *Feed
	uithread.Locked(func() { feed = Attach(c, insp, 50*time.Millisecond, func(string) {}) })
	t.Cleanup(feed.Stop)

	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, url, 4)
	t.Cleanup(func() { cancel(); wg.Wait() })
	steps, busy := map[int64]bool{}, 0
	uithread.WaitFor(t, "the inspector to show 5 of the server's steps, 3 with blocks in use", func() bool {
		if r := feed.Shown(); r != nil && !steps[r.Snapshot.Step] {
			steps[r.Snapshot.Step] = true
			if insp.Snapshot().Metrics.UsedBlocks > 0 {
				busy++
			}
		}
		return len(steps) >= 5 && busy >= 3
	})
	cancel()
	wg.Wait()

	// Idle: the inspector shows the other process's own last snapshot.
	var why string
	uithread.WaitFor(t, "the inspector to show the server's last snapshot", func() bool {
		s, err := c.Snapshot(context.Background())
		if err != nil {
			why = err.Error()
			return false
		}
		r := feed.Shown()
		if r == nil || r.Snapshot.Step != s.Snapshot.Step {
			why = "not at the server's step yet"
			return false
		}
		why = sameBlocks(insp.Snapshot(), s.Snapshot.Cache)
		if why == "" {
			for i, row := range heatmap(insp.Snapshot()) {
				if string(row) != string(heatmap(s.Snapshot.Cache)[i]) {
					why = "the heatmaps differ"
				}
			}
		}
		return why == ""
	})
	if why != "" {
		t.Error(why)
	}
}
