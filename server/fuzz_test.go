package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bodies to the request parser of both
// completion endpoints: it never panics, and what it refuses is a 4xx.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"prompt": "Hi", "max_tokens": 5, "n": 2, "stop": ["a"], "temperature": 0.5, "top_k": -1, "seed": -3}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": [[1, 2], [3]], "max_tokens": 1e400}`,
		`{"prompt": [1, -1]}`, `{"messages": [{"role": "", "content": null}]}`, `{"n": -9223372036854775808}`,
		`[]`, `"x"`, `{`, `{"prompt": "\ud800"}`, `{"prompt": "Hi", "max_completion_tokens": 3.0}`,
	} {
		f.Add(seed)
	}
	_, _, s := newTestServerFull(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		for _, chat := range []bool{false, true} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			fl, e := readFields(w, r, 1<<20)
			if e == nil {
				_, e = s.parse(fl, chat)
			}
			if e != nil && (e.status < 400 || e.status > 499 || e.Message == "") {
				t.Errorf("body %q: refused with %d %q", body, e.status, e.Message)
			}
		}
	})
}
