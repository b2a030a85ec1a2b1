package hub

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dustin/go-humanize"
)

// ErrBusy is returned when another download of the same file, in this
// process or another, holds its lock.
var ErrBusy = errors.New("the file is being downloaded by another kvscope; wait for it or stop it")

// SpaceError is the refusal to start a download that the destination's
// file system has no room for.
type SpaceError struct {
	Dir  string // the folder whose file system was checked
	Need uint64 // bytes still to download
	Free uint64 // bytes free there
}

// Error says how much room is missing where.
func (e *SpaceError) Error() string {
	return fmt.Sprintf("not enough disk space in %s: the download needs %s more and %s is free; free some space (or choose another folder) and run again",
		e.Dir, humanize.IBytes(e.Need), humanize.IBytes(e.Free))
}

// HashError is a downloaded file whose sha256 is not the one the hub
// reported; the part was deleted.
type HashError struct {
	Ref       Ref
	Got, Want string // hex sha256
}

// Error gives both hashes and says the part was deleted.
func (e *HashError) Error() string {
	return fmt.Sprintf("%s: the downloaded file's sha256 is %s but the hub says %s, so it was corrupted on the way; the partial file was deleted: run again to download it afresh",
		e.Ref, e.Got, e.Want)
}

// HubError is the hub's refusal of a request (HTTP 4xx or 5xx).
type HubError struct {
	Ref     Ref
	Status  int    // the HTTP status
	Code    string // the hub's X-Error-Code, such as "GatedRepo", "RepoNotFound" or "EntryNotFound"
	Message string // the hub's X-Error-Message, when it sent one
	Host    string // the host that answered
}

// Error says in one line what the hub refused and what to do about it.
func (e *HubError) Error() string {
	var s string
	switch {
	case e.Code == "GatedRepo":
		s = fmt.Sprintf("repository %s is gated: accept its conditions on its page on the hub, then set HF_TOKEN to a token of that account", e.Ref.Repo)
	case e.Code == "RepoNotFound" || e.Status == http.StatusUnauthorized && e.Code == "":
		s = fmt.Sprintf("no repository %s on %s (if it is private, set HF_TOKEN to a token that may read it)", e.Ref.Repo, e.Host)
	case e.Code == "RevisionNotFound":
		s = fmt.Sprintf("repository %s has no revision %q", e.Ref.Repo, e.Ref.revision())
	case e.Code == "EntryNotFound" || e.Status == http.StatusNotFound:
		s = fmt.Sprintf("repository %s has no file %q at revision %s", e.Ref.Repo, e.Ref.File, e.Ref.revision())
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		s = fmt.Sprintf("%s refused access to %s (HTTP %d): check HF_TOKEN", e.Host, e.Ref, e.Status)
	case e.Status == http.StatusTooManyRequests:
		s = fmt.Sprintf("%s is limiting requests (HTTP 429): wait a while and run again", e.Host)
	default:
		s = fmt.Sprintf("%s answered HTTP %d for %s", e.Host, e.Status, e.Ref)
	}
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

// hubError reads the hub's error headers of resp.
func hubError(ref Ref, resp *http.Response) *HubError {
	return &HubError{
		Ref:     ref,
		Status:  resp.StatusCode,
		Code:    resp.Header.Get("X-Error-Code"),
		Message: oneLine(resp.Header.Get("X-Error-Message"), 200),
		Host:    resp.Request.URL.Host,
	}
}

// oneLine is s without control characters, at most n characters.
func oneLine(s string, n int) string {
	b := make([]rune, 0, len(s))
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			c = ' '
		}
		b = append(b, c)
	}
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// retryable marks a failure that a new connection may get past.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }
