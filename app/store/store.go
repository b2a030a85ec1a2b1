// This file holds the Store: conversations, drafts and settings saved
// atomically, corrupt files set aside.

package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Version is the file format version this package writes and reads.
const Version = 1

// The file names in the directory.
const (
	ConversationsFile = "conversations.json"
	SettingsFile      = "settings.json"
)

// Message is one turn of a conversation.
type Message struct {
	Role string `json:"role"` // "user" or "assistant"
	Text string `json:"text"`
	// Assistant messages: how the reply ended ("stop", "length",
	// "cancelled", "error", "interrupted" when the app stopped while it was
	// generating, "" while generating), its tokens and speed.
	Finish string  `json:"finish,omitempty"`
	Error  string  `json:"error,omitempty"`
	Tokens int     `json:"tokens,omitempty"`
	TPS    float64 `json:"tps,omitempty"`
	Cached int     `json:"cached,omitempty"` // prompt tokens reused from the prefix cache
	Prompt int     `json:"prompt,omitempty"` // prompt tokens
	// IDs are an assistant reply's generated token ids, as the model
	// produced them, so that the next prompt holds exactly the ids the
	// prefix cache holds; Vocab names the vocabulary they belong to (see
	// package app/chat), and ids of another vocabulary are not used.
	IDs   TokenIDs `json:"ids,omitempty"`
	Vocab string   `json:"vocab,omitempty"`
	// End is the end-of-generation token the model ended the reply on
	// (none where it was cut short): the next prompt holds it after IDs
	// where the template writes it.
	End  TokenIDs  `json:"end,omitempty"`
	Time time.Time `json:"time"`
}

// TokenIDs are token ids. They are saved as one string of decimal numbers
// separated by spaces, which the indented file keeps on one line (an array
// would take a line a number); an array of numbers loads too.
type TokenIDs []int

// MarshalJSON returns the ids as one string.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+6*len(t))
	b = append(b, '"')
	for i, id := range t {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, '"'), nil
}

// UnmarshalJSON reads ids saved by MarshalJSON, or an array of numbers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		err := json.Unmarshal(b, &ids)
		*t = ids
		return err
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("token ids: %w", err)
	}
	fields := strings.Fields(s)
	ids := make(TokenIDs, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("token id %q is not a whole number", f)
		}
		ids[i] = n
	}
	*t = ids
	return nil
}

// Sampling are a conversation's sampling settings.
type Sampling struct {
	Temperature   float32 `json:"temperature"`
	TopK          int     `json:"top_k"`
	TopP          float32 `json:"top_p"`
	MinP          float32 `json:"min_p"`
	RepeatPenalty float32 `json:"repeat_penalty"`
	MaxTokens     int     `json:"max_tokens"` // 0: until the context is full
	Seed          uint64  `json:"seed"`       // 0: a new random seed each reply
}

// DefaultSampling returns llama.cpp's default sampling and 256-token replies.
func DefaultSampling() Sampling {
	return Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, MaxTokens: 256}
}

// Conversation is one chat: its messages, settings and unsent draft.
type Conversation struct {
	ID       int64     `json:"id"`
	Title    string    `json:"title"`
	System   string    `json:"system,omitempty"`
	Sampling Sampling  `json:"sampling"`
	Messages []Message `json:"messages"`
	Draft    string    `json:"draft,omitempty"`
	// Plain makes the conversation plain completion even where the model
	// has a chat template.
	Plain bool `json:"plain,omitempty"`
	// Thinking, when set, is the enable_thinking of Qwen 3-style chat
	// templates; nil leaves it to the template (which reads it as on).
	Thinking *bool `json:"thinking,omitempty"`
	// JSON constrains replies to JSON: an object, or JSONSchema's when
	// that is set.
	JSON       bool      `json:"json,omitempty"`
	JSONSchema string    `json:"json_schema,omitempty"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
}

// Conversations is the content of ConversationsFile.
type Conversations struct {
	Version  int            `json:"version"`
	Selected int64          `json:"selected"` // the conversation shown
	NextID   int64          `json:"next_id"`
	List     []Conversation `json:"conversations"`
}

// Cache are the cache and scheduler settings the controls set, by name.
type Cache struct {
	BlockSize int    `json:"block_size"`
	Budget    int64  `json:"budget"` // bytes; 0: automatic
	K         string `json:"k"`
	V         string `json:"v"`
	Eviction  string `json:"eviction"`
	Preempt   string `json:"preempt"`
	Allocator string `json:"allocator"`
	Overflow  string `json:"overflow"`
	MaxSeqs   int    `json:"max_seqs"`
}

// Settings is the content of SettingsFile.
type Settings struct {
	Version      int      `json:"version"`
	LastModel    string   `json:"last_model,omitempty"` // a path, or "demo"
	RecentModels []string `json:"recent_models,omitempty"`
	Cache        *Cache   `json:"cache,omitempty"`
	HeatmapMode  string   `json:"heatmap_mode,omitempty"`
	// Backend is the compute backend chosen in Controls ("go", "cpu",
	// ...); empty: $KVSCOPE_BACKEND, else the best that loads.
	Backend string `json:"backend,omitempty"`
}

// MaxRecent is how many recent models Settings keeps.
const MaxRecent = 8

// AddRecent puts path first in the recent models, without duplicates.
func (s *Settings) AddRecent(path string) {
	out := []string{path}
	for _, p := range s.RecentModels {
		if p != path && len(out) < MaxRecent {
			out = append(out, p)
		}
	}
	s.RecentModels = out
}

// CorruptError says a file could not be read and where it was moved.
type CorruptError struct {
	File  string // the file that was unreadable
	Aside string // where it is now
	Err   error  // what was wrong
}

// Error names the file, the problem and where the file was set aside.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s could not be read (%v); it was set aside as %s and kvscope started without it", e.File, e.Err, e.Aside)
}

// Unwrap returns what was wrong with the file.
func (e *CorruptError) Unwrap() error { return e.Err }

// Store reads and writes the files of one directory. Its methods are safe
// for concurrent use.
type Store struct {
	dir string
	mu  sync.Mutex
	now func() time.Time
	// kept: files that could not be read nor set aside, by name, with
	// why; save refuses to replace them while they are there.
	kept map[string]error
}

// Open returns a store over dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: no directory given")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: cannot create %s: %w", dir, err)
	}
	return &Store{dir: dir, now: time.Now, kept: map[string]error{}}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// DefaultDir returns os.UserConfigDir()/kvscope.
func DefaultDir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("store: no user configuration directory: %w", err)
	}
	return filepath.Join(d, "kvscope"), nil
}

// LoadConversations reads the conversations. A missing file gives an empty
// list and no error; one that cannot be read or decoded is set aside (see
// CorruptError). One that cannot even be set aside gives an error, and
// SaveConversations then refuses to replace it until it is moved away.
// Replies that were still generating when the file was saved (the app was
// killed) come back with Finish "interrupted" and the text they had.
func (s *Store) LoadConversations() (Conversations, error) {
	var c Conversations
	err := s.load(ConversationsFile, &c, func() error {
		if c.Version != Version {
			return fmt.Errorf("format version %d, this kvscope reads version %d", c.Version, Version)
		}
		seen := map[int64]bool{}
		for _, conv := range c.List {
			if seen[conv.ID] {
				return fmt.Errorf("conversation id %d appears twice", conv.ID)
			}
			seen[conv.ID] = true
			c.NextID = max(c.NextID, conv.ID+1)
		}
		return nil
	})
	if err != nil {
		return Conversations{Version: Version}, err
	}
	if c.Version == 0 {
		c.Version = Version
	}
	for i := range c.List {
		for j := range c.List[i].Messages {
			if m := &c.List[i].Messages[j]; m.Role == "assistant" && m.Finish == "" {
				m.Finish = "interrupted"
			}
		}
	}
	return c, nil
}

// SaveConversations writes the conversations atomically. It refuses to
// replace a file that LoadConversations could neither read nor set aside.
func (s *Store) SaveConversations(c Conversations) error {
	c.Version = Version
	return s.save(ConversationsFile, c)
}

// LoadSettings reads the settings, like LoadConversations.
func (s *Store) LoadSettings() (Settings, error) {
	var st Settings
	err := s.load(SettingsFile, &st, func() error {
		if st.Version != Version {
			return fmt.Errorf("format version %d, this kvscope reads version %d", st.Version, Version)
		}
		return nil
	})
	if err != nil {
		return Settings{Version: Version}, err
	}
	if st.Version == 0 {
		st.Version = Version
	}
	return st, nil
}

// SaveSettings writes the settings atomically, like SaveConversations.
func (s *Store) SaveSettings(st Settings) error {
	st.Version = Version
	return s.save(SettingsFile, st)
}

// load reads name into v and checks it. A file that cannot be read (no
// permission, an I/O error) or decoded is set aside, never left to be
// saved over; one that cannot be set aside is kept from save.
func (s *Store) load(name string, v any, check func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.dir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		delete(s.kept, name)
		return nil
	}
	if err != nil {
		return s.setAside(name, "unreadable", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	bad := dec.Decode(v)
	if bad == nil && dec.More() {
		bad = errors.New("extra data after the JSON value")
	}
	if bad == nil {
		bad = check()
	}
	if bad == nil {
		delete(s.kept, name)
		return nil
	}
	return s.setAside(name, "corrupt", bad)
}

// setAside renames file name, which could not be loaded because of bad,
// to name.kind-TIME. If that fails the file stays where it is and save
// refuses to replace it. Call with s.mu held.
func (s *Store) setAside(name, kind string, bad error) error {
	path := filepath.Join(s.dir, name)
	aside := fmt.Sprintf("%s.%s-%s", path, kind, s.now().UTC().Format("20060102-150405.000000000"))
	if err := os.Rename(path, aside); err != nil {
		s.kept[name] = bad
		return fmt.Errorf("store: %s could not be read (%v) nor set aside (%v); kvscope will not save over it", path, bad, err)
	}
	delete(s.kept, name)
	return &CorruptError{File: path, Aside: aside, Err: bad}
}

// save writes v to name through a synced temporary file and a rename,
// unless name is a file load could neither read nor set aside.
func (s *Store) save(name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("store: cannot encode %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.dir, name)
	if bad, ok := s.kept[name]; ok {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			delete(s.kept, name) // moved away: nothing left to lose
		} else {
			return fmt.Errorf("store: not saving %s: it could not be read (%v) and saving would replace it; move it away to let kvscope save", path, bad)
		}
	}
	f, err := os.CreateTemp(s.dir, name+".tmp-*")
	if err != nil {
		return fmt.Errorf("store: cannot save %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		if err = syncFile(f); err != nil {
			err = fmt.Errorf("syncing it to disk failed: %w", err)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: cannot save %s: %w", path, err)
	}
	if err := syncDir(s.dir); err != nil { // make the rename durable
		return fmt.Errorf("store: %s was written, but syncing its folder failed, so a crash could still lose it: %w", path, err)
	}
	return nil
}

// syncFile flushes a file to disk; tests replace it to make it fail.
var syncFile = (*os.File).Sync

// syncDir flushes a directory's entries (a rename) to disk. Where the
// system cannot sync a directory (Windows, some file systems), there is
// nothing to flush and it returns nil; every other failure is returned.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncFile(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL) {
		return nil
	}
	return err
}
