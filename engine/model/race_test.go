//go:build race

package model

// raceEnabled: the race detector makes sync.Pool drop objects at random, so
// allocation counts mean nothing under it.
const raceEnabled = true
