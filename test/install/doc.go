// Package install holds the packaging test: it builds `make dist`'s tarball
// and .deb, installs them where no source tree is, and runs the installed
// kvscope from there (its version, a greedy run on the native CPU library
// it finds beside itself, and its window under Xvfb).
package install
