package kvcache

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTmpCorpus(t *testing.T) {
	dir := os.Getenv("CORPUS")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := strings.Split(string(b), "\n")
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatal(err)
		}
		data := []byte(s)
		i := 0
		rnd := func(n int) int {
			if i >= len(data) {
				return -1
			}
			b := int(data[i])
			i++
			return b % n
		}
		t0 := time.Now()
		done := make(chan error)
		go func() {
			d, _ := newDriver(t, rnd)
			for {
				ok, err := d.step()
				if err != nil || !ok {
					done <- err
					return
				}
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s hangs (%d bytes): %q", f, len(data), data)
		}
		_ = t0
	}
}
