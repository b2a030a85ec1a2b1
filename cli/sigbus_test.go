package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvscope/internal/testshared"
)

// TestMain lets a test run the command line in a child process: with
// KVSCOPE_CLI_CHILD set, the test binary is kvscope.
func TestMain(m *testing.M) {
	if os.Getenv("KVSCOPE_CLI_CHILD") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// A model file truncated on disk under a running `kvscope run` on the Go
// backend, which reads the weights from the file's mapping, ends the run
// with an error that names the file, not with SIGBUS.
func TestModelTruncatedWhileRunning(t *testing.T) {
	// A rolling window never fills: the run goes on until the file goes.
	path, cmd, stderr := truncateUnderRun(t, "-n", "16000000", "--backend", "go")
	err := cmd.Wait()
	msg := stderr.String()
	if err == nil {
		t.Fatalf("the run exited 0 after its model was truncated; stderr %q", msg)
	}
	for _, bad := range []string{"SIGBUS", "fatal error", "goroutine "} {
		if strings.Contains(msg, bad) {
			t.Fatalf("the run crashed (%s):\n%s", bad, msg)
		}
	}
	if !strings.Contains(msg, path) || !strings.Contains(msg, "changed on disk") {
		t.Fatalf("the error does not name the file and what happened: %q", msg)
	}
	t.Logf("exit %v: %s", err, strings.TrimSpace(msg))
}

// The native backend copies the weights before C reads them (a fault in C
// cannot be recovered), so a model truncated under it does not matter: the
// run goes on to its end.
func TestModelTruncatedUnderTheNativeBackend(t *testing.T) {
	_, cmd, stderr := truncateUnderRun(t, "-n", "3000", "--backend", "cpu")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run failed after its model was truncated: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "backend cpu") {
		t.Fatalf("the run did not say it ran on the native backend: %q", stderr.String())
	}
}

// truncateUnderRun starts `kvscope run` with a rolling window on a copy of
// stories260K, truncates the copy once text streams, and returns the copy's
// path, the command (to Wait for; its output is drained) and its stderr.
func truncateUnderRun(t *testing.T, args ...string) (string, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	copyFile(t, testshared.Path(t, "models/stories260K.gguf"), path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"run", "-m", path, "-p", "Once upon a time",
		"--overflow", "rolling", "--temp", "0"}, args...)...)
	cmd.Env = append(os.Environ(), "KVSCOPE_CLI_CHILD=1")
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := io.ReadAtLeast(out, buf, 64); err != nil {
		cmd.Wait()
		if strings.Contains(stderr.String(), "backend \"") {
			t.Skipf("the backend does not load: %s", stderr.String())
		}
		t.Fatalf("no output before truncating: %v (stderr %q)", err, stderr.String())
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, out)
	return path, cmd, stderr
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
