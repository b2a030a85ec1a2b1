package hub

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hugging Face hub's address, used when HF_ENDPOINT
// is not set.
const DefaultEndpoint = "https://huggingface.co"

// Source names where a model file was found.
type Source string

// The places Scan looks in.
const (
	SourceKvscope  Source = "kvscope"
	SourceLlamaCpp Source = "llama.cpp"
	SourceLMStudio Source = "LM Studio"
	SourceHFHub    Source = "Hugging Face"
)

// Dirs are the folders Scan looks in; an empty one is skipped.
type Dirs struct {
	Kvscope  string   // kvscope's own models folder, where Download puts files
	LlamaCpp string   // llama.cpp's cache of -hf downloads
	LMStudio []string // LM Studio's models folders
	HFHub    string   // the Hugging Face hub cache
}

// env reads an environment variable, treating blank as unset.
func env(key string) string { return strings.TrimSpace(os.Getenv(key)) }

// ModelsDir returns kvscope's own models folder,
// os.UserCacheDir()/kvscope/models.
func ModelsDir() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no folder for kvscope's models: %w", err)
	}
	return filepath.Join(c, "kvscope", "models"), nil
}

// hfHome is HF_HOME, else XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface (on every system, as huggingface_hub does); "" when
// there is no home folder.
func hfHome() string {
	if h := env("HF_HOME"); h != "" {
		return h
	}
	if x := env("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "huggingface")
	}
	return ""
}

// HFHubCache returns the Hugging Face hub cache folder: HF_HUB_CACHE, else
// HUGGINGFACE_HUB_CACHE, else HF_HOME's hub folder; "" when none can be
// determined.
func HFHubCache() string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := env(k); v != "" {
			return v
		}
	}
	if h := hfHome(); h != "" {
		return filepath.Join(h, "hub")
	}
	return ""
}

// DefaultDirs returns this user's folders, from the environment as each
// tool reads it (see the package documentation).
func DefaultDirs() Dirs {
	var d Dirs
	d.Kvscope, _ = ModelsDir()
	if v := env("LLAMA_CACHE"); v != "" {
		d.LlamaCpp = v
	} else if c, err := os.UserCacheDir(); err == nil {
		d.LlamaCpp = filepath.Join(c, "llama.cpp")
	}
	if home, err := os.UserHomeDir(); err == nil {
		d.LMStudio = []string{
			filepath.Join(home, ".lmstudio", "models"),
			filepath.Join(home, ".cache", "lm-studio", "models"),
		}
	}
	d.HFHub = HFHubCache()
	return d
}

// Endpoint returns the hub's base URL: HF_ENDPOINT without a trailing slash,
// or DefaultEndpoint. It is an error when HF_ENDPOINT is not an http or
// https URL.
func Endpoint() (string, error) {
	e := env("HF_ENDPOINT")
	if e == "" {
		return DefaultEndpoint, nil
	}
	return checkEndpoint(e)
}

// checkEndpoint validates a hub base URL and drops its trailing slashes.
func checkEndpoint(e string) (string, error) {
	u, err := url.Parse(e)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("hub endpoint %q (HF_ENDPOINT) is not an http(s) URL such as %s", e, DefaultEndpoint)
	}
	return strings.TrimRight(e, "/"), nil
}

// Token returns the hub access token: HF_TOKEN, else the contents of the
// file HF_TOKEN_PATH names, else of HF_HOME's token file (where
// huggingface-cli login stores it); "" when there is none.
func Token() string {
	if t := env("HF_TOKEN"); t != "" {
		return t
	}
	path := env("HF_TOKEN_PATH")
	if path == "" {
		if h := hfHome(); h != "" {
			path = filepath.Join(h, "token")
		}
	}
	if path == "" {
		return ""
	}
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Size() > 4096 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
