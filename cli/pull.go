package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"

	"kvscope/hub"
)

// pullCmd downloads a GGUF file from the Hugging Face hub into kvscope's
// models folder, with a progress bar; an interrupted download resumes when
// the command is run again.
func pullCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", "[--revision REV] [--dir DIR] REPO FILE | NAME", stderr)
	rev := fs.String("revision", "main", "branch, tag or commit of the repository")
	dir := fs.String("dir", "", "models `folder` to download into (default: kvscope's, "+defaultModelsDir()+")")
	if err := fs.parseArgs(args); err != nil {
		return err
	}
	var ref hub.Ref
	switch fs.NArg() {
	case 1:
		e, ok := hub.Find(fs.Arg(0))
		if !ok {
			return fs.usageErr("%q is not a catalog name (see 'kvscope models --catalog'); to download any file give REPO FILE", fs.Arg(0))
		}
		ref = e.Ref
	case 2:
		ref = hub.Ref{Repo: fs.Arg(0), File: fs.Arg(1)}
	default:
		return fs.usageErr("give a repository and a file, as 'kvscope pull Qwen/Qwen2.5-0.5B-Instruct-GGUF qwen2.5-0.5b-instruct-q8_0.gguf', or a name from 'kvscope models --catalog'")
	}
	ref.Revision = *rev
	if err := ref.Check(); err != nil {
		return &usageError{cmd: "pull", err: err}
	}
	c, err := hub.NewClient()
	if err != nil {
		return err
	}
	if *dir != "" {
		c.Dir = *dir
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bar := &pullBar{w: stderr, ref: ref}
	res, err := c.Download(ctx, ref, bar.update)
	bar.finish()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	switch {
	case res.Existed:
		fmt.Fprintf(stderr, "%s is already downloaded (%s)\n", ref, humanize.IBytes(uint64(res.Size)))
	case res.SHA256 != "":
		fmt.Fprintf(stderr, "downloaded %s (%s, sha256 checked)\n", ref, humanize.IBytes(uint64(res.Size)))
	default:
		fmt.Fprintf(stderr, "downloaded %s (%s; the hub gave no sha256 to check)\n", ref, humanize.IBytes(uint64(res.Size)))
	}
	fmt.Fprintln(stdout, res.Path)
	return nil
}

// defaultModelsDir is kvscope's models folder, for the usage text.
func defaultModelsDir() string {
	d, err := hub.ModelsDir()
	if err != nil {
		return "unknown here"
	}
	return d
}

// pullBar draws a download's progress as a terminal bar with speed and
// time left, over the bytes this run fetches (a resumed download's earlier
// bytes are said once, not counted as speed).
type pullBar struct {
	w       io.Writer
	ref     hub.Ref
	bar     *progressbar.ProgressBar
	resumed int64
	checked bool
}

func (b *pullBar) update(p hub.Progress) {
	if p.Note != "" {
		b.clear()
		fmt.Fprintln(b.w, p.Note)
	}
	switch p.Phase {
	case hub.PhaseChecking:
		if !b.checked {
			b.checked = true
			fmt.Fprintln(b.w, "checking the part downloaded before…")
		}
	case hub.PhaseDownloading, hub.PhaseDone:
		if p.Total <= 0 {
			return
		}
		if b.bar == nil || p.Resumed != b.resumed {
			b.clear()
			b.resumed = p.Resumed
			if p.Resumed > 0 {
				fmt.Fprintf(b.w, "resuming at %s of %s\n", humanize.IBytes(uint64(p.Resumed)), humanize.IBytes(uint64(p.Total)))
			}
			b.bar = progressbar.NewOptions64(p.Total-p.Resumed,
				progressbar.OptionSetWriter(b.w),
				progressbar.OptionSetDescription(b.ref.File),
				progressbar.OptionShowBytes(true),
				progressbar.OptionUseIECUnits(true),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }),
			)
		}
		b.bar.Set64(p.Done - p.Resumed)
	}
}

func (b *pullBar) clear() {
	if b.bar != nil {
		b.bar.Clear()
	}
}

// finish ends the bar's line if the download stopped before the end.
func (b *pullBar) finish() {
	if b.bar != nil && !b.bar.IsFinished() {
		b.bar.Exit()
		fmt.Fprintln(b.w)
	}
}
