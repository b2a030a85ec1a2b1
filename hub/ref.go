package hub

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Ref names one file of a hub repository.
type Ref struct {
	Repo     string // "OWNER/NAME", e.g. "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
	File     string // the file's path in the repository, e.g. "qwen2.5-0.5b-instruct-q8_0.gguf"
	Revision string // branch, tag or commit; "" for "main"
}

// String is REPO/FILE, with @REVISION when it is not main.
func (r Ref) String() string {
	s := r.Repo + "/" + r.File
	if r.Revision != "" && r.Revision != "main" {
		s += "@" + r.Revision
	}
	return s
}

func (r Ref) revision() string {
	if r.Revision == "" {
		return "main"
	}
	return r.Revision
}

// maxName is the longest repository owner or name the hub accepts.
const maxName = 96

// Check reports whether r names a file safely: an OWNER/NAME repository of
// letters, digits, '-', '_' and '.', and a relative file path with no empty,
// "." or ".." part, so that the file's place under the models folder stays
// inside it.
func (r Ref) Check() error {
	owner, name, ok := strings.Cut(r.Repo, "/")
	if !ok || !validName(owner) || !validName(name) {
		return fmt.Errorf("repository %q is not OWNER/NAME (letters, digits, '-', '_' and '.', as Qwen/Qwen2.5-0.5B-Instruct-GGUF)", r.Repo)
	}
	if r.File == "" {
		return fmt.Errorf("no file name given for repository %s", r.Repo)
	}
	if len(r.File) > 1024 || strings.ContainsAny(r.File, "\\\x00") || strings.HasPrefix(r.File, "/") {
		return fmt.Errorf("file name %q is not a path inside the repository", r.File)
	}
	for _, part := range strings.Split(r.File, "/") {
		if part == "" || part == "." || part == ".." || hasControl(part) {
			return fmt.Errorf("file name %q is not a path inside the repository", r.File)
		}
	}
	if rev := r.revision(); len(rev) > 256 || hasControl(rev) || strings.Contains(rev, "..") {
		return fmt.Errorf("revision %q is not a branch, tag or commit", r.Revision)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > maxName || s[0] == '.' || s[0] == '-' || strings.Contains(s, "..") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// URL is the file's resolve address under the hub endpoint.
func (r Ref) URL(endpoint string) string {
	parts := strings.Split(r.File, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return endpoint + "/" + r.Repo + "/resolve/" + url.PathEscape(r.revision()) + "/" + strings.Join(parts, "/")
}

// path is where the file goes under dir: dir/OWNER/NAME/FILE.
func (r Ref) path(dir string) string {
	return filepath.Join(dir, filepath.FromSlash(r.Repo), filepath.FromSlash(r.File))
}
