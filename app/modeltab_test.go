package app

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/uithread"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/hub"
)

// modelHub is a local fake of the Hugging Face hub serving one file under
// the name of the catalog's first entry: HEAD gives the LFS headers, GET
// the bytes (with ranges) in small pieces, and stops at hold bytes until
// hold is lifted.
type modelHub struct {
	srv     *httptest.Server
	ref     hub.Ref
	content []byte

	mu     sync.Mutex
	lie    bool          // announce another file's sha256
	hold   int           // a GET stops once the file's first hold bytes are sent (-1: never)
	lifted chan struct{} // closed when hold is lifted
	ranges []string      // the Range header of each GET, "" for none
	auths  []string      // the Authorization header of each request
}

func newModelHub(t *testing.T, content []byte) *modelHub {
	t.Helper()
	h := &modelHub{ref: hub.Catalog[0].Ref, content: content, hold: -1, lifted: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(func() { h.lift(); h.srv.Close() })
	return h
}

// holdAt makes GETs stop after the file's first n bytes.
func (h *modelHub) holdAt(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold, h.lifted = n, make(chan struct{})
}

// lift lets held and later GETs go on to the end.
func (h *modelHub) lift() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold >= 0 {
		h.hold = -1
		close(h.lifted)
	}
}

func (h *modelHub) gets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ranges...)
}

func (h *modelHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	lie := h.lie
	if r.Method == http.MethodGet {
		h.ranges = append(h.ranges, r.Header.Get("Range"))
	}
	h.mu.Unlock()
	if r.URL.Path != "/"+h.ref.Repo+"/resolve/main/"+h.ref.File {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	sum := sha256.Sum256(h.content)
	if lie {
		sum = sha256.Sum256([]byte("another file"))
	}
	w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
	w.Header().Set("X-Linked-Size", strconv.Itoa(len(h.content)))
	w.Header().Set("X-Repo-Commit", "0123abcd")
	w.Header().Set("Accept-Ranges", "bytes")
	start, status := 0, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n >= len(h.content) {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(h.content)-1, len(h.content)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(h.content)-start))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	const piece = 16 << 10
	for pos := start; pos < len(h.content); {
		h.mu.Lock()
		hold, lifted := h.hold, h.lifted
		h.mu.Unlock()
		if hold >= 0 && pos >= hold {
			select {
			case <-lifted:
				continue
			case <-r.Context().Done():
				return
			}
		}
		end := min(pos+piece, len(h.content))
		if hold > pos {
			end = min(end, hold)
		}
		if _, err := w.Write(h.content[pos:end]); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		pos = end
		time.Sleep(5 * time.Millisecond) // progress events have time to show speed
	}
}

// hubFolders points the environment at h and at fresh home, cache and
// models folders, and returns the models folder.
func hubFolders(t *testing.T, h *modelHub) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	for _, k := range []string{"LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_ENDPOINT", h.srv.URL)
	t.Setenv("HF_TOKEN", "test-token")
	dir := filepath.Join(t.TempDir(), "models")
	t.Setenv(ModelsDirEnv, dir)
	return dir
}

// downloadModel is a small real GGUF file (random weights) of the catalog
// entry's architecture, some hundreds of KB.
func downloadModel(t *testing.T) []byte {
	t.Helper()
	b, err := synth.Generate(synth.Shape{Name: "fake download", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFDim: 128, Vocab: 4096, Context: 256, Type: quant.Q8_0}, 5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tabRow returns the Models tab's widgets of the first catalog entry, once
// the tab has looked for earlier downloads.
func tabRow(t *testing.T, a *App) (*catRow, *catView) {
	t.Helper()
	var r *catRow
	var cv *catView
	uithread.WaitFor(t, "the catalog's state", func() bool {
		r, cv = a.models.rows[0], a.models.views[0].catalog[0]
		return r.state != dlUnknown
	})
	return r, cv
}

func partSize(path string) int64 {
	st, err := os.Stat(path + ".part")
	if err != nil {
		return -1
	}
	return st.Size()
}

func TestDownloadCompletesAndOpens(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	h.holdAt(len(content) / 2)
	a, _ := newApp(t, t.TempDir())
	_, cv := tabRow(t, a)
	uithread.Locked(func() {
		if !strings.Contains(cv.title.Text, hub.Catalog[0].Title) || !strings.Contains(cv.detail.Text, "MB") || !cv.download.Visible() {
			t.Fatalf("catalog row %q / %q, download button shown %v", cv.title.Text, cv.detail.Text, cv.download.Visible())
		}
		test.Tap(cv.download)
	})
	uithread.WaitFor(t, "the download to reach the held half", func() bool { return partSize(dest) == int64(len(content)/2) })
	uithread.WaitFor(t, "a speed and time left", func() bool {
		return strings.Contains(cv.speed.Text, "/s") && strings.Contains(cv.speed.Text, "left") && cv.bar.Value > 0 && cv.bar.Value < 1
	})
	h.lift()
	uithread.WaitFor(t, "the download to finish", func() bool { return a.models.rows[0].state == dlDone })
	uithread.Locked(func() {
		if cv.bar.Value != 1 || !cv.open.Visible() || cv.open.Disabled() || cv.errLine.Text != "" {
			t.Errorf("done: bar %v, open shown %v disabled %v, error %q", cv.bar.Value, cv.open.Visible(), cv.open.Disabled(), cv.errLine.Text)
		}
		if got := a.models.locals; len(got) == 0 || got[0].Path != dest || !got[0].Runnable() {
			t.Errorf("the files found do not start with the runnable download: %+v", got)
		}
	})
	got, err := os.ReadFile(dest)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(content) {
		t.Fatalf("downloaded file: %v (%d bytes of %d)", err, len(got), len(content))
	}
	h.mu.Lock()
	for _, au := range h.auths {
		if au != "Bearer test-token" {
			t.Errorf("a request carried Authorization %q, want HF_TOKEN's", au)
		}
	}
	h.mu.Unlock()
	uithread.Locked(func() { test.Tap(cv.open) })
	uithread.WaitFor(t, "the downloaded model to open", func() bool { return a.mdl != nil && a.mdl.path == dest })
}

func TestDownloadPausesAndResumesFromThePart(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	held := len(content) / 3
	h.holdAt(held)
	a, _ := newApp(t, t.TempDir())
	// The first-run screen's twin of the row drives this one.
	tabRow(t, a)
	var cv *catView
	uithread.Locked(func() {
		cv = a.models.views[1].catalog[0]
		test.Tap(cv.download)
	})
	uithread.WaitFor(t, "the held third", func() bool { return partSize(dest) == int64(held) })
	uithread.Locked(func() {
		if !cv.pause.Visible() {
			t.Fatal("no Pause button while downloading")
		}
		test.Tap(cv.pause)
	})
	want := "Paused at " + humanize.Bytes(uint64(held))
	uithread.WaitFor(t, "the paused line", func() bool { return strings.HasPrefix(cv.status.Text, want) && cv.resume.Visible() })
	uithread.Locked(func() {
		if w := cv.bar.Size().Width; w < 100 {
			t.Errorf("the first-run screen's progress bar is %v wide: the row was not laid out again when it appeared", w)
		}
		tab := a.models.views[0].catalog[0]
		if tab.status.Text != cv.status.Text || !tab.resume.Visible() || !tab.discard.Visible() {
			t.Errorf("the Models tab shows %q (resume %v, discard %v), the first-run screen %q", tab.status.Text, tab.resume.Visible(), tab.discard.Visible(), cv.status.Text)
		}
	})
	if n := partSize(dest); n != int64(held) {
		t.Fatalf("after the pause the part holds %d bytes, want %d", n, held)
	}
	h.lift()
	uithread.Locked(func() { test.Tap(cv.resume) })
	uithread.WaitFor(t, "the resumed download to finish", func() bool { return a.models.rows[0].state == dlDone && cv.bar.Value == 1 })
	gets := h.gets()
	if len(gets) != 2 || gets[0] != "" || gets[1] != fmt.Sprintf("bytes=%d-", held) {
		t.Errorf("GETs with ranges %q, want a whole one then one from byte %d", gets, held)
	}
	got, err := os.ReadFile(dest)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(content) {
		t.Fatalf("resumed file: %v (%d bytes of %d)", err, len(got), len(content))
	}
}

func TestBadHashShowsTheErrorAndLeavesNothing(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	h.lie = true
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	a, _ := newApp(t, t.TempDir())
	_, cv := tabRow(t, a)
	uithread.Locked(func() { test.Tap(cv.download) })
	uithread.WaitFor(t, "the failure", func() bool { return a.models.rows[0].state == dlFailed })
	uithread.Locked(func() {
		if !strings.Contains(cv.errLine.Text, "sha256") || !cv.errLine.Visible() {
			t.Errorf("error line %q (shown %v), want the hash mismatch", cv.errLine.Text, cv.errLine.Visible())
		}
		if !cv.download.Visible() || cv.resume.Visible() || cv.open.Visible() {
			t.Errorf("after a bad hash: download %v, resume %v, open %v; want only Download", cv.download.Visible(), cv.resume.Visible(), cv.open.Visible())
		}
	})
	for _, p := range []string{dest, dest + ".part", dest + ".part.json"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after a bad hash", p)
		}
	}
}

// Closing the app mid-download keeps the part; a second App on the same
// data and models folders shows it paused and resumes it to the end.
func TestDownloadResumesAfterRestart(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	held := len(content) / 2
	h.holdAt(held)
	data := t.TempDir()
	a, _ := newApp(t, data)
	_, cv := tabRow(t, a)
	uithread.Locked(func() { test.Tap(cv.download) })
	uithread.WaitFor(t, "the held half", func() bool { return partSize(dest) == int64(held) })
	uithread.Locked(a.Close)
	if n := partSize(dest); n != int64(held) {
		t.Fatalf("after closing the app the part holds %d bytes, want the %d received", n, held)
	}
	if _, err := os.Stat(dest + ".part.json"); err != nil {
		t.Fatalf("closing the app lost the part's record: %v", err)
	}

	b, _ := newApp(t, data)
	r2, cv2 := tabRow(t, b)
	want := fmt.Sprintf("Paused at %s of %s — Resume", humanize.Bytes(uint64(held)), humanize.Bytes(uint64(len(content))))
	uithread.Locked(func() {
		if r2.state != dlPaused || cv2.status.Text != want || !cv2.resume.Visible() {
			t.Fatalf("after the restart: state %d, status %q (want %q), resume %v", r2.state, cv2.status.Text, want, cv2.resume.Visible())
		}
		if v := cv2.bar.Value; v < 0.49 || v > 0.51 {
			t.Errorf("the paused bar is at %v, want the half", v)
		}
	})
	h.lift()
	uithread.Locked(func() { test.Tap(cv2.resume) })
	uithread.WaitFor(t, "the resumed download to finish", func() bool { return r2.state == dlDone && cv2.bar.Value == 1 })
	if gets := h.gets(); len(gets) != 2 || gets[1] != fmt.Sprintf("bytes=%d-", held) {
		t.Errorf("GETs with ranges %q, want the second from byte %d", gets, held)
	}
	got, err := os.ReadFile(dest)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(content) {
		t.Fatalf("file after the restart: %v (%d bytes of %d)", err, len(got), len(content))
	}
}

// shortDisk makes the downloads' free-space check answer *free bytes
// (read atomically, so the test may change it while the app runs).
func shortDisk(t *testing.T, free *atomic.Int64) {
	t.Helper()
	hubFreeSpace = func(string) (uint64, error) { return uint64(free.Load()), nil }
	t.Cleanup(func() { hubFreeSpace = nil })
}

// A disk too small for the file is found before the download starts: the
// row says so in words (how much is needed and free, what to do), nothing
// is fetched or written, and Download works once there is room.
func TestShortDiskRefusesTheDownload(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	var free atomic.Int64
	free.Store(int64(len(content) / 2))
	shortDisk(t, &free)
	a, _ := newApp(t, t.TempDir())
	r, cv := tabRow(t, a)
	uithread.Locked(func() { test.Tap(cv.download) })
	uithread.WaitFor(t, "the refusal", func() bool { return r.state == dlFailed })
	uithread.Locked(func() {
		want := fmt.Sprintf("Not enough disk space: the download needs %s more and only %s is free in ",
			humanize.IBytes(uint64(len(content))), humanize.IBytes(uint64(len(content)/2)))
		if !strings.HasPrefix(cv.errLine.Text, want) || !strings.Contains(cv.errLine.Text, ModelsDirEnv) || !cv.errLine.Visible() {
			t.Errorf("error line %q (shown %v), want it to start %q and name %s", cv.errLine.Text, cv.errLine.Visible(), want, ModelsDirEnv)
		}
		if !cv.download.Visible() || cv.download.Disabled() || cv.resume.Visible() || cv.bar.Visible() {
			t.Errorf("after the refusal: download %v (disabled %v), resume %v, bar %v; want only Download", cv.download.Visible(), cv.download.Disabled(), cv.resume.Visible(), cv.bar.Visible())
		}
	})
	if gets := h.gets(); len(gets) != 0 {
		t.Errorf("%d GETs after a refusal that should come before the download: %q", len(gets), gets)
	}
	for _, p := range []string{dest, dest + ".part", dest + ".part.json", filepath.Dir(dest)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was made although the disk was short", p)
		}
	}

	free.Store(1 << 40)
	uithread.Locked(func() { test.Tap(cv.download) })
	uithread.WaitFor(t, "the download once there is room", func() bool { return r.state == dlDone })
	uithread.Locked(func() {
		if cv.errLine.Visible() || cv.errLine.Text != "" {
			t.Errorf("the short-disk error %q stays after the download succeeded", cv.errLine.Text)
		}
	})
	got, err := os.ReadFile(dest)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(content) {
		t.Fatalf("downloaded file: %v (%d bytes of %d)", err, len(got), len(content))
	}
}

func TestScanListsFilesWithWhyNot(t *testing.T) {
	h := newModelHub(t, downloadModel(t))
	dir := hubFolders(t, h)
	good := filepath.Join(dir, "me", "tiny", "good.gguf")
	bad := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "llama.cpp", "broken.gguf")
	for p, b := range map[string][]byte{good: downloadModel(t), bad: []byte("not a gguf file")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := newApp(t, t.TempDir())
	uithread.WaitFor(t, "the scan", func() bool { return !a.models.scanning && len(a.models.locals) == 2 })
	uithread.Locked(func() {
		v := a.models.views[1] // the first-run screen
		if !strings.Contains(v.scan.Text, "2 GGUF files found, 1 of which") {
			t.Errorf("scan line %q", v.scan.Text)
		}
		l0, l1 := a.models.locals[0], a.models.locals[1]
		if l0.Path != good || !l0.Runnable() || l1.Path != bad || l1.Runnable() {
			t.Fatalf("found %+v", a.models.locals)
		}
		if d := localDetail(l0); !strings.Contains(d, "llama") || !strings.Contains(d, "Q8_0") || !strings.Contains(d, "kB") {
			t.Errorf("detail %q lacks the architecture, quantization or size", d)
		}
		if w := whyNot(l1); !strings.Contains(w, "GGUF") {
			t.Errorf("why not %q", w)
		}
		if len(v.locals.Objects) != 2 {
			t.Errorf("%d rows drawn, want 2", len(v.locals.Objects))
		}
	})
	// One click on the runnable file's Open, in the Models tab, opens it.
	uithread.Locked(func() {
		row := a.models.views[0].locals.Objects[0]
		test.Tap(findButton(t, row, "Open"))
	})
	uithread.WaitFor(t, "the found model to open", func() bool { return a.mdl != nil && a.mdl.path == good })
}

// findButton returns the button labelled text in o's tree.
func findButton(t *testing.T, o fyne.CanvasObject, text string) *widget.Button {
	t.Helper()
	var walk func(fyne.CanvasObject) *widget.Button
	walk = func(o fyne.CanvasObject) *widget.Button {
		switch x := o.(type) {
		case *widget.Button:
			if x.Text == text {
				return x
			}
		case *fyne.Container:
			for _, c := range x.Objects {
				if b := walk(c); b != nil {
					return b
				}
			}
		}
		return nil
	}
	b := walk(o)
	if b == nil {
		t.Fatalf("no %q button", text)
	}
	return b
}

func TestDiscardDropsThePart(t *testing.T) {
	content := downloadModel(t)
	h := newModelHub(t, content)
	dir := hubFolders(t, h)
	dest := filepath.Join(dir, filepath.FromSlash(h.ref.Repo), h.ref.File)
	h.holdAt(len(content) / 4)
	a, _ := newApp(t, t.TempDir())
	_, cv := tabRow(t, a)
	uithread.Locked(func() { test.Tap(cv.download) })
	uithread.WaitFor(t, "the held quarter", func() bool { return partSize(dest) == int64(len(content)/4) })
	uithread.Locked(func() { test.Tap(cv.pause) })
	uithread.WaitFor(t, "the pause", func() bool { return a.models.rows[0].state == dlPaused && cv.discard.Visible() })
	uithread.Locked(func() { test.Tap(cv.discard) })
	uithread.WaitFor(t, "the discard", func() bool { return a.models.rows[0].state == dlNone })
	uithread.Locked(func() {
		if !cv.download.Visible() || cv.resume.Visible() || cv.discard.Visible() || cv.bar.Visible() {
			t.Errorf("after Discard: download %v, resume %v, discard %v, bar %v; want only Download", cv.download.Visible(), cv.resume.Visible(), cv.discard.Visible(), cv.bar.Visible())
		}
	})
	if n := partSize(dest); n != -1 {
		t.Errorf("the part is still there (%d bytes) after Discard", n)
	}
}
