package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// fakeHub is a hub and a CDN on two local servers (two ports of
// 127.0.0.1): the hub answers resolve requests with a redirect to the CDN
// and the LFS headers, as huggingface.co does; the CDN serves the bytes with
// ranges, and can fail on cue.
type fakeHub struct {
	hub, cdn *httptest.Server
	repo     string
	file     string

	mu       sync.Mutex
	content  []byte
	etag     string // X-Linked-Etag, quoted when sent
	commit   string
	direct   bool   // the hub serves the file itself (no LFS headers, git ETag)
	bare     bool   // the redirect lacks the X-Linked-* headers (as some mirrors)
	noRanges bool   // the CDN ignores Range
	cuts     []int  // the i-th CDN GET stops after cuts[i] bytes of its body (-1: no cut)
	stalls   []int  // the i-th CDN GET stalls after stalls[i] bytes (-1: no stall)
	hubCode  int    // the hub answers this status (with errCode) instead
	errCode  string // X-Error-Code with hubCode
	log      []hit  // every request, in order
	stop     chan struct{}
	gets     int
}

// hit is one request the fake servers saw.
type hit struct {
	server, method, path, rng, auth string
}

func newFakeHub(t *testing.T, size int) *fakeHub {
	t.Helper()
	h := &fakeHub{repo: "org/model-GGUF", file: "model-Q8_0.gguf", commit: "0123abcd", stop: make(chan struct{})}
	h.setContent(randomBytes(size, 1))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	t.Cleanup(func() {
		close(h.stop)
		h.hub.Close()
		h.cdn.Close()
	})
	return h
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// setContent replaces the file, with its true sha256 as ETag.
func (h *fakeHub) setContent(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.content = b
	h.etag = sha(b)
}

func (h *fakeHub) record(server string, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, hit{server, r.Method, r.URL.Path, r.Header.Get("Range"), r.Header.Get("Authorization")})
}

// hits returns the requests of server ("hub" or "cdn") and method.
func (h *fakeHub) hits(server, method string) []hit {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hit
	for _, x := range h.log {
		if x.server == server && (method == "" || x.method == method) {
			out = append(out, x)
		}
	}
	return out
}

func (h *fakeHub) ref() Ref { return Ref{Repo: h.repo, File: h.file} }

func (h *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.record("hub", r)
	h.mu.Lock()
	content, etag, direct, code, errCode := h.content, h.etag, h.direct, h.hubCode, h.errCode
	h.mu.Unlock()
	if r.URL.Path != "/"+h.repo+"/resolve/main/"+h.file {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if code != 0 {
		w.Header().Set("X-Error-Code", errCode)
		w.Header().Set("X-Error-Message", "refused by the fake hub")
		http.Error(w, "refused", code)
		return
	}
	w.Header().Set("X-Repo-Commit", h.commit)
	if direct {
		// A small file kept in git: its ETag is the git blob id.
		w.Header().Set("ETag", `"`+sha(content)[:40]+`"`)
		h.serveBytes(w, r, content)
		return
	}
	if !h.bare {
		w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(content)))
	}
	w.Header().Set("Location", h.cdn.URL+"/blobs/"+etag)
	w.WriteHeader(http.StatusFound)
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.record("cdn", r)
	h.mu.Lock()
	content := h.content
	h.mu.Unlock()
	w.Header().Set("ETag", `"`+sha(content)+`"`)
	h.serveBytes(w, r, content)
}

// serveBytes serves content with Range support, cutting or stalling the
// connection as planned for this GET.
func (h *fakeHub) serveBytes(w http.ResponseWriter, r *http.Request, content []byte) {
	h.mu.Lock()
	i := h.gets
	if r.Method == http.MethodGet {
		h.gets++
	}
	noRanges := h.noRanges
	cut, stall := -1, -1
	if r.Method == http.MethodGet && i < len(h.cuts) {
		cut = h.cuts[i]
	}
	if r.Method == http.MethodGet && i < len(h.stalls) {
		stall = h.stalls[i]
	}
	h.mu.Unlock()

	start, status := 0, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !noRanges {
		s, ok := strings.CutPrefix(rg, "bytes=")
		n, err := strconv.Atoi(strings.TrimSuffix(s, "-"))
		if !ok || err != nil || n >= len(content) {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(content)-1, len(content)))
	}
	if !noRanges {
		w.Header().Set("Accept-Ranges", "bytes")
	}
	body := content[start:]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	switch {
	case cut >= 0 && cut < len(body):
		w.Write(body[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the server drops the connection
	case stall >= 0 && stall < len(body):
		w.Write(body[:stall])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-h.stop:
		}
		return
	}
	w.Write(body)
}

// testClient is a Client of the fake hub that puts files under a new
// folder, with quick retries.
func testClient(t *testing.T, h *fakeHub) *Client {
	t.Helper()
	return &Client{
		Endpoint:     h.hub.URL,
		Token:        "secret-token",
		Dir:          filepath.Join(t.TempDir(), "models"),
		Retries:      3,
		RetryDelay:   time.Millisecond,
		StallTimeout: 2 * time.Second,
	}
}

func TestDownload(t *testing.T) {
	const size = 300_000
	cases := []struct {
		name       string
		setup      func(h *fakeHub, c *Client)
		wantRanges []string // Range headers of the CDN's (or direct hub's) GETs
		wantNote   string   // a progress note that must appear
		wantSHA    bool     // Result.SHA256 is set
	}{
		{name: "plain", wantRanges: []string{""}, wantSHA: true},
		{
			name:       "connection cut mid-way, resumed by a retry",
			setup:      func(h *fakeHub, c *Client) { h.cuts = []int{100_000} },
			wantRanges: []string{"", "bytes=100000-"}, wantNote: "connection 1 failed", wantSHA: true,
		},
		{
			name:       "cut twice",
			setup:      func(h *fakeHub, c *Client) { h.cuts = []int{70_000, 50_000} },
			wantRanges: []string{"", "bytes=70000-", "bytes=120000-"}, wantSHA: true,
		},
		{
			name: "stalled connection, resumed by a retry",
			setup: func(h *fakeHub, c *Client) {
				h.stalls = []int{50_000}
				c.StallTimeout = 200 * time.Millisecond
			},
			wantRanges: []string{"", "bytes=50000-"}, wantNote: "no data arrived", wantSHA: true,
		},
		{
			name:       "server without ranges: starts over",
			setup:      func(h *fakeHub, c *Client) { h.cuts = []int{100_000}; h.noRanges = true },
			wantRanges: []string{"", "bytes=100000-"}, wantNote: "does not resume", wantSHA: true,
		},
		{
			name:       "redirect without the LFS headers: size and hash from the CDN",
			setup:      func(h *fakeHub, c *Client) { h.bare = true; h.cuts = []int{100_000} },
			wantRanges: []string{"", "bytes=100000-"}, wantSHA: true,
		},
		{
			name:       "file kept in git, served by the hub itself",
			setup:      func(h *fakeHub, c *Client) { h.direct = true },
			wantRanges: []string{""}, wantSHA: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t, size)
			c := testClient(t, h)
			if tc.setup != nil {
				tc.setup(h, c)
			}
			var notes []string
			var last Progress
			res, err := c.Download(context.Background(), h.ref(), func(p Progress) {
				if p.Note != "" {
					notes = append(notes, p.Note)
				}
				last = p
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			if sha(got) != sha(h.content) {
				t.Fatalf("downloaded bytes differ from the served file (%d bytes, want %d)", len(got), size)
			}
			if want := filepath.Join(c.Dir, "org", "model-GGUF", "model-Q8_0.gguf"); res.Path != want {
				t.Errorf("path %s, want %s", res.Path, want)
			}
			if (res.SHA256 != "") != tc.wantSHA || tc.wantSHA && res.SHA256 != sha(h.content) {
				t.Errorf("Result.SHA256 = %q, want set: %v", res.SHA256, tc.wantSHA)
			}
			if res.Commit != "0123abcd" || res.Size != size || res.Existed {
				t.Errorf("result %+v", res)
			}
			for _, p := range []string{res.Path + partSuffix, res.Path + metaSuffix, res.Path + lockSuffix} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s left behind", p)
				}
			}
			server := "cdn"
			if h.direct {
				server = "hub"
			}
			var ranges []string
			for _, x := range h.hits(server, http.MethodGet) {
				ranges = append(ranges, x.rng)
			}
			if fmt.Sprint(ranges) != fmt.Sprint(tc.wantRanges) {
				t.Errorf("GET ranges %q, want %q", ranges, tc.wantRanges)
			}
			for _, x := range h.hits("cdn", "") {
				if x.auth != "" {
					t.Errorf("the token went to the CDN with a %s request", x.method)
				}
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(notes, "\n"), tc.wantNote) {
				t.Errorf("notes %q, want one with %q", notes, tc.wantNote)
			}
			if last.Phase != PhaseDone || last.Done != size || last.Total != size || last.Fraction() != 1 {
				t.Errorf("last progress %+v, want done with %d bytes", last, size)
			}
		})
	}
}

// The token goes to the hub, never to the CDN the hub redirects to, though
// both are on 127.0.0.1 (Go's own redirect policy compares host names only).
func TestTokenNotSentToOtherHost(t *testing.T) {
	h := newFakeHub(t, 10_000)
	h.cuts = []int{4000} // a retry goes through the redirect again
	c := testClient(t, h)
	if _, err := c.Download(context.Background(), h.ref(), nil); err != nil {
		t.Fatal(err)
	}
	hub, cdn := h.hits("hub", ""), h.hits("cdn", "")
	if len(hub) < 3 || len(cdn) < 2 {
		t.Fatalf("want a HEAD and two GETs at the hub and two GETs at the CDN; got %v and %v", hub, cdn)
	}
	for _, x := range hub {
		if x.auth != "Bearer secret-token" {
			t.Errorf("hub %s request had Authorization %q", x.method, x.auth)
		}
	}
	for _, x := range cdn {
		if x.auth != "" {
			t.Errorf("CDN %s request had Authorization %q: the token leaked", x.method, x.auth)
		}
	}
}

// A download that fails is resumed by a new client (a restart of the
// program) from the bytes on disk, with a Range request.
func TestResumeAfterRestart(t *testing.T) {
	const size, cut = 250_000, 120_000
	h := newFakeHub(t, size)
	c := testClient(t, h)
	c.Retries = 0
	h.cuts = []int{cut}
	_, err := c.Download(context.Background(), h.ref(), nil)
	if err == nil || !strings.Contains(err.Error(), "kept in") {
		t.Fatalf("first download: error %v, want one saying the part is kept", err)
	}
	done, total, err := c.Partial(h.ref())
	if err != nil || done != cut || total != size {
		t.Fatalf("Partial = %d, %d, %v; want %d of %d", done, total, err, cut, size)
	}

	c2 := &Client{Endpoint: c.Endpoint, Dir: c.Dir, RetryDelay: time.Millisecond}
	var first Progress
	res, err := c2.Download(context.Background(), h.ref(), func(p Progress) {
		if first.Phase == PhaseConnecting && p.Phase == PhaseDownloading {
			first = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != cut || first.Resumed != cut {
		t.Errorf("resumed %d bytes (progress says %d), want %d", res.Resumed, first.Resumed, cut)
	}
	gets := h.hits("cdn", http.MethodGet)
	if len(gets) != 2 || gets[1].rng != fmt.Sprintf("bytes=%d-", cut) {
		t.Errorf("CDN GETs %v, want the second from byte %d", gets, cut)
	}
	got, _ := os.ReadFile(res.Path)
	if sha(got) != sha(h.content) {
		t.Error("resumed file differs from the served one")
	}
}

// A part of a file that has since changed on the hub (another ETag) is
// dropped, and the download starts over.
func TestResumeDropsChangedFile(t *testing.T) {
	h := newFakeHub(t, 200_000)
	c := testClient(t, h)
	c.Retries = 0
	h.cuts = []int{90_000}
	if _, err := c.Download(context.Background(), h.ref(), nil); err == nil {
		t.Fatal("first download did not fail")
	}
	h.setContent(randomBytes(210_000, 2))
	var notes []string
	res, err := c.Download(context.Background(), h.ref(), func(p Progress) {
		if p.Note != "" {
			notes = append(notes, p.Note)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if gets := h.hits("cdn", http.MethodGet); gets[len(gets)-1].rng != "" {
		t.Errorf("the last GET asked for %q; want the whole file", gets[len(gets)-1].rng)
	}
	if !strings.Contains(strings.Join(notes, " "), "changed on the hub") {
		t.Errorf("notes %q do not say the file changed", notes)
	}
	got, _ := os.ReadFile(res.Path)
	if sha(got) != sha(h.content) || res.Resumed != 0 {
		t.Errorf("got %d bytes resumed %d; want the new file whole", len(got), res.Resumed)
	}
}

// A hash that does not match is refused, and the part is deleted.
func TestHashMismatch(t *testing.T) {
	h := newFakeHub(t, 100_000)
	c := testClient(t, h)
	h.mu.Lock()
	h.etag = sha([]byte("something else"))
	h.mu.Unlock()
	_, err := c.Download(context.Background(), h.ref(), nil)
	he, ok := errors.AsType[*HashError](err)
	if !ok {
		t.Fatalf("error %v, want a *HashError", err)
	}
	if he.Want != h.etag || he.Got != sha(h.content) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("error %q", err)
	}
	dest, _ := c.Path(h.ref())
	for _, p := range []string{dest, dest + partSuffix, dest + metaSuffix} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after a hash mismatch", p)
		}
	}
}

// A disk too small for what is left is refused before a byte is written;
// what is already downloaded counts.
func TestNoSpace(t *testing.T) {
	const size = 300_000
	cases := []struct {
		name    string
		partial int    // bytes downloaded before
		free    uint64 // bytes free
		refuse  bool
	}{
		{"empty disk", 0, 1000, true},
		{"one byte short", 0, size - 1, true},
		{"exactly enough", 0, size, false},
		{"enough for the rest of a part", 200_000, 100_000, false},
		{"not enough for the rest of a part", 200_000, 99_999, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t, size)
			c := testClient(t, h)
			if tc.partial > 0 {
				c.Retries = 0
				h.cuts = []int{tc.partial}
				if _, err := c.Download(context.Background(), h.ref(), nil); err == nil {
					t.Fatal("the first download did not fail")
				}
			}
			gets := len(h.hits("cdn", http.MethodGet))
			var asked string
			c.FreeSpace = func(dir string) (uint64, error) { asked = dir; return tc.free, nil }
			_, err := c.Download(context.Background(), h.ref(), nil)
			se, isSpace := errors.AsType[*SpaceError](err)
			if isSpace != tc.refuse {
				t.Fatalf("error %v; want a refusal: %v", err, tc.refuse)
			}
			if !tc.refuse {
				return
			}
			if se.Need != uint64(size-tc.partial) || se.Free != tc.free || !strings.Contains(err.Error(), "not enough disk space") {
				t.Errorf("error %q (need %d, free %d)", err, se.Need, se.Free)
			}
			if n := len(h.hits("cdn", http.MethodGet)); n != gets {
				t.Errorf("%d GET requests after the refusal", n-gets)
			}
			dest, _ := c.Path(h.ref())
			if tc.partial == 0 {
				// Nothing was created, not even the folder; the check
				// asked of the nearest folder that exists.
				if _, err := os.Stat(filepath.Dir(dest)); err == nil {
					t.Errorf("%s was created", filepath.Dir(dest))
				}
				if asked != filepath.Dir(c.Dir) {
					t.Errorf("free space asked of %s, want %s", asked, filepath.Dir(c.Dir))
				}
			} else if st, err := os.Stat(dest + partSuffix); err != nil || st.Size() != int64(tc.partial) {
				t.Errorf("the part is not kept as it was: %v", err)
			}
		})
	}
}

// Cancelling the context pauses: the part stays and the next call resumes.
func TestPauseAndResume(t *testing.T) {
	const size = 400_000
	h := newFakeHub(t, size)
	h.stalls = []int{150_000} // so the pause comes mid-way
	c := testClient(t, h)
	c.ProgressEvery = time.Nanosecond
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Download(ctx, h.ref(), func(p Progress) {
		if p.Done >= 150_000 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("error %v, want a pause", err)
	}
	done, _, _ := c.Partial(h.ref())
	if done != 150_000 {
		t.Fatalf("%d bytes kept, want 150000", done)
	}
	res, err := c.Download(context.Background(), h.ref(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 150_000 {
		t.Errorf("resumed %d, want 150000", res.Resumed)
	}
	// Once there, a download is not made again.
	again, err := c.Download(context.Background(), h.ref(), nil)
	if err != nil || !again.Existed || again.Path != res.Path {
		t.Errorf("second download: %+v, %v; want the existing file", again, err)
	}
	if err := c.Discard(h.ref()); err != nil {
		t.Error(err)
	}
}

func TestDiscard(t *testing.T) {
	h := newFakeHub(t, 100_000)
	c := testClient(t, h)
	c.Retries = 0
	h.cuts = []int{30_000}
	if _, err := c.Download(context.Background(), h.ref(), nil); err == nil {
		t.Fatal("download did not fail")
	}
	if err := c.Discard(h.ref()); err != nil {
		t.Fatal(err)
	}
	if done, _, _ := c.Partial(h.ref()); done != 0 {
		t.Errorf("%d bytes still kept", done)
	}
	res, err := c.Download(context.Background(), h.ref(), nil)
	if err != nil || res.Resumed != 0 {
		t.Errorf("after Discard: %+v, %v; want a fresh download", res, err)
	}
}

// A second download of the same file waits for nothing: it is refused.
func TestBusy(t *testing.T) {
	h := newFakeHub(t, 1000)
	c := testClient(t, h)
	dest, _ := c.Path(h.ref())
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		t.Fatal(err)
	}
	l := flock.New(dest + lockSuffix)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if _, err := c.Download(context.Background(), h.ref(), nil); !errors.Is(err, ErrBusy) {
		t.Errorf("error %v, want ErrBusy", err)
	}
	if err := c.Discard(h.ref()); !errors.Is(err, ErrBusy) {
		t.Errorf("Discard: error %v, want ErrBusy", err)
	}
}

func TestHubErrors(t *testing.T) {
	cases := []struct {
		name    string
		code    int
		errCode string
		ref     func(h *fakeHub) Ref
		want    string
	}{
		{"missing file", 0, "", func(h *fakeHub) Ref { return Ref{Repo: h.repo, File: "nope.gguf"} }, `has no file "nope.gguf"`},
		{"gated", 403, "GatedRepo", nil, "is gated"},
		{"no such repository", 401, "RepoNotFound", nil, "no repository org/model-GGUF"},
		{"no such revision", 404, "RevisionNotFound", nil, "has no revision"},
		{"refused", 403, "", nil, "check HF_TOKEN"},
		{"server error, after the retries", 503, "", nil, "answered HTTP 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t, 1000)
			h.hubCode, h.errCode = tc.code, tc.errCode
			c := testClient(t, h)
			ref := h.ref()
			if tc.ref != nil {
				ref = tc.ref(h)
			}
			_, err := c.Download(context.Background(), ref, nil)
			if _, ok := errors.AsType[*HubError](err); !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a *HubError saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
			if gets := h.hits("cdn", ""); len(gets) != 0 {
				t.Errorf("the CDN was asked %v", gets)
			}
			wantHeads := 1
			if tc.code >= 500 {
				wantHeads = 1 + c.Retries
			}
			if heads := h.hits("hub", http.MethodHead); len(heads) != wantHeads {
				t.Errorf("%d HEAD requests, want %d", len(heads), wantHeads)
			}
		})
	}
}

func TestRefCheck(t *testing.T) {
	cases := []struct {
		ref  Ref
		want string // "" for valid
	}{
		{Ref{Repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", File: "qwen2.5-0.5b-instruct-q8_0.gguf"}, ""},
		{Ref{Repo: "a/b", File: "sub/dir/x.gguf", Revision: "refs/pr/1"}, ""},
		{Ref{Repo: "noslash", File: "x.gguf"}, "not OWNER/NAME"},
		{Ref{Repo: "a/b/c", File: "x.gguf"}, "not OWNER/NAME"},
		{Ref{Repo: "../b", File: "x.gguf"}, "not OWNER/NAME"},
		{Ref{Repo: "a/b c", File: "x.gguf"}, "not OWNER/NAME"},
		{Ref{Repo: "a/" + strings.Repeat("n", 97), File: "x.gguf"}, "not OWNER/NAME"},
		{Ref{Repo: "a/b", File: ""}, "no file name"},
		{Ref{Repo: "a/b", File: "../x.gguf"}, "not a path inside"},
		{Ref{Repo: "a/b", File: "/etc/passwd"}, "not a path inside"},
		{Ref{Repo: "a/b", File: `dir\x.gguf`}, "not a path inside"},
		{Ref{Repo: "a/b", File: "a//b.gguf"}, "not a path inside"},
		{Ref{Repo: "a/b", File: "x.gguf", Revision: "../main"}, "revision"},
	}
	for _, tc := range cases {
		err := tc.ref.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.ref, err, tc.want)
		}
	}
	if u := (Ref{Repo: "a/b", File: "d/x y.gguf", Revision: "refs/pr/1"}).URL("https://h"); u != "https://h/a/b/resolve/refs%2Fpr%2F1/d/x%20y.gguf" {
		t.Errorf("URL %s", u)
	}
}

// Bad input to Download is refused before any request.
func TestDownloadBadInput(t *testing.T) {
	h := newFakeHub(t, 1000)
	cases := []struct {
		name string
		c    func(c *Client)
		ref  Ref
		want string
	}{
		{"bad repository", nil, Ref{Repo: "x", File: "y.gguf"}, "not OWNER/NAME"},
		{"bad endpoint", func(c *Client) { c.Endpoint = "ftp://example" }, Ref{Repo: "a/b", File: "y.gguf"}, "not an http(s) URL"},
	}
	for _, tc := range cases {
		c := testClient(t, h)
		if tc.c != nil {
			tc.c(c)
		}
		if _, err := c.Download(context.Background(), tc.ref, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if n := len(h.hits("hub", "")); n != 0 {
		t.Errorf("%d requests made", n)
	}
}

func TestProgressEvents(t *testing.T) {
	const size = 2_000_000
	h := newFakeHub(t, size)
	c := testClient(t, h)
	c.ProgressEvery = time.Nanosecond
	var events []Progress
	if _, err := c.Download(context.Background(), h.ref(), func(p Progress) { events = append(events, p) }); err != nil {
		t.Fatal(err)
	}
	if events[0].Phase != PhaseConnecting || events[len(events)-1].Phase != PhaseDone {
		t.Fatalf("first %v, last %v", events[0].Phase, events[len(events)-1].Phase)
	}
	var prev int64
	sawSpeed := false
	for _, p := range events {
		if p.Phase != PhaseDownloading {
			continue
		}
		if p.Done < prev || p.Total != size {
			t.Fatalf("event %+v after %d bytes", p, prev)
		}
		prev = p.Done
		if p.Speed > 0 {
			sawSpeed = true
			if p.ETA < 0 {
				t.Errorf("speed %v with ETA %v", p.Speed, p.ETA)
			}
		}
	}
	if !sawSpeed {
		t.Error("no event had a speed")
	}
}

func TestParseContentRange(t *testing.T) {
	cases := []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 0-9/10", 0, 10, true},
		{"bytes 5-9/*", 5, -1, true},
		{"bytes 5-9/9", 0, 0, false},
		{"bytes 9-5/10", 0, 0, false},
		{"items 0-9/10", 0, 0, false},
		{"bytes x-9/10", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tc := range cases {
		s, n, err := parseContentRange(tc.in)
		if (err == nil) != tc.ok || tc.ok && (s != tc.start || n != tc.total) {
			t.Errorf("%q: %d, %d, %v", tc.in, s, n, err)
		}
	}
}

// With no server at the endpoint, Download says so at once instead of
// retrying.
func TestNoHubThere(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	c := &Client{Endpoint: url, Dir: t.TempDir(), Retries: 3, RetryDelay: time.Second}
	start := time.Now()
	_, err := c.Download(context.Background(), Ref{Repo: "a/b", File: "c.gguf"}, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the hub") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line saying the hub cannot be reached", err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("took %v: it waited to retry", d)
	}
}
