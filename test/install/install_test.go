package install

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"kvscope/engine/backend/native"
	"kvscope/internal/testshared"
)

// screenshotEnv names a file the window test copies its screenshot to.
const screenshotEnv = "KVSCOPE_INSTALL_SCREENSHOT"

// details is FyneApp.toml's [Details].
type details struct {
	ID, Version string
	Build       int
}

// fixture is what every part of the test shares: the packages make dist
// wrote and the data to run them on.
type fixture struct {
	root, tarball, deb string
	app                details
	model              string
	greedy             testshared.GreedyCase
}

// TestPackages builds the tarball and the .deb with make dist, then
// installs each (and make install's copy) where no source tree is and runs
// the installed kvscope.
func TestPackages(t *testing.T) {
	for _, tool := range []string{"make", "tar", "xz", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (make test installs the packages it needs: apt-get install make tar xz-utils dpkg)", tool)
		}
	}
	f := fixture{root: moduleRoot(t)}
	f.model = abs(t, testshared.Path(t, "models/stories260K.gguf"))
	f.greedy = testshared.Greedy(t, testshared.Path(t, "reference/stories260K-greedy.txt"))[0]
	var meta struct{ Details details }
	if _, err := toml.DecodeFile(filepath.Join(f.root, "FyneApp.toml"), &meta); err != nil {
		t.Fatal(err)
	}
	f.app = meta.Details
	fyneApp, err := os.ReadFile(filepath.Join(f.root, "FyneApp.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	t0 := time.Now()
	mk := exec.Command("make", "-C", f.root, "dist", "DIST="+dist)
	mk.Env = withoutVars(os.Environ(), native.EnvDir, "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	t.Logf("make dist took %s", time.Since(t0).Round(time.Second))
	// fyne package adds one to the build number of the FyneApp.toml it
	// reads: make dist gives it a copy.
	if after, err := os.ReadFile(filepath.Join(f.root, "FyneApp.toml")); err != nil || !bytes.Equal(after, fyneApp) {
		t.Errorf("make dist changed FyneApp.toml (%v):\n%s", err, after)
	}
	f.tarball = filepath.Join(dist, "kvscope-"+f.app.Version+"-linux-"+runtime.GOARCH+".tar.xz")
	f.deb = filepath.Join(dist, "kvscope_"+f.app.Version+"_"+runtime.GOARCH+".deb")
	t.Run("tarball", f.testTarball)
	t.Run("deb", f.testDeb)
	t.Run("make install", f.testMakeInstall)
}

// testMakeInstall installs with the top-level make install into a prefix,
// runs kvscope from there, and removes it with make uninstall.
func (f fixture) testMakeInstall(t *testing.T) {
	tmp := t.TempDir()
	prefix, home, work := mkdir(t, tmp, "prefix"), mkdir(t, tmp, "home"), mkdir(t, tmp, "work")
	env := withoutVars(os.Environ(), native.EnvDir, "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	output(t, "", env, "make", "-C", f.root, "install", "PREFIX="+prefix, "DIST="+filepath.Join(tmp, "dist"))
	installed := []string{"bin/kvscope", "lib/kvscope/" + native.LibName(), "share/applications/" + f.app.ID + ".desktop",
		"share/icons/hicolor/256x256/apps/" + f.app.ID + ".png"}
	for _, p := range installed {
		if _, err := os.Stat(filepath.Join(prefix, p)); err != nil {
			t.Errorf("make install: %v", err)
		}
	}
	bin := filepath.Join(prefix, "bin", "kvscope")
	f.checkVersion(t, bin, work, cleanEnv(home), filepath.Join(prefix, "lib", "kvscope", native.LibName()))
	entry, err := os.ReadFile(filepath.Join(prefix, installed[2]))
	if err != nil {
		t.Fatal(err)
	}
	if l := lineOf(string(entry), "Exec="); l != "Exec="+bin {
		t.Errorf("the desktop entry's %q does not run %s", l, bin)
	}
	output(t, "", env, "make", "-C", f.root, "uninstall", "PREFIX="+prefix)
	for _, p := range append(installed, "lib/kvscope") {
		if _, err := os.Lstat(filepath.Join(prefix, p)); err == nil {
			t.Errorf("make uninstall left %s", p)
		}
	}
}

// testTarball unpacks the tarball, installs it into a prefix with its own
// Makefile, runs kvscope from there, opens its window from the desktop
// entry, and uninstalls it.
func (f fixture) testTarball(t *testing.T) {
	list := strings.Fields(output(t, "", nil, "tar", "-tJf", f.tarball))
	usr := "kvscope/usr/local/"
	if !slices.Contains(list, usr+"bin/kvscope") {
		usr = "kvscope/usr/"
	}
	for _, want := range []string{"kvscope/Makefile", usr + "bin/kvscope", usr + "lib/kvscope/" + native.LibName(),
		usr + "share/applications/" + f.app.ID + ".desktop", usr + "share/pixmaps/" + f.app.ID + ".png"} {
		if !slices.Contains(list, want) {
			t.Errorf("the tarball lacks %s; it holds %q", want, list)
		}
	}
	tmp := t.TempDir()
	unpack, prefix, home, work := mkdir(t, tmp, "unpack"), mkdir(t, tmp, "prefix"), mkdir(t, tmp, "home"), mkdir(t, tmp, "work")
	output(t, "", nil, "tar", "-xJf", f.tarball, "-C", unpack)
	output(t, "", withoutVars(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL"), "make", "-C", filepath.Join(unpack, "kvscope"), "install", "PREFIX="+prefix)
	installed := []string{"bin/kvscope", "lib/kvscope/" + native.LibName(), "share/applications/" + f.app.ID + ".desktop", "share/pixmaps/" + f.app.ID + ".png"}
	for _, p := range installed {
		if _, err := os.Stat(filepath.Join(prefix, p)); err != nil {
			t.Errorf("make install: %v", err)
		}
	}
	bin := filepath.Join(prefix, "bin", "kvscope")
	lib := filepath.Join(prefix, "lib", "kvscope", native.LibName())
	env := cleanEnv(home)
	version := f.checkVersion(t, bin, work, env, lib)

	// Through a symbolic link the library is still found: links are resolved.
	link := filepath.Join(tmp, "links", "kvscope")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	f.checkVersion(t, link, work, env, lib)

	// llama.cpp's greedy text, on the installed native library (run's
	// backend line names the library's file and where it was found;
	// version, above, its path).
	stdout, stderr := run(t, work, env, bin, "run", "-m", f.model, "-p", f.greedy.Prompt, "-n", "20", "--temp", "0")
	gen := strings.TrimPrefix(strings.TrimSuffix(stdout, "\n"), f.greedy.Prompt)
	if !strings.HasPrefix(stdout, f.greedy.Prompt) || len(gen) < 40 || !strings.HasPrefix(f.greedy.Output, gen) {
		t.Errorf("kvscope run printed %q\nwant the prompt, then a 20-token prefix of llama.cpp's %q", stdout, f.greedy.Output)
	}
	if cpu := lineOf(version, "  cpu "); strings.Contains(cpu, "runs only its scalar path") {
		t.Logf("the native CPU backend does not run on this CPU (%s), so run used %q", cpu, stderr)
	} else if !strings.Contains(stderr, "backend cpu (") || !strings.Contains(stderr, filepath.Base(lib)+", found in the executable's ../lib/kvscope") {
		t.Errorf("kvscope run did not run on the installed library %s: %q", lib, stderr)
	}

	// Under Debian's default locale in containers the toolkit is quiet
	// (internal/early), headless and in the window alike.
	cLocale := append(withoutVars(env, "LANG", "LC_ALL", "LC_MESSAGES", "LANGUAGE"), "LANG=C.UTF-8")
	if _, stderr := run(t, work, cLocale, bin, "run", "-m", f.model, "-p", f.greedy.Prompt, "-n", "4", "--temp", "0"); strings.Contains(stderr, "Fyne error") || strings.Contains(stderr, "locale") {
		t.Errorf("LANG=C.UTF-8 kvscope run printed toolkit noise:\n%s", stderr)
	}

	t.Run("window", func(t *testing.T) { f.testWindow(t, prefix, home, work) })

	output(t, "", withoutVars(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL"), "make", "-C", filepath.Join(unpack, "kvscope"), "uninstall", "PREFIX="+prefix)
	for _, p := range append(installed, "lib/kvscope") {
		if _, err := os.Lstat(filepath.Join(prefix, p)); err == nil {
			t.Errorf("make uninstall left %s", p)
		}
	}
}

// testDeb checks the .deb's control fields and files, that the libraries
// the binary needs are among its dependencies, and runs kvscope from the
// unpacked package and from a dpkg install into a directory.
func (f fixture) testDeb(t *testing.T) {
	info := output(t, "", nil, "dpkg-deb", "--info", f.deb)
	for _, want := range []string{"Package: kvscope\n", "Version: " + f.app.Version + "\n", "Architecture: " + runtime.GOARCH + "\n", "Depends: "} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb --info has no %q:\n%s", want, info)
		}
	}
	var depends []string // the package names, without versions or alternatives
	for _, d := range strings.Split(strings.TrimPrefix(lineOf(info, " Depends: "), " Depends: "), ",") {
		if name := strings.Fields(d); len(name) > 0 {
			depends = append(depends, name[0])
		}
	}
	if len(depends) == 0 {
		t.Fatalf("dpkg-deb --info lists no dependencies:\n%s", info)
	}
	contents := output(t, "", nil, "dpkg-deb", "--contents", f.deb)
	for _, want := range []string{"./usr/bin/kvscope", "./usr/lib/kvscope/" + native.LibName(),
		"./usr/share/applications/" + f.app.ID + ".desktop", "./usr/share/icons/hicolor/256x256/apps/" + f.app.ID + ".png"} {
		if !regexp.MustCompile(`(?m) ` + regexp.QuoteMeta(want) + `$`).MatchString(contents) {
			t.Errorf("dpkg-deb --contents does not list %s:\n%s", want, contents)
		}
	}
	tmp := t.TempDir()
	x, home, work := mkdir(t, tmp, "x"), mkdir(t, tmp, "home"), mkdir(t, tmp, "work")
	output(t, "", nil, "dpkg-deb", "-x", f.deb, x)
	f.checkVersion(t, filepath.Join(x, "usr/bin/kvscope"), work, cleanEnv(home), filepath.Join(x, "usr/lib/kvscope", native.LibName()))
	checkDepends(t, filepath.Join(x, "usr/bin/kvscope"), depends)

	// dpkg itself, into an empty root of its own (its dependencies are not
	// there, hence --force-depends).
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Logf("dpkg is not installed: no install with dpkg --root")
		return
	}
	root := filepath.Join(tmp, "root")
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"status", "available"} {
		if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dpkg := []string{"--root=" + root, "--force-depends", "--force-not-root"}
	output(t, "", nil, "dpkg", append(dpkg, "-i", f.deb)...)
	f.checkVersion(t, filepath.Join(root, "usr/bin/kvscope"), work, cleanEnv(home), filepath.Join(root, "usr/lib/kvscope", native.LibName()))
	if l := output(t, "", nil, "dpkg", append(dpkg, "-L", "kvscope")...); !strings.Contains(l, "/usr/lib/kvscope/"+native.LibName()) {
		t.Errorf("dpkg -L kvscope does not list the library:\n%s", l)
	}
	output(t, "", nil, "dpkg", append(dpkg, "-r", "kvscope")...)
	if _, err := os.Stat(filepath.Join(root, "usr/bin/kvscope")); err == nil {
		t.Errorf("dpkg -r kvscope left /usr/bin/kvscope")
	}
}

// checkVersion runs bin version in dir and checks that it names the
// version and build from FyneApp.toml and the native library lib, found
// beside the executable's ../lib/kvscope, never in a source tree. It
// returns the output.
func (f fixture) checkVersion(t *testing.T, bin, dir string, env []string, lib string) string {
	t.Helper()
	out, _ := run(t, dir, env, bin, "version")
	if want := fmt.Sprintf("kvscope %s (build %d, %s)\n", f.app.Version, f.app.Build, f.app.ID); !strings.HasPrefix(out, want) {
		t.Errorf("%s version: output does not start with %q:\n%s", bin, want, out)
	}
	if want := fmt.Sprintf("\nnative:    ABI %d, %s, found in the executable's ../lib/kvscope\n", native.ABIVersion, lib); !strings.Contains(out, want) {
		t.Errorf("%s version: no %q in\n%s", bin, want, out)
	}
	if strings.Contains(out, "native/build") {
		t.Errorf("%s version looked in a source tree:\n%s", bin, out)
	}
	return out
}

// checkDepends checks that each library the binary links, and each X11
// library whose name it holds (GLFW opens those at run time), belongs to a
// package of depends, where dpkg knows the library's package here.
func checkDepends(t *testing.T, bin string, depends []string) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Logf("dpkg is not installed: the dependencies are not checked against the binary's libraries")
		return
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := ef.ImportedLibraries()
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`libX[A-Za-z0-9-]*\.so\.[0-9]+`).FindAll(data, -1) {
		if !slices.Contains(libs, string(m)) {
			libs = append(libs, string(m))
		}
	}
	if !slices.Contains(libs, "libGL.so.1") || !slices.Contains(libs, "libXrandr.so.2") {
		t.Errorf("found only %q in the binary: want libGL.so.1 linked and libXrandr.so.2 named at least", libs)
	}
	for _, l := range libs {
		out, err := exec.Command("dpkg", "-S", "*/"+l).Output()
		if err != nil {
			t.Logf("%s is not installed here: its package is not checked", l)
			continue
		}
		var pkgs []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			p, _, _ := strings.Cut(line, ":")
			pkgs = append(pkgs, p)
		}
		if !slices.ContainsFunc(pkgs, func(p string) bool { return slices.Contains(depends, p) }) {
			t.Errorf("%s comes from %q, none of which the .deb depends on (%q)", l, pkgs, depends)
		}
	}
}

// testWindow starts the installed app from its desktop entry's Exec line
// on an Xvfb display and waits for its window; with ImageMagick's import,
// it takes a screenshot and checks that the window is painted.
func (f fixture) testWindow(t *testing.T, prefix, home, work string) {
	for _, tool := range []string{"Xvfb", "xwininfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (make test installs xvfb and x11-utils)", tool)
		}
	}
	entry, err := os.ReadFile(filepath.Join(prefix, "share/applications", f.app.ID+".desktop"))
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, a := range strings.Fields(strings.TrimPrefix(lineOf(string(entry), "Exec="), "Exec=")) {
		if !strings.HasPrefix(a, "%") { // field codes such as %F
			argv = append(argv, a)
		}
	}
	if len(argv) == 0 {
		t.Fatalf("the desktop entry has no Exec line:\n%s", entry)
	}
	path := filepath.Join(prefix, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	exe := lookPath(argv[0], path)
	if want := filepath.Join(prefix, "bin", "kvscope"); exe != want {
		t.Fatalf("the desktop entry's Exec=%s runs %q, want %s", argv[0], exe, want)
	}
	display := startXvfb(t)
	app := exec.Command(exe, argv[1:]...)
	app.Dir = work
	app.Env = append(cleanEnv(home), "DISPLAY="+display, "PATH="+path)
	var appErr bytes.Buffer
	app.Stdout, app.Stderr = &appErr, &appErr
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- app.Wait() }()
	t.Cleanup(func() {
		app.Process.Kill()
		<-exited
	})
	// The window is kvscope's, of a usable size and mapped (it is created
	// unmapped).
	win := regexp.MustCompile(`(0x[0-9a-f]+) "kvscope": .* (\d+)x(\d+)\+`)
	var id string
	waitFor(t, exited, &appErr, "the kvscope window to be shown", func() bool {
		out, _ := exec.Command("xwininfo", "-display", display, "-root", "-tree").Output()
		for _, m := range win.FindAllStringSubmatch(string(out), -1) {
			w, _ := strconv.Atoi(m[2])
			h, _ := strconv.Atoi(m[3])
			info, _ := exec.Command("xwininfo", "-display", display, "-id", m[1]).Output()
			if w >= 400 && h >= 300 && strings.Contains(string(info), "Map State: IsViewable") {
				id = m[1]
				return true
			}
		}
		return false
	})
	if _, err := exec.LookPath("import"); err != nil {
		t.Logf("ImageMagick's import is not installed: no screenshot (the window %s is open)", id)
		return
	}
	shot := filepath.Join(t.TempDir(), "window.png")
	waitFor(t, exited, &appErr, "the window to be painted", func() bool {
		if err := exec.Command("import", "-display", display, "-window", "root", shot).Run(); err != nil {
			return false
		}
		return colours(shot) >= 16 // a painted window, not a blank screen
	})
	if dst := os.Getenv(screenshotEnv); dst != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			t.Errorf("saving the screenshot as %s: %v", dst, err)
		}
		t.Logf("screenshot of the installed window: %s", dst)
	}
}

// startXvfb starts an X server on a free display, which it reports once it
// is ready, and returns the display's name.
func startXvfb(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1280x800x24", "-nolisten", "tcp")
	x.ExtraFiles = []*os.File{w}
	var xErr bytes.Buffer
	x.Stderr = &xErr
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		x.Process.Kill()
		x.Wait()
	})
	line, err := bufio.NewReader(r).ReadString('\n') // EOF if Xvfb dies first
	n, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		t.Fatalf("Xvfb reported no display (%v): %s", err, xErr.String())
	}
	return ":" + strconv.Itoa(n)
}

// waitFor checks cond until it holds, failing the test when the app exits
// first or after a minute.
func waitFor(t *testing.T, exited chan error, appOut *bytes.Buffer, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case err := <-exited:
			exited <- err // for the cleanup's wait
			t.Fatalf("kvscope exited (%v) before %s:\n%s", err, what, appOut)
		case <-deadline:
			t.Fatalf("no %s after a minute:\n%s", what, appOut)
		case <-tick.C:
		}
	}
}

// colours counts the distinct colours of a PNG, up to 1000.
func colours(file string) int {
	fd, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer fd.Close()
	img, err := png.Decode(fd)
	if err != nil {
		return 0
	}
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y && len(seen) < 1000; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			seen[rgba(img, x, y)] = true
		}
	}
	return len(seen)
}

func rgba(img image.Image, x, y int) [4]uint32 {
	r, g, b, a := img.At(x, y).RGBA()
	return [4]uint32{r, g, b, a}
}

// lookPath finds name in the directories of path, as a launcher resolves
// a desktop entry's Exec.
func lookPath(name, path string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range filepath.SplitList(path) {
		f := filepath.Join(d, name)
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
}

// run runs name in dir with env, failing the test when it fails, and
// returns its stdout and stderr.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// output is run's stdout and stderr together.
func output(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	o, e := run(t, dir, env, name, args...)
	return o + e
}

// cleanEnv is the environment without the variables that would point the
// installed kvscope at a library or backend, with HOME (where the app keeps
// its settings) in home.
func cleanEnv(home string) []string {
	env := withoutVars(os.Environ(), native.EnvDir, native.BackendEnv, "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "DISPLAY", "WAYLAND_DISPLAY")
	return append(env, "HOME="+home)
}

// withoutVars is env without the variables named.
func withoutVars(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(names, k) {
			out = append(out, kv)
		}
	}
	return out
}

// lineOf returns the first line of s starting with prefix, or "".
func lineOf(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// mkdir makes the directory name in tmp and returns its path.
func mkdir(t *testing.T, tmp, name string) string {
	t.Helper()
	d := filepath.Join(tmp, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// moduleRoot is the repository's root, two levels up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root := abs(t, filepath.Join("..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no repository root at %s: %v", root, err)
	}
	return root
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
