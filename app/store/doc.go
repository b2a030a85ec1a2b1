// Package store saves and restores kvscope's conversations, drafts and
// settings as JSON files in one directory, atomically.
//
// Each save writes a temporary file in the same directory, syncs it and
// renames it over the old one, so a crash or a kill leaves either the old
// file or the new one, never half of each. A file that cannot be read back
// (truncated, edited by hand, from an unknown future version) or cannot be
// read at all (no permission, an I/O error) is never overwritten: Load
// renames it aside, next to the original with a ".corrupt-<time>" or
// ".unreadable-<time>" suffix, starts from an empty state and says so in a
// *CorruptError, so the user can be told where their data went. If even
// the rename fails, Load returns an error and Save refuses to replace the
// file until it is moved away. A failed sync, of the file or of the
// folder after the rename, is an error too: the save may not survive a
// crash, and the caller tells the user.
//
// One kvscope uses a folder at a time: Acquire takes the folder's lock file
// (LockFile, an flock through github.com/gofrs/flock) for the app's life,
// and a second kvscope gets an *InUseError instead of saving over the
// first one's conversations. The lock's holder removes the temporary files
// of saves a crash cut short (RemoveStale).
package store
