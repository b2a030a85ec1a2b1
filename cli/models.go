package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/dustin/go-humanize"

	"kvscope/hub"
)

// modelsCmd lists the GGUF files this user has (kvscope models) or the
// catalog of small chat models to download (kvscope models --catalog).
func modelsCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("models", "[--json] [--catalog]", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	catalog := fs.Bool("catalog", false, "list small chat models to download with 'kvscope pull NAME'")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *catalog {
		return printCatalog(stdout, *asJSON)
	}
	dirs := hub.DefaultDirs()
	found := hub.Scan(context.Background(), dirs)
	if *asJSON {
		return printLocalJSON(stdout, found)
	}
	if len(found) == 0 {
		fmt.Fprintln(stdout, "No GGUF files found in:")
		for _, d := range searched(dirs) {
			fmt.Fprintln(stdout, "  "+d)
		}
		fmt.Fprintln(stdout, "Run 'kvscope models --catalog' for small chat models to download with 'kvscope pull NAME'.")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tARCH\tQUANT\tSIZE\tRUNS\tFILE")
	for _, l := range found {
		arch, q, runs, why := dash(l.Arch), dash(l.Quant), "yes", ""
		switch {
		case l.Err != nil:
			runs, why = "error", l.Err.Error()
		case l.Unsupported != "":
			runs, why = "no", l.Unsupported
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Source, arch, q, humanize.IBytes(uint64(max(l.Size, 0))), runs, l.Path)
		if why != "" {
			fmt.Fprintf(tw, "\t\t\t\t\t  %s\n", firstLine(why))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nRun 'kvscope models --catalog' for small chat models to download with 'kvscope pull NAME'.")
	return nil
}

// searched lists the folders a scan of dirs looks in.
func searched(d hub.Dirs) []string {
	var out []string
	for _, p := range append([]string{d.Kvscope, d.LlamaCpp}, append(d.LMStudio, d.HFHub)...) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// localJSON is one found file in 'kvscope models --json'.
type localJSON struct {
	Path        string `json:"path"`
	Source      string `json:"source"`
	Repo        string `json:"repo,omitempty"`
	Name        string `json:"name,omitempty"`
	Arch        string `json:"arch,omitempty"`
	Quant       string `json:"quant,omitempty"`
	Size        int64  `json:"size"`
	Params      int64  `json:"params,omitempty"`
	Runnable    bool   `json:"runnable"`
	Unsupported string `json:"unsupported,omitempty"`
	Error       string `json:"error,omitempty"`
}

func printLocalJSON(w io.Writer, found []hub.Local) error {
	out := make([]localJSON, 0, len(found))
	for _, l := range found {
		j := localJSON{Path: l.Path, Source: string(l.Source), Repo: l.Repo, Name: l.Name, Arch: l.Arch, Quant: l.Quant,
			Size: l.Size, Params: l.Params, Runnable: l.Runnable(), Unsupported: l.Unsupported}
		if l.Err != nil {
			j.Error = l.Err.Error()
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// catalogJSON is one catalog entry in 'kvscope models --catalog --json'.
type catalogJSON struct {
	Name       string `json:"name"`
	Title      string `json:"title"`
	Repo       string `json:"repo"`
	File       string `json:"file"`
	Arch       string `json:"arch"`
	Quant      string `json:"quant"`
	Size       int64  `json:"size"`
	SizeApprox bool   `json:"size_approx,omitempty"`
	Runnable   bool   `json:"runnable"`
	Have       string `json:"have,omitempty"` // "downloaded" or "N of M bytes"
}

func printCatalog(w io.Writer, asJSON bool) error {
	c, err := hub.NewClient()
	if err != nil {
		return err
	}
	var rows []catalogJSON
	notYet := false
	for _, e := range hub.Catalog {
		notYet = notYet || !e.Runnable()
		r := catalogJSON{Name: e.ID, Title: e.Title, Repo: e.Ref.Repo, File: e.Ref.File, Arch: e.Arch, Quant: e.Quant,
			Size: e.Size, SizeApprox: e.SizeApprox, Runnable: e.Runnable()}
		if p, err := c.Path(e.Ref); err == nil {
			if _, err := os.Stat(p); err == nil {
				r.Have = "downloaded"
			} else if done, total, _ := c.Partial(e.Ref); done > 0 {
				r.Have = fmt.Sprintf("%s of %s", humanize.IBytes(uint64(done)), humanize.IBytes(uint64(max(total, e.Size))))
			}
		}
		rows = append(rows, r)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODEL\tARCH\tQUANT\tSIZE\tRUNS\tHAVE\tREPO FILE")
	for _, r := range rows {
		size := humanize.IBytes(uint64(r.Size))
		if r.SizeApprox {
			size = "~" + size
		}
		runs := "yes"
		if !r.Runnable {
			runs = "not yet"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s %s\n", r.Name, r.Title, r.Arch, r.Quant, size, runs, dash(r.Have), r.Repo, r.File)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDownload one with 'kvscope pull NAME' (or 'kvscope pull REPO FILE' for any GGUF file on the hub).")
	if notYet {
		fmt.Fprintln(w, "Models marked 'not yet' have an architecture kvscope does not run yet.")
	}
	return nil
}
