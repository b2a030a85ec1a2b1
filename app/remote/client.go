// This file holds the client of a remote kvscope serve: its snapshots and
// events over HTTP.

package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"kvscope/engine"
	"kvscope/server"
)

// Client reads a remote `kvscope serve`'s cache: its snapshots
// (GET /v1/kvcache/snapshot) and its events (GET /v1/kvcache/events).
type Client struct {
	// Base is the server's address, e.g. http://host:8080.
	Base string
	// APIKey, when not empty, is sent as "Authorization: Bearer KEY".
	APIKey string
	// HTTP is the client to use; nil means one with a 10 s timeout for
	// snapshots and none for the event stream.
	HTTP *http.Client
}

// RemoteSnapshot is /v1/kvcache/snapshot's body, decoded into the types
// the local inspector draws.
type RemoteSnapshot struct {
	SchemaVersion int               `json:"schema_version"`
	Model         string            `json:"model"`
	Settings      map[string]string `json:"settings"`
	Snapshot      *engine.Snapshot  `json:"snapshot"`
}

// NewClient checks base (an http or https URL, no query) and returns its
// Client.
func NewClient(base, apiKey string) (*Client, error) {
	base = strings.TrimSpace(base)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not a server address such as http://host:8080", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: give the server's address without a query", base)
	}
	return &Client{Base: strings.TrimRight(base, "/"), APIKey: strings.TrimSpace(apiKey)}, nil
}

func (c *Client) get(ctx context.Context, path string, stream bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
		if stream {
			hc = &http.Client{}
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("GET %s: the server wants an API key (%s)", path, msg)
		}
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, msg)
	}
	return resp, nil
}

// Snapshot fetches the server's latest snapshot. It refuses a schema
// version other than the one this kvscope reads.
func (c *Client) Snapshot(ctx context.Context) (*RemoteSnapshot, error) {
	resp, err := c.get(ctx, "/v1/kvcache/snapshot", false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r RemoteSnapshot
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("GET /v1/kvcache/snapshot: %w", err)
	}
	if r.SchemaVersion != server.SnapshotSchemaVersion {
		return nil, fmt.Errorf("the server's snapshot schema is version %d; this kvscope reads version %d", r.SchemaVersion, server.SnapshotSchemaVersion)
	}
	if r.Snapshot == nil || r.Snapshot.Cache == nil {
		return nil, errors.New("GET /v1/kvcache/snapshot: no snapshot in the reply")
	}
	return &r, nil
}

// Events follows the server's events after cursor since until ctx ends or
// the stream breaks, calling fn with each event and dropped with each
// count of events the server's log lost before they were sent. It returns
// the cursor to follow on from (the last event's id) and why it stopped.
func (c *Client) Events(ctx context.Context, since uint64, fn func(engine.Event), dropped func(uint64)) (uint64, error) {
	resp, err := c.get(ctx, "/v1/kvcache/events?since="+strconv.FormatUint(since, 10), true)
	if err != nil {
		return since, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var kind string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				switch kind {
				case "dropped":
					var d struct {
						Dropped uint64 `json:"dropped"`
					}
					if json.Unmarshal([]byte(data.String()), &d) == nil && dropped != nil {
						dropped(d.Dropped)
					}
				case "", "message":
					var ev engine.Event
					if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
						return since, fmt.Errorf("GET /v1/kvcache/events: event after %d: %w", since, err)
					}
					since = max(since, ev.ID)
					fn(ev)
				}
			}
			kind = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
			// A comment: the server's keep-alive.
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return since, fmt.Errorf("GET /v1/kvcache/events: %w", err)
	}
	if ctx.Err() != nil {
		return since, ctx.Err()
	}
	return since, errors.New("GET /v1/kvcache/events: the server closed the stream")
}
