// This file holds the data folder's lock: one kvscope per folder.

package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

// LockFile is the file in the data folder whose lock says one kvscope
// uses the folder. It stays in the folder; only the lock comes and goes.
const LockFile = "kvscope.lock"

// InUseError says another kvscope holds the data folder's lock.
type InUseError struct {
	Dir string // the data folder
}

// Error names the folder.
func (e *InUseError) Error() string {
	return fmt.Sprintf("kvscope is already running with data folder %s", e.Dir)
}

// Lock is one kvscope's hold on a data folder: while it is held no other
// kvscope (another process, or another Lock in this one) can take it, so
// two windows never save over each other's conversations. The operating
// system drops it when the process ends, killed or not.
type Lock struct {
	dir string
	fl  *flock.Flock
}

// Acquire takes dir's lock without waiting, creating dir if needed. When
// another kvscope holds it, the error is an *InUseError and nothing in dir
// is touched.
func Acquire(dir string) (*Lock, error) {
	if dir == "" {
		return nil, errors.New("store: no directory given")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: cannot create %s: %w", dir, err)
	}
	fl := flock.New(filepath.Join(dir, LockFile), flock.SetPermissions(0o644))
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("store: cannot lock the data folder %s: %w", dir, err)
	}
	if !ok {
		return nil, &InUseError{Dir: dir}
	}
	return &Lock{dir: dir, fl: fl}, nil
}

// Dir returns the locked folder.
func (l *Lock) Dir() string { return l.dir }

// RemoveStale removes the temporary files that saves cut short by a crash
// left in the folder (such as conversations.json.tmp-1234) and returns
// their names. Only the lock's holder may: another kvscope's save could be
// writing one.
func (l *Lock) RemoveStale() ([]string, error) {
	var removed []string
	var errs []error
	for _, name := range []string{ConversationsFile, SettingsFile} {
		matches, err := filepath.Glob(filepath.Join(l.dir, name+".tmp-*"))
		if err != nil {
			return removed, fmt.Errorf("store: cannot list %s: %w", l.dir, err)
		}
		for _, m := range matches {
			if fi, err := os.Lstat(m); err != nil || !fi.Mode().IsRegular() {
				continue // not a file a save wrote
			}
			if err := os.Remove(m); err != nil {
				errs = append(errs, fmt.Errorf("store: cannot remove the stale temporary file %s: %w", m, err))
				continue
			}
			removed = append(removed, filepath.Base(m))
		}
	}
	return removed, errors.Join(errs...)
}

// Release gives the lock up. Releasing twice is a no-op.
func (l *Lock) Release() error {
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("store: cannot unlock the data folder %s: %w", l.dir, err)
	}
	return nil
}
