package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lockChildEnv names the folder a child process of
// TestLockHoldsAcrossProcesses tries to lock.
const lockChildEnv = "KVSCOPE_STORE_LOCK_CHILD"

// A second Acquire of a held folder is refused with a message naming the
// folder, and leaves the folder's files alone; after Release it succeeds.
func TestSecondAcquireIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ConversationsFile+".tmp-42")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := Acquire(dir)
	var inUse *InUseError
	if !errors.As(err, &inUse) || second != nil {
		t.Fatalf("second Acquire: %v, %v; want an *InUseError", second, err)
	}
	if want := "kvscope is already running with data folder " + dir; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Errorf("the refused Acquire touched the folder: %v", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	again.Release()
}

// The lock holds against another process, and dies with its holder.
func TestLockHoldsAcrossProcesses(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		l, err := Acquire(dir)
		var inUse *InUseError
		switch {
		case errors.As(err, &inUse):
			os.Stdout.WriteString(err.Error())
			os.Exit(3)
		case err != nil:
			os.Stdout.WriteString(err.Error())
			os.Exit(4)
		}
		l.Release()
		os.Exit(0)
	}
	dir := t.TempDir()
	child := func() (int, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockHoldsAcrossProcesses$")
		cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := child(); code != 3 || !strings.Contains(out, "already running with data folder "+dir) {
		t.Errorf("child locking a held folder: exit %d, %q; want exit 3 and the in-use message", code, out)
	}
	l.Release()
	if code, out := child(); code != 0 {
		t.Errorf("child locking a free folder: exit %d, %q", code, out)
	}
}

// RemoveStale removes the temporary files of interrupted saves, and
// nothing else.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	files := map[string]bool{ // name → whether RemoveStale removes it
		ConversationsFile + ".tmp-123":   true,
		SettingsFile + ".tmp-9":          true,
		ConversationsFile:                false,
		"notes.txt.tmp-1":                false, // not a file of ours
		ConversationsFile + ".corrupt-1": false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, SettingsFile+".tmp-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	removed, err := l.RemoveStale()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{ConversationsFile + ".tmp-123", SettingsFile + ".tmp-9"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for name, gone := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone != errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: removed %v, want %v", name, !gone, gone)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, SettingsFile+".tmp-dir")); err != nil {
		t.Errorf("a directory named like a temporary file was removed: %v", err)
	}
}

// A failed sync, of the file or of its folder, is an error naming the
// file; a failed file sync leaves the old copy and no temporary file.
func TestSyncFailuresAreReported(t *testing.T) {
	tests := []struct {
		name    string
		failDir bool // fail the folder's sync, else the file's
		want    string
		newCopy bool // whether the file holds the new copy after the save
	}{
		{"file", false, "syncing it to disk failed", false},
		{"folder", true, "syncing its folder failed", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SaveSettings(Settings{LastModel: "old"}); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("input/output error")
			syncFile = func(f *os.File) error {
				if fi, err := f.Stat(); err == nil && fi.IsDir() == tc.failDir {
					return boom
				}
				return f.Sync()
			}
			defer func() { syncFile = (*os.File).Sync }()
			err = s.SaveSettings(Settings{LastModel: "new"})
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), SettingsFile) {
				t.Fatalf("save with a failing %s sync: %v; want an error naming %s and saying %q", tc.name, err, SettingsFile, tc.want)
			}
			syncFile = (*os.File).Sync
			got, err := s.LoadSettings()
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{false: "old", true: "new"}[tc.newCopy]; got.LastModel != want {
				t.Errorf("after the failed save the file holds %q, want %q", got.LastModel, want)
			}
			if m, _ := filepath.Glob(filepath.Join(s.Dir(), "*.tmp-*")); len(m) > 0 {
				t.Errorf("temporary files left: %v", m)
			}
		})
	}
}
