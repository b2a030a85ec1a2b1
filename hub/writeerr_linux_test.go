package hub

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A real write error: with the process's file size limit (RLIMIT_FSIZE)
// below the file's size, writing the part fails with EFBIG (Go ignores
// SIGXFSZ). The error says so in one line and the bytes written stay for a
// resume, which finishes once the limit is lifted.
func TestWriteErrorKeepsPart(t *testing.T) {
	const size, limit = 300_000, 128 << 10
	h := newFakeHub(t, size)
	c := testClient(t, h)

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip("no RLIMIT_FSIZE:", err)
	}
	if old.Cur < size*2 {
		t.Skipf("file size limit already %d", old.Cur)
	}
	lim := old
	lim.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skip("cannot set RLIMIT_FSIZE:", err)
	}
	_, err := c.Download(context.Background(), h.ref(), nil)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal("cannot restore RLIMIT_FSIZE:", err)
	}
	if err == nil || !strings.Contains(err.Error(), "cannot write the download") || !strings.Contains(err.Error(), "kept in") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line saying the write failed and the part is kept", err)
	}
	dest, _ := c.Path(h.ref())
	st, serr := os.Stat(dest + partSuffix)
	if serr != nil || st.Size() != limit {
		t.Fatalf("part: %v, %v; want %d bytes kept", st, serr, limit)
	}
	res, err := c.Download(context.Background(), h.ref(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != limit {
		t.Errorf("resumed %d, want %d", res.Resumed, limit)
	}
}
