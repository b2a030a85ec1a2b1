package store

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var off = false

func sample() Conversations {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return Conversations{Version: Version, Selected: 2, NextID: 3, List: []Conversation{
		{ID: 1, Title: "Stories", System: "You tell stories.", Sampling: DefaultSampling(), Created: t0, Updated: t0,
			Messages: []Message{{Role: "user", Text: "Once upon a time", Time: t0},
				{Role: "assistant", Text: " there was a cat.", Finish: "stop", Tokens: 6, TPS: 41.5, IDs: []int{727, 471, 263, 6635, 29889, 2}, Vocab: "v1-0123456789abcdef", Time: t0}}},
		{ID: 2, Title: "Draft only", Draft: "half a sentence typed", Sampling: DefaultSampling(), Plain: true, Thinking: &off, Created: t0, Updated: t0},
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
	raw, err := os.ReadFile(filepath.Join(s.Dir(), ConversationsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"ids": "727 471 263 6635 29889 2"`) {
		t.Errorf("a reply's ids are not saved as one line:\n%s", raw)
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

// A conversations file written before replies kept their token ids and
// conversations their template choices still loads: no ids, the model's
// template, the template's own thinking default.
func TestOldFileLoads(t *testing.T) {
	s, _ := Open(t.TempDir())
	old := `{"version": 1, "selected": 1, "next_id": 2, "conversations": [{"id": 1, "title": "Old", "sampling": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1, "max_tokens": 256, "seed": 0},
		"messages": [{"role": "user", "text": "Hi", "time": "2026-11-29T12:00:00Z"}, {"role": "assistant", "text": " there", "finish": "stop", "tokens": 1, "prompt": 3, "cached": 0, "time": "2026-11-29T12:00:00Z"},
			{"role": "user", "text": "Again", "time": "2026-11-29T12:00:00Z"}, {"role": "assistant", "text": " and", "ids": [322], "vocab": "v1-x", "finish": "stop", "tokens": 1, "time": "2026-11-29T12:00:00Z"}],
		"created": "2026-11-29T12:00:00Z", "updated": "2026-11-29T12:00:00Z"}]}`
	if err := os.WriteFile(filepath.Join(s.Dir(), ConversationsFile), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadConversations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.List) != 1 || len(got.List[0].Messages) != 4 {
		t.Fatalf("loaded %+v", got)
	}
	c := got.List[0]
	if c.Plain || c.Thinking != nil || c.Messages[1].IDs != nil || c.Messages[1].Vocab != "" || c.Messages[1].Text != " there" {
		t.Errorf("old conversation came back as %+v", c)
	}
	if ids := c.Messages[3].IDs; len(ids) != 1 || ids[0] != 322 {
		t.Errorf("ids written as an array came back as %v", ids)
	}
}

// Token ids that are not whole numbers are an error (so the file is set
// aside, as for any bad value); extra spaces are not.
func TestBadTokenIDs(t *testing.T) {
	var ids TokenIDs
	if err := json.Unmarshal([]byte(`"1 2 x"`), &ids); err == nil {
		t.Errorf("ids \"1 2 x\" decoded as %v", ids)
	}
	if err := json.Unmarshal([]byte(`" 5  6 "`), &ids); err != nil || len(ids) != 2 || ids[1] != 6 {
		t.Errorf("ids \" 5  6 \": %v %v", ids, err)
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

// files are the two files of a store, with a loader and a saver each.
var files = []struct {
	name string
	load func(s *Store) error
	save func(s *Store) error
}{
	{ConversationsFile, func(s *Store) error { _, err := s.LoadConversations(); return err },
		func(s *Store) error { return s.SaveConversations(sample()) }},
	{SettingsFile, func(s *Store) error { _, err := s.LoadSettings(); return err },
		func(s *Store) error { return s.SaveSettings(Settings{LastModel: "demo"}) }},
}

// A file that exists but cannot be read (no permission, an I/O error) is
// set aside like a corrupt one, never replaced by an empty list on save.
func TestUnreadableFileIsSetAsideNotOverwritten(t *testing.T) {
	const precious = `{"version": 1, "conversations": [{"id": 1, "title": "precious"}]}`
	ways := []struct {
		name     string
		make     func(path string) error // makes path exist but unreadable
		restore  func(aside string) error
		keptPath string // the file under the set-aside path that holds precious
		needUser bool   // root reads any file
	}{
		{"no read permission", func(path string) error {
			if err := os.WriteFile(path, []byte(precious), 0o600); err != nil {
				return err
			}
			return os.Chmod(path, 0)
		}, func(aside string) error { return os.Chmod(aside, 0o600) }, "", true},
		{"a directory in its place", func(path string) error {
			if err := os.Mkdir(path, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(path, "inside"), []byte(precious), 0o644)
		}, func(string) error { return nil }, "inside", false},
	}
	for _, f := range files {
		for _, w := range ways {
			t.Run(f.name+"/"+w.name, func(t *testing.T) {
				if w.needUser && os.Getuid() == 0 {
					t.Skip("root reads files without read permission")
				}
				s, _ := Open(t.TempDir())
				path := filepath.Join(s.Dir(), f.name)
				if err := w.make(path); err != nil {
					t.Fatal(err)
				}
				err := f.load(s)
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("error %v, want a *CorruptError", err)
				}
				if !strings.Contains(err.Error(), "set aside as") || !strings.Contains(ce.Aside, ".unreadable-") {
					t.Errorf("error %q does not say where the unreadable file went", err)
				}
				if err := f.save(s); err != nil {
					t.Fatal(err)
				}
				if err := w.restore(ce.Aside); err != nil {
					t.Fatal(err)
				}
				if kept, err := os.ReadFile(filepath.Join(ce.Aside, w.keptPath)); err != nil || string(kept) != precious {
					t.Errorf("set-aside file %s holds %q (%v), want the original", ce.Aside, kept, err)
				}
				if err := f.load(s); err != nil {
					t.Errorf("the file saved in its place does not load: %v", err)
				}
			})
		}
	}
}

// A file that can be neither loaded nor set aside stays where it is, and
// saving refuses to replace it until it is moved away.
func TestFileThatCannotBeSetAsideIsNotSavedOver(t *testing.T) {
	problems := []struct {
		name, kind string
		make       func(path string) error
	}{
		{"corrupt", "corrupt", func(path string) error { return os.WriteFile(path, []byte("{half"), 0o644) }},
		{"unreadable", "unreadable", func(path string) error { return os.Mkdir(path, 0o755) }},
	}
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	for _, f := range files {
		for _, pr := range problems {
			t.Run(f.name+"/"+pr.name, func(t *testing.T) {
				s, _ := Open(t.TempDir())
				s.now = func() time.Time { return t0 }
				path := filepath.Join(s.Dir(), f.name)
				if err := pr.make(path); err != nil {
					t.Fatal(err)
				}
				// A non-empty directory where the file would be set aside
				// makes the rename fail, as a read-only directory would.
				blocker := path + "." + pr.kind + "-" + t0.Format("20060102-150405.000000000")
				if err := os.MkdirAll(filepath.Join(blocker, "full"), 0o755); err != nil {
					t.Fatal(err)
				}
				before, _ := os.Lstat(path)
				err := f.load(s)
				var ce *CorruptError
				if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "nor set aside") {
					t.Fatalf("load error %v, want one saying the file could not be set aside", err)
				}
				err = f.save(s)
				if err == nil || !strings.Contains(err.Error(), "not saving") || !strings.Contains(err.Error(), path) {
					t.Fatalf("save over the file that could not be read: error %v, want a refusal naming %s", err, path)
				}
				if after, err := os.Lstat(path); err != nil || !os.SameFile(before, after) {
					t.Fatalf("the file that could not be read was replaced (%v)", err)
				}
				if err := os.Rename(path, path+".moved"); err != nil {
					t.Fatal(err)
				}
				if err := f.save(s); err != nil {
					t.Errorf("save once the file was moved away: %v", err)
				}
			})
		}
	}
}
