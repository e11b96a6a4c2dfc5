//go:build race

package testfiles

// Race is true in binaries built with the race detector (go test -race).
const Race = true
