package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"kvscope/engine"
)

// SnapshotSchemaVersion is the version of /v1/kvcache/snapshot's JSON: it
// changes when a field is renamed or removed, or changes meaning (new
// fields may appear without a change).
const SnapshotSchemaVersion = 1

// snapshotReply is /v1/kvcache/snapshot's body.
type snapshotReply struct {
	SchemaVersion int    `json:"schema_version"`
	Model         string `json:"model"`
	// Settings names the snapshot's settings that the engine's JSON gives
	// as numbers (precisions, policies).
	Settings map[string]string `json:"settings"`
	Snapshot *engine.Snapshot  `json:"snapshot"`
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	snap := s.e.Snapshot()
	c := snap.Config
	writeJSON(w, snapshotReply{SchemaVersion: SnapshotSchemaVersion, Model: s.model, Snapshot: snap, Settings: map[string]string{
		"k": c.Cache.K.String(), "v": c.Cache.V.String(), "eviction": c.Cache.Eviction.String(),
		"preempt": c.Cache.Preempt.String(), "allocator": c.Cache.Allocator.String(),
		"overflow": c.Cache.Overflow.String(), "policy": c.Sched.Policy.String(),
	}})
}

// How /v1/kvcache/events follows the log: it polls (the engine's notify
// channel has one slot, which the app's inspector also waits on), sends at
// most eventBatch events a write, and a comment line after heartbeat of
// silence so that proxies keep the connection.
const (
	eventPoll  = 50 * time.Millisecond
	eventBatch = 512
	heartbeat  = 15 * time.Second
)

// events streams the engine's events after cursor since (0: all the log
// still holds) as server-sent events, each with its cursor as the event
// id; a "dropped" event says how many the log lost before the reader got
// them. The stream goes on until the client hangs up or the server stops.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	var cursor uint64
	if q := r.URL.Query().Get("since"); q != "" {
		n, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			writeError(w, badRequest("since", "invalid_type", "since must be a non-negative integer (an event id), not %q", q))
			return
		}
		cursor = n
	}
	sse := newSSE(w, func() {})
	tick := time.NewTicker(eventPoll)
	defer tick.Stop()
	quiet := time.Now()
	for !sse.failed {
		evs, next, dropped := s.e.Events(cursor, eventBatch)
		if dropped > 0 {
			b, _ := json.Marshal(map[string]uint64{"dropped": dropped})
			sse.raw("event: dropped\ndata: " + string(b) + "\n\n")
		}
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				continue
			}
			sse.raw("id: " + strconv.FormatUint(ev.ID, 10) + "\ndata: " + string(b) + "\n\n")
		}
		cursor = next
		if len(evs) > 0 || dropped > 0 {
			quiet = time.Now()
			if len(evs) == eventBatch {
				continue
			}
		} else if time.Since(quiet) > heartbeat {
			sse.raw(": keep-alive\n\n")
			quiet = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.stop.Done():
			return
		case <-tick.C:
		}
	}
}
