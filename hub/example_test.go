package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"kvscope/hub"
)

// Download a file with progress events, as the app's Model tab does: each
// event's Fraction sets a ProgressBar (through fyne.Do), Speed and ETA fill
// a label, and cancelling the context is the pause button. A local server
// stands in for the hub here.
func ExampleClient_Download() {
	file := bytes.Repeat([]byte("GGUF"), 1000)
	sum := sha256.Sum256(file)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(file)))
		http.ServeContent(w, r, "model.gguf", time.Time{}, bytes.NewReader(file))
	}))
	defer srv.Close()
	dir, _ := os.MkdirTemp("", "models")
	defer os.RemoveAll(dir)

	c := &hub.Client{Endpoint: srv.URL, Dir: dir, Retries: 3}
	ref := hub.Ref{Repo: "org/model-GGUF", File: "model.gguf"}
	res, err := c.Download(context.Background(), ref, func(p hub.Progress) {
		if p.Phase == hub.PhaseDone {
			fmt.Printf("%s: %.0f%% of %d bytes\n", p.Phase, 100*p.Fraction(), p.Total)
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Size, res.SHA256 == hex.EncodeToString(sum[:]))
	// Output:
	// done: 100% of 4000 bytes
	// 4000 true
}
