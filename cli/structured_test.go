package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

func TestRunJSONSchema(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	schema := filepath.Join(dir, "s.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":8},"happy":{"type":"boolean"}},"required":["name","happy"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "run", "-m", m, "-p", "Once upon a time", "-n", "100", "--temp", "0", "--json-schema", schema)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	gen := strings.TrimSpace(strings.TrimPrefix(out, "Once upon a time"))
	var v struct {
		Name  *string `json:"name"`
		Happy *bool   `json:"happy"`
	}
	if err := json.Unmarshal([]byte(gen), &v); err != nil || v.Name == nil || v.Happy == nil || len([]rune(*v.Name)) > 8 {
		t.Fatalf("output %q does not follow the schema (%v)", gen, err)
	}
	if !strings.Contains(errOut, "stopped: stop") {
		t.Errorf("the constrained output did not end by itself: %s", errOut)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type":"integer","minimum":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, "minimum"},
		{filepath.Join(dir, "missing.json"), "--json-schema"},
	} {
		code, _, errOut := run(t, "run", "-m", m, "-p", "Hi", "--json-schema", tc.file)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("--json-schema %s: exit %d, %q; want a failure naming %q", tc.file, code, errOut, tc.want)
		}
	}
}

func TestChatJSON(t *testing.T) {
	m := testshared.Path(t, "models/stories260K.gguf")
	code, stdout, stderr := chatWith(t, "Tell me about your dog\n", "-m", m, "--json", "-n", "40", "--temp", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	reply := strings.TrimSpace(stdout)
	if !strings.HasPrefix(reply, "{") {
		t.Errorf("the --json reply %q is not a JSON object", reply)
	}
	if json.Valid([]byte(reply)) {
		var v map[string]any
		if err := json.Unmarshal([]byte(reply), &v); err != nil {
			t.Errorf("reply %q: %v", reply, err)
		}
	}
}
