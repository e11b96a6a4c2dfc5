package blo

import (
	"testing"

	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// FuzzBLOHeader parses fuzzed block file headers: no panic.
func FuzzBLOHeader(f *testing.F) {
	frametest.SeedFiles(f, bloHeaderBytes, "blo/test1.blo")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseBLOHeader(b)
	})
}
