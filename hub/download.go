package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/gofrs/flock"
)

// Client downloads files from the hub. The zero value works, with the
// defaults each field names and no retries; NewClient reads the endpoint and
// token from the environment and retries. A Client is safe for concurrent
// use; two downloads of one file exclude each other (ErrBusy).
type Client struct {
	// Endpoint is the hub's base URL; "" for DefaultEndpoint.
	Endpoint string
	// Token is sent as "Authorization: Bearer" to the endpoint's host, and
	// never to another host a redirect leads to; "" for none.
	Token string
	// Dir is the models folder files go to, as Dir/OWNER/NAME/FILE; "" for
	// ModelsDir().
	Dir string
	// HTTP is the client to use (its redirect policy is replaced by this
	// package's); nil for one with connection and header timeouts.
	HTTP *http.Client
	// Retries is how many times a connection that fails or stalls mid-way
	// is made again, resuming where it stopped.
	Retries int
	// RetryDelay is the wait before the first retry, doubling after each up
	// to 30 seconds; 0 for one second.
	RetryDelay time.Duration
	// StallTimeout ends a connection that delivers no byte for this long
	// (it counts as a failure, so it is retried); 0 for one minute.
	StallTimeout time.Duration
	// FreeSpace returns the bytes free on the file system holding a
	// folder; nil for the operating system's answer (statfs).
	FreeSpace func(dir string) (uint64, error)
	// ProgressEvery is the least time between two progress events of the
	// same phase; 0 for 100 milliseconds.
	ProgressEvery time.Duration
}

// NewClient returns a Client for kvscope's models folder with the hub
// endpoint of HF_ENDPOINT, the token of HF_TOKEN (or the token file) and
// five retries.
func NewClient() (*Client, error) {
	e, err := Endpoint()
	if err != nil {
		return nil, err
	}
	dir, err := ModelsDir()
	if err != nil {
		return nil, err
	}
	return &Client{Endpoint: e, Token: Token(), Dir: dir, Retries: 5}, nil
}

// Phase is the stage a download is in.
type Phase int

// The phases of a download, in order.
const (
	PhaseConnecting  Phase = iota // asking the hub for the file's size and hash
	PhaseChecking                 // hashing the part downloaded before
	PhaseDownloading              // receiving bytes
	PhaseDone                     // the file is in place
)

// String names the phase for people.
func (p Phase) String() string {
	switch p {
	case PhaseConnecting:
		return "connecting"
	case PhaseChecking:
		return "checking the part downloaded before"
	case PhaseDownloading:
		return "downloading"
	case PhaseDone:
		return "done"
	}
	return "phase " + strconv.Itoa(int(p))
}

// Progress is one progress event of a download.
type Progress struct {
	Ref     Ref
	Phase   Phase
	Done    int64         // bytes on disk (while checking: bytes hashed)
	Total   int64         // the file's size; 0 while unknown
	Resumed int64         // bytes that were on disk when this download started
	Speed   float64       // bytes per second over the last few seconds; 0 while unknown
	ETA     time.Duration // time left at that speed; -1 while unknown
	Attempt int           // the connection: 1, then one more after each failure
	Note    string        // a remark to show once, such as why a part was dropped
}

// Fraction is Done/Total, between 0 and 1 (0 while Total is unknown): the
// value of a progress bar.
func (p Progress) Fraction() float64 {
	if p.Total <= 0 {
		return 0
	}
	return min(1, max(0, float64(p.Done)/float64(p.Total)))
}

// Result describes a downloaded file.
type Result struct {
	Path    string // where the file is
	Size    int64  // its size in bytes
	SHA256  string // its hex sha256 as checked; "" when the hub gave none (not an LFS file) or it was there already
	Commit  string // the repository commit it came from, when the hub said
	Resumed int64  // bytes that were on disk from an earlier try
	Existed bool   // it was there already, so nothing was fetched
}

// Path returns where ref's file goes, or is, in the models folder.
func (c *Client) Path(ref Ref) (string, error) {
	if err := ref.Check(); err != nil {
		return "", err
	}
	dir, err := c.dir()
	if err != nil {
		return "", err
	}
	return ref.path(dir), nil
}

// Partial returns the bytes of ref's file already downloaded and kept for a
// resume, and the file's size as the hub reported it then (0 if unknown).
func (c *Client) Partial(ref Ref) (done, total int64, err error) {
	dest, err := c.Path(ref)
	if err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(dest + partSuffix)
	if err != nil {
		return 0, 0, nil
	}
	m, _ := readMeta(dest + metaSuffix)
	return st.Size(), m.Size, nil
}

// Discard deletes what was downloaded of ref's file so far, so that the next
// Download starts afresh. It is ErrBusy while a download of it runs.
func (c *Client) Discard(ref Ref) error {
	dest, err := c.Path(ref)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Dir(dest)); err != nil {
		return nil
	}
	lock, err := tryLock(dest)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	return removePart(dest)
}

const (
	partSuffix = ".part"      // the bytes so far
	metaSuffix = ".part.json" // what they are part of
	lockSuffix = ".lock"      // held while a download runs
)

// meta is what the part file is a part of, to tell on a resume whether the
// file on the hub is still the same.
type meta struct {
	Repo     string `json:"repo"`
	File     string `json:"file"`
	Revision string `json:"revision"`
	ETag     string `json:"etag"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256,omitempty"`
	Commit   string `json:"commit,omitempty"`
}

func readMeta(path string) (meta, error) {
	var m meta
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if len(b) > 1<<16 {
		return m, errors.New("too large")
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

// writeMeta writes m to path atomically.
func writeMeta(path string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func removePart(dest string) error {
	for _, p := range []string{dest + partSuffix, dest + metaSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// tryLock takes the download lock of dest, whose folder must exist.
func tryLock(dest string) (*flock.Flock, error) {
	l := flock.New(dest + lockSuffix)
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("cannot lock %s: %w", l.Path(), err)
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w", dest, ErrBusy)
	}
	return l, nil
}

func (c *Client) dir() (string, error) {
	if c.Dir != "" {
		return c.Dir, nil
	}
	return ModelsDir()
}

func (c *Client) endpoint() (string, error) {
	if c.Endpoint == "" {
		return DefaultEndpoint, nil
	}
	return checkEndpoint(c.Endpoint)
}

// defaultHTTP is the client used when Client.HTTP is nil: timeouts on
// connecting and on the response's headers, none on the body (which
// StallTimeout watches instead).
var defaultHTTP = sync.OnceValue(func() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
	}}
})

// origin is a URL's scheme and host with its port made explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port))
}

// httpClient returns the HTTP client with this package's redirect policy:
// the Authorization header goes only to the first request's origin (scheme,
// host and port; Go's own policy would pass it to another port of the same
// host or to a subdomain), and with cross false a redirect to another origin
// is not followed (the HEAD request reads the hub's headers on its redirect).
func (c *Client) httpClient(cross bool) *http.Client {
	base := c.HTTP
	if base == nil {
		base = defaultHTTP()
	}
	hc := *base
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("the hub redirected more than 10 times")
		}
		if origin(req.URL) != origin(via[0].URL) {
			req.Header.Del("Authorization")
			if !cross {
				return http.ErrUseLastResponse
			}
		}
		return nil
	}
	return &hc
}

// newRequest makes a request to the hub with the token and without
// compression (lengths and ranges are of the file's own bytes).
func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "kvscope")
	req.Header.Set("Accept-Encoding", "identity")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// remote is what the hub says of a file.
type remote struct {
	size   int64
	sha256 string // "" when the ETag is not a sha256 (a file not in LFS)
	etag   string
	commit string
}

// unquoteETag strips an ETag's weak marker and quotes.
func unquoteETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// head asks the hub for the file's size, hash and commit.
func (c *Client) head(ctx context.Context, ref Ref, u string) (*remote, error) {
	req, err := c.newRequest(ctx, http.MethodHead, u)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient(false).Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the hub for %s: %w", ref, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, hubError(ref, resp)
	}
	h := resp.Header
	r := &remote{commit: h.Get("X-Repo-Commit")}
	r.etag = unquoteETag(h.Get("X-Linked-Etag"))
	if r.etag == "" {
		r.etag = unquoteETag(h.Get("ETag"))
	}
	size := h.Get("X-Linked-Size")
	if size == "" && resp.StatusCode >= 300 {
		// A redirect that does not say the size: ask where it leads
		// (without the token: it is another host).
		loc, err := resp.Location()
		if err != nil {
			return nil, fmt.Errorf("%s: the hub answered HTTP %d without the file's size or a place to get it", ref, resp.StatusCode)
		}
		req, err := c.newRequest(ctx, http.MethodHead, loc.String())
		if err != nil {
			return nil, err
		}
		if first, err := url.Parse(u); err != nil || origin(loc) != origin(first) {
			req.Header.Del("Authorization")
		}
		resp2, err := c.httpClient(true).Do(req)
		if err != nil {
			return nil, fmt.Errorf("cannot reach %s for %s: %w", loc.Host, ref, err)
		}
		resp2.Body.Close()
		if resp2.StatusCode >= 400 {
			return nil, hubError(ref, resp2)
		}
		size = resp2.Header.Get("Content-Length")
		if r.etag == "" {
			r.etag = unquoteETag(resp2.Header.Get("ETag"))
		}
	} else if size == "" {
		size = h.Get("Content-Length")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s: the hub did not say the file's size", ref)
	}
	r.size = n
	if s := strings.ToLower(r.etag); isSHA256(s) {
		r.sha256 = s
	}
	return r, nil
}

// Download fetches ref's file into the models folder and returns where it
// is. A file already there is returned as it is (Result.Existed). progress,
// if not nil, is called on Download's goroutine with each event (at most
// every ProgressEvery within a phase); it should return quickly (a UI hands
// the event to its own thread).
//
// Cancelling ctx pauses the download: the bytes so far stay in the part
// file and the next Download of ref resumes from them, as it does after a
// failure or a restart of the program. The error then wraps ctx's error.
// Other errors: *SpaceError before the download starts, *HubError for the
// hub's refusals, *HashError when the bytes do not match the hub's sha256
// (the part is deleted), ErrBusy while another download of ref runs, and
// errors of the network or the disk, each saying what was kept.
func (c *Client) Download(ctx context.Context, ref Ref, progress func(Progress)) (*Result, error) {
	dest, err := c.Path(ref)
	if err != nil {
		return nil, err
	}
	rep := newReporter(ref, progress, c.ProgressEvery)
	if st, err := os.Stat(dest); err == nil {
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is in the way of the download: it is not a regular file", dest)
		}
		rep.p.Total = st.Size()
		rep.phase(PhaseDone, st.Size())
		return &Result{Path: dest, Size: st.Size(), Existed: true}, nil
	}
	endpoint, err := c.endpoint()
	if err != nil {
		return nil, err
	}
	rep.phase(PhaseConnecting, 0)
	u := ref.URL(endpoint)
	rem, err := c.headRetrying(ctx, ref, u, rep)
	if err != nil {
		return nil, err
	}
	rep.p.Total = rem.size

	// What is on disk already, if it is of the same file.
	part, metaPath := dest+partSuffix, dest+metaSuffix
	offset, note := resumable(part, metaPath, rem)

	// Room for the rest, before a byte is written.
	if err := c.checkSpace(filepath.Dir(dest), rem.size-offset); err != nil {
		return nil, err
	}

	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return nil, fmt.Errorf("cannot make the folder for %s: %w", ref, err)
	}
	lock, err := tryLock(dest)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if _, err := os.Stat(dest); err == nil { // finished by another process meanwhile
		return &Result{Path: dest, Size: rem.size, Existed: true}, nil
	}
	offset, note = resumable(part, metaPath, rem) // again, now that it is ours
	if offset == 0 {
		if err := removePart(dest); err != nil {
			return nil, fmt.Errorf("cannot remove the old part of %s: %w", ref, err)
		}
	}
	if note != "" {
		rep.note(note)
	}
	m := meta{Repo: ref.Repo, File: ref.File, Revision: ref.revision(), ETag: rem.etag, Size: rem.size, SHA256: rem.sha256, Commit: rem.commit}
	if err := writeMeta(metaPath, m); err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", metaPath, err)
	}
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot write the download of %s: %w", ref, err)
	}
	defer f.Close()

	d := &download{c: c, ref: ref, url: u, rem: rem, f: f, part: part, h: sha256.New(), rep: rep}
	if offset > 0 {
		if err := d.hashExisting(ctx, offset); err != nil {
			return nil, err
		}
	}
	rep.p.Resumed = offset
	if err := d.fetchAll(ctx); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, d.kept(fmt.Errorf("cannot save the download of %s: %w", ref, err))
	}
	if err := f.Close(); err != nil {
		return nil, d.kept(fmt.Errorf("cannot save the download of %s: %w", ref, err))
	}
	sum := hex.EncodeToString(d.h.Sum(nil))
	if rem.sha256 != "" && sum != rem.sha256 {
		if err := removePart(dest); err != nil {
			return nil, fmt.Errorf("%w (and deleting the part failed: %v)", &HashError{Ref: ref, Got: sum, Want: rem.sha256}, err)
		}
		return nil, &HashError{Ref: ref, Got: sum, Want: rem.sha256}
	}
	if err := os.Rename(part, dest); err != nil {
		return nil, fmt.Errorf("cannot move the finished download into place as %s: %w", dest, err)
	}
	os.Remove(metaPath)
	// The lock file can go: a process that took it meanwhile finds the
	// file in place once it holds it.
	os.Remove(dest + lockSuffix)
	syncDir(filepath.Dir(dest))
	rep.phase(PhaseDone, rem.size)
	res := &Result{Path: dest, Size: rem.size, Commit: rem.commit, Resumed: offset}
	if rem.sha256 != "" {
		res.SHA256 = sum
	}
	return res, nil
}

// headRetrying is head, tried again up to Retries times after a network
// failure or a server error (not after the hub's refusal of the request,
// nor when no server answers at the endpoint's address).
func (c *Client) headRetrying(ctx context.Context, ref Ref, u string, rep *reporter) (*remote, error) {
	wait := c.retryDelay()
	for attempt := 1; ; attempt++ {
		rem, err := c.head(ctx, ref, u)
		if err == nil || ctx.Err() != nil || attempt > c.Retries {
			return rem, err
		}
		if he, ok := errors.AsType[*HubError](err); ok && he.Status < 500 && he.Status != http.StatusTooManyRequests {
			return nil, err
		}
		if _, ok := errors.AsType[*net.DNSError](err); ok || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err // no hub there (or offline): waiting will not help
		}
		rep.note(fmt.Sprintf("asking the hub failed (%v); trying again in %v", err, wait))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (c *Client) retryDelay() time.Duration {
	if c.RetryDelay <= 0 {
		return time.Second
	}
	return c.RetryDelay
}

// resumable returns how many bytes of the part file can be kept: all of
// them if the meta file records the same ETag and size as the hub reports
// now and the part is not longer than the file, else none, with a note
// saying why.
func resumable(part, metaPath string, rem *remote) (int64, string) {
	st, err := os.Stat(part)
	if err != nil || st.Size() == 0 {
		return 0, ""
	}
	m, err := readMeta(metaPath)
	switch {
	case err != nil:
		return 0, "an earlier partial download had no record of what it was part of, so it was dropped"
	case rem.etag == "" || m.ETag != rem.etag || m.Size != rem.size:
		return 0, "the file changed on the hub since the earlier partial download, so that was dropped and the download starts over"
	case st.Size() > rem.size:
		return 0, "an earlier partial download was longer than the file, so it was dropped"
	}
	return st.Size(), ""
}

// checkSpace refuses a download of need more bytes into dir's file system
// when it has less free. An unknown free space lets it go ahead.
func (c *Client) checkSpace(dir string, need int64) error {
	if need <= 0 {
		return nil
	}
	free := c.FreeSpace
	if free == nil {
		free = freeSpace
	}
	// The folder may not exist yet: ask of the nearest one that does.
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
	n, err := free(dir)
	if err != nil {
		return nil
	}
	if n < uint64(need) {
		return &SpaceError{Dir: dir, Need: uint64(need), Free: n}
	}
	return nil
}

// download is one Download's state once its part file is open.
type download struct {
	c    *Client
	ref  Ref
	url  string
	rem  *remote
	f    *os.File
	part string
	h    hash.Hash
	done int64 // bytes in the part file, all of them hashed
	rep  *reporter
}

// kept adds to err what the part file keeps.
func (d *download) kept(err error) error {
	if d.done == 0 {
		return err
	}
	return fmt.Errorf("%w; the %s downloaded so far are kept in %s: run again to resume",
		err, humanize.IBytes(uint64(d.done)), d.part)
}

// hashExisting hashes the first n bytes of the part file and positions it
// after them.
func (d *download) hashExisting(ctx context.Context, n int64) error {
	d.rep.phase(PhaseChecking, 0)
	buf := make([]byte, 1<<20)
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped while checking the earlier part of %s: %w", d.ref, err)
		}
		k, err := d.f.ReadAt(buf[:min(int64(len(buf)), n-done)], done)
		d.h.Write(buf[:k])
		done += int64(k)
		d.rep.update(done)
		if err != nil && done < n {
			return fmt.Errorf("cannot read the earlier part of %s: %w", d.ref, err)
		}
	}
	if _, err := d.f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("cannot read the earlier part of %s: %w", d.ref, err)
	}
	d.done = n
	return nil
}

// fetchAll receives the rest of the file, connecting again after a
// failure up to Retries times.
func (d *download) fetchAll(ctx context.Context) error {
	wait := d.c.retryDelay()
	for attempt := 1; ; attempt++ {
		d.rep.p.Attempt = attempt
		if d.done == d.rem.size { // all there (from before, if this is the first)
			return nil
		}
		err := d.fetch(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return d.kept(fmt.Errorf("download of %s paused at %s of %s: %w",
				d.ref, humanize.IBytes(uint64(d.done)), humanize.IBytes(uint64(d.rem.size)), ctx.Err()))
		}
		if _, ok := errors.AsType[retryable](err); !ok || attempt > d.c.Retries {
			return d.kept(err)
		}
		d.rep.note(fmt.Sprintf("connection %d failed (%v); trying again in %v", attempt, err, wait))
		select {
		case <-ctx.Done():
			return d.kept(fmt.Errorf("download of %s paused: %w", d.ref, ctx.Err()))
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// errStalled ends a connection that delivered nothing for StallTimeout.
var errStalled = errors.New("no data arrived")

// fetch makes one GET request from byte d.done and writes what arrives.
func (d *download) fetch(ctx context.Context) error {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := d.c.newRequest(actx, http.MethodGet, d.url)
	if err != nil {
		return err
	}
	if d.done > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", d.done))
	}
	resp, err := d.c.httpClient(true).Do(req)
	if err != nil {
		return retryable{fmt.Errorf("cannot reach the hub for %s: %w", d.ref, err)}
	}
	defer resp.Body.Close()
	host := resp.Request.URL.Host
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		start, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || start != d.done || total >= 0 && total != d.rem.size {
			return fmt.Errorf("%s sent the wrong part of %s (Content-Range %q for a request from byte %d of %d)",
				host, d.ref, resp.Header.Get("Content-Range"), d.done, d.rem.size)
		}
	case resp.StatusCode == http.StatusOK:
		if d.done > 0 {
			// The server ignored the Range header (no Accept-Ranges):
			// what comes is the whole file.
			if err := d.restart(); err != nil {
				return err
			}
			d.rep.note(fmt.Sprintf("%s does not resume downloads, so this one starts over", host))
		}
		if cl := resp.ContentLength; cl >= 0 && cl != d.rem.size {
			return fmt.Errorf("%s sends %d bytes for %s but the hub said the file has %d", host, cl, d.ref, d.rem.size)
		}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return retryable{hubError(d.ref, resp)}
	default:
		return hubError(d.ref, resp)
	}

	stall := d.c.StallTimeout
	if stall <= 0 {
		stall = time.Minute
	}
	timer := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer timer.Stop()
	d.rep.phase(PhaseDownloading, d.done)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			timer.Reset(stall)
			if d.done+int64(n) > d.rem.size {
				return fmt.Errorf("%s sent more than the %d bytes the hub said %s has", host, d.rem.size, d.ref)
			}
			if _, err := d.f.Write(buf[:n]); err != nil {
				return writeError(d.ref, err)
			}
			d.h.Write(buf[:n])
			d.done += int64(n)
			d.rep.update(d.done)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if context.Cause(actx) == errStalled {
				return retryable{fmt.Errorf("%s: no data arrived for %v at byte %d of %d", host, stall, d.done, d.rem.size)}
			}
			return retryable{fmt.Errorf("the connection to %s broke at byte %d of %d: %w", host, d.done, d.rem.size, rerr)}
		}
	}
	if d.done < d.rem.size {
		return retryable{fmt.Errorf("%s closed the connection at byte %d of %d", host, d.done, d.rem.size)}
	}
	return nil
}

// restart empties the part file.
func (d *download) restart() error {
	if err := d.f.Truncate(0); err != nil {
		return writeError(d.ref, err)
	}
	if _, err := d.f.Seek(0, io.SeekStart); err != nil {
		return writeError(d.ref, err)
	}
	d.h.Reset()
	d.done = 0
	d.rep.p.Resumed = 0
	return nil
}

// writeError says that writing the part file failed, and why.
func writeError(ref Ref, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("the disk is full while writing %s: %w", ref, err)
	}
	return fmt.Errorf("cannot write the download of %s: %w", ref, err)
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*", given
// as -1).
func parseContentRange(s string) (start, total int64, err error) {
	bad := fmt.Errorf("bad Content-Range %q", s)
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !ok {
		return 0, 0, bad
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, bad
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, bad
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start {
		return 0, 0, bad
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total <= end {
			return 0, 0, bad
		}
	}
	return start, total, nil
}

// reporter sends progress events, throttled, with a speed over the last few
// seconds.
type reporter struct {
	fn      func(Progress)
	every   time.Duration
	p       Progress
	last    time.Time
	samples []sample
}

type sample struct {
	t    time.Time
	done int64
}

// speedWindow is how far back the speed looks.
const speedWindow = 5 * time.Second

func newReporter(ref Ref, fn func(Progress), every time.Duration) *reporter {
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	return &reporter{fn: fn, every: every, p: Progress{Ref: ref, ETA: -1, Attempt: 1}}
}

// phase enters a phase and reports it at once.
func (r *reporter) phase(p Phase, done int64) {
	r.p.Phase = p
	r.samples = r.samples[:0]
	r.p.Speed, r.p.ETA = 0, -1
	if p == PhaseDone {
		r.p.ETA = 0
	}
	r.p.Done = done
	r.emit(time.Now())
}

// note reports a remark at once.
func (r *reporter) note(s string) {
	r.p.Note = s
	r.emit(time.Now())
	r.p.Note = ""
}

// update records progress, reporting it if the last report is old enough
// or the phase's work is complete.
func (r *reporter) update(done int64) {
	now := time.Now()
	r.p.Done = done
	if r.p.Phase == PhaseDownloading {
		r.samples = append(r.samples, sample{now, done})
		i := 0
		for i < len(r.samples)-2 && now.Sub(r.samples[i].t) > speedWindow {
			i++
		}
		r.samples = r.samples[i:]
		if first := r.samples[0]; now.Sub(first.t) > 0 && done > first.done {
			r.p.Speed = float64(done-first.done) / now.Sub(first.t).Seconds()
			r.p.ETA = time.Duration(float64(r.p.Total-done) / r.p.Speed * float64(time.Second))
		}
	}
	if now.Sub(r.last) >= r.every || done == r.p.Total {
		r.emit(now)
	}
}

func (r *reporter) emit(now time.Time) {
	r.last = now
	if r.fn != nil {
		r.fn(r.p)
	}
}
