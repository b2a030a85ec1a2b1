package app

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/store"
	"kvscope/app/uithread"
)

// killChildEnv names the directory a child process of
// TestKillMidGenerationKeepsConversations works in.
const killChildEnv = "KVSCOPE_KILL_TEST_DIR"

// TestKillMidGenerationKeepsConversations runs the app in a child process,
// kills it (SIGKILL) while two conversations generate, then starts the app
// again on the same files: both conversations are there, with what the user
// typed and the replies so far.
func TestKillMidGenerationKeepsConversations(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(t, dir)
		return
	}
	model := stories(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillMidGenerationKeepsConversations$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir, "KVSCOPE_KILL_TEST_MODEL="+model)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "GENERATING" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatal("the child exited before generating")
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the child did not start generating")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	a, _ := newApp(t, dir)
	if err := a.OpenModel(model); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		convs := a.chat.Conversations()
		var typed []string
		for _, c := range convs.List {
			if len(c.Messages) == 2 {
				typed = append(typed, c.Messages[0].Text)
				if r := c.Messages[1]; r.Text == "" || r.Finish != "interrupted" {
					t.Errorf("conversation %d: reply %+v, want its text so far, marked interrupted", c.ID, r)
				}
			}
		}
		got := strings.Join(typed, "|")
		if !strings.Contains(got, "Once upon a time") || !strings.Contains(got, "Tom and his dog") {
			t.Errorf("after the kill, the conversations hold %q; want both messages", got)
		}
	})
}

// killChild opens the app on dir, starts two conversations generating,
// says GENERATING once their replies are saved, and waits to be killed.
func killChild(t *testing.T, dir string) {
	test.NewTempApp(t)
	a, _ := newApp(t, dir)
	if err := a.OpenModel(os.Getenv("KVSCOPE_KILL_TEST_MODEL")); err != nil {
		t.Fatal(err)
	}
	// Slow motion, so that the replies are still going when the kill comes.
	if err := a.Engine().SetDelay(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	uithread.Locked(func() {
		for _, text := range []string{"Once upon a time", "Tom and his dog"} {
			id := a.chat.NewConversation()
			a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 0; c.Sampling.Temperature = 0 })
			if err := a.chat.SendText(id, text); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	})
	uithread.WaitFor(t, "both replies to be under way", func() bool {
		for _, c := range a.chat.Conversations().List {
			if len(c.Messages) == 2 && c.Messages[1].Tokens < 3 {
				return false
			}
		}
		return len(ids) == 2
	})
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	uithread.WaitFor(t, "both replies so far to be on disk", func() bool {
		convs, err := st.LoadConversations()
		if err != nil {
			t.Fatal(err)
		}
		saved := 0
		for _, c := range convs.List {
			if len(c.Messages) == 2 && c.Messages[1].Text != "" {
				saved++
			}
		}
		return saved == 2
	})
	os.Stdout.WriteString("GENERATING\n")
	time.Sleep(time.Minute)
}
