//go:build unix

package native

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPackFault packs weights from a mapped file that was truncated after
// mapping: the read faults, and Pack returns an error saying so instead of
// the process dying (for each packed type, on several goroutines).
func TestPackFault(t *testing.T) {
	l := loadLib(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, typ := range packTypes {
		rows, cols := 512, 1024 // over 1 MiB packed for Q8_0: split among goroutines
		w, _ := randWeights(t, r, typ, rows, cols)
		path := filepath.Join(t.TempDir(), "weights")
		if err := os.WriteFile(path, w, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := syscall.Mmap(int(f.Fd()), 0, len(w), syscall.PROT_READ, syscall.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Skipf("mmap: %v", err)
		}
		if err := os.Truncate(path, int64(len(w)/3)); err != nil {
			t.Fatal(err)
		}
		p, err := l.Pack(typ, data, rows, cols)
		syscall.Munmap(data)
		if p != nil || err == nil || !strings.Contains(err.Error(), "faulted") {
			t.Errorf("%s: packing a truncated mapping gave %v, %v; want an error naming the fault", typ, p, err)
		}
	}
}
