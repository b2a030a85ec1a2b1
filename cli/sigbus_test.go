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
	src := testshared.Path(t, "models/stories260K.gguf")
	path := filepath.Join(t.TempDir(), "model.gguf")
	copyFile(t, src, path)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A rolling window never fills: the run goes on until the file goes.
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "-m", path, "-p", "Once upon a time", "-n", "16000000",
		"--overflow", "rolling", "--temp", "0", "--backend", "go")
	cmd.Env = append(os.Environ(), "KVSCOPE_CLI_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Truncate once text is streaming.
	buf := make([]byte, 256)
	if _, err := io.ReadAtLeast(out, buf, 64); err != nil {
		t.Fatalf("no output before truncating: %v (stderr %q)", err, stderr.String())
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	msg := stderr.String()
	if ctx.Err() != nil {
		t.Fatalf("the run did not end after the model was truncated; stderr %q", msg)
	}
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
	src := testshared.Path(t, "models/stories260K.gguf")
	path := filepath.Join(t.TempDir(), "model.gguf")
	copyFile(t, src, path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "-m", path, "-p", "Once upon a time", "-n", "3000",
		"--overflow", "rolling", "--temp", "0", "--backend", "cpu")
	cmd.Env = append(os.Environ(), "KVSCOPE_CLI_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := io.ReadAtLeast(out, buf, 64); err != nil {
		if strings.Contains(stderr.String(), "backend \"cpu\"") {
			t.Skipf("the native library does not load: %s", stderr.String())
		}
		t.Fatalf("no output before truncating: %v (stderr %q)", err, stderr.String())
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run failed after its model was truncated: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "backend cpu") {
		t.Fatalf("the run did not say it ran on the native backend: %q", stderr.String())
	}
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
