package store

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() Conversations {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return Conversations{Version: Version, Selected: 2, NextID: 3, List: []Conversation{
		{ID: 1, Title: "Stories", System: "You tell stories.", Sampling: DefaultSampling(), Created: t0, Updated: t0,
			Messages: []Message{{Role: "user", Text: "Once upon a time", Time: t0},
				{Role: "assistant", Text: " there was a cat.", Finish: "stop", Tokens: 6, TPS: 41.5, Time: t0}}},
		{ID: 2, Title: "Draft only", Draft: "half a sentence typed", Sampling: DefaultSampling(), Created: t0, Updated: t0},
	}}
}

func TestRoundTrip(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := sample()
	if err := s.SaveConversations(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	st := Settings{LastModel: "demo", Cache: &Cache{BlockSize: 32, K: "int4", V: "f16", MaxSeqs: 4}, HeatmapMode: "ref count"}
	st.AddRecent("/a.gguf")
	st.AddRecent("/b.gguf")
	st.AddRecent("/a.gguf")
	if err := s.SaveSettings(st); err != nil {
		t.Fatal(err)
	}
	gs, err := s.LoadSettings()
	if err != nil {
		t.Fatal(err)
	}
	st.Version = Version
	if !reflect.DeepEqual(gs, st) || !reflect.DeepEqual(gs.RecentModels, []string{"/a.gguf", "/b.gguf"}) {
		t.Errorf("settings round trip: got %+v, want %+v", gs, st)
	}
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestMissingFilesGiveEmptyState(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "new", "dir"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.LoadConversations()
	if err != nil || len(c.List) != 0 || c.Version != Version {
		t.Errorf("missing conversations: %+v, %v", c, err)
	}
	st, err := s.LoadSettings()
	if err != nil || st.Version != Version {
		t.Errorf("missing settings: %+v, %v", st, err)
	}
}

func TestCorruptFileIsSetAsideNotOverwritten(t *testing.T) {
	tests := []struct {
		name, content, why string
	}{
		{"truncated", `{"version": 1, "conversations": [{"id": 1, "title": "x"`, "unexpected EOF"},
		{"not json", "hello", "invalid character"},
		{"future version", `{"version": 99, "conversations": []}`, "format version 99"},
		{"unknown field", `{"version": 1, "conversations": [], "colour": "red"}`, "unknown field"},
		{"duplicate ids", `{"version": 1, "conversations": [{"id": 4}, {"id": 4}]}`, "appears twice"},
		{"trailing data", `{"version": 1, "conversations": []} {}`, "extra data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Open(t.TempDir())
			path := filepath.Join(s.Dir(), ConversationsFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := s.LoadConversations()
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *CorruptError", err)
			}
			if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "set aside as") {
				t.Errorf("error %q does not say %q and where the file went", err, tc.why)
			}
			if len(c.List) != 0 {
				t.Errorf("got %d conversations from a corrupt file", len(c.List))
			}
			kept, err := os.ReadFile(ce.Aside)
			if err != nil || string(kept) != tc.content {
				t.Errorf("set-aside file %s holds %q (%v), want the original", ce.Aside, kept, err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the corrupt file is still at %s", path)
			}
			// Saving now writes a new file; the set-aside one stays.
			if err := s.SaveConversations(sample()); err != nil {
				t.Fatal(err)
			}
			if kept2, _ := os.ReadFile(ce.Aside); string(kept2) != tc.content {
				t.Error("saving touched the set-aside file")
			}
		})
	}
}

func TestCorruptSettingsKeepConversations(t *testing.T) {
	s, _ := Open(t.TempDir())
	if err := s.SaveConversations(sample()); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Dir(), SettingsFile), []byte("{{{"), 0o644)
	if _, err := s.LoadSettings(); err == nil {
		t.Error("corrupt settings loaded without error")
	}
	c, err := s.LoadConversations()
	if err != nil || len(c.List) != 2 {
		t.Errorf("conversations after corrupt settings: %d, %v", len(c.List), err)
	}
}

func TestInterruptedReplies(t *testing.T) {
	s, _ := Open(t.TempDir())
	c := sample()
	c.List[0].Messages = append(c.List[0].Messages, Message{Role: "user", Text: "more"}, Message{Role: "assistant", Text: "half a rep"})
	if err := s.SaveConversations(c); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	msgs := got.List[0].Messages
	if last := msgs[len(msgs)-1]; last.Finish != "interrupted" || last.Text != "half a rep" {
		t.Errorf("reply being generated came back as %+v, want its text and Finish interrupted", last)
	}
	if msgs[1].Finish != "stop" {
		t.Errorf("finished reply changed to %q", msgs[1].Finish)
	}
	if got.NextID != 3 {
		t.Errorf("NextID %d, want 3", got.NextID)
	}
}

func TestOpenNeedsADirectory(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Error("Open(\"\") gave no error")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Open(filepath.Join(f, "sub")); err == nil {
		t.Error("Open under a file gave no error")
	}
}
