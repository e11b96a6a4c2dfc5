package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// browserCommand reads $BROWSER as Python's webbrowser and xdg-utils do: commands
// separated by colons, the first one found; a command with arguments; %s for the URL.
func TestBrowserCommand(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"firefox", "my browser"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755))
	}
	t.Setenv("PATH", dir)
	ff, spaced := filepath.Join(dir, "firefox"), filepath.Join(dir, "my browser")
	const url = "http://127.0.0.1:8080/token/"
	for _, c := range []struct {
		env  string
		want []string
	}{
		{"firefox", []string{ff, url}},
		{ff, []string{ff, url}},
		{"firefox --new-window", []string{ff, "--new-window", url}},
		{"firefox --new-tab %s --private", []string{ff, "--new-tab", url, "--private"}},
		{"absent-browser:firefox", []string{ff, url}},
		{":firefox %s:", []string{ff, url}},
		{spaced, []string{spaced, url}}, // a path with a blank, as it is
	} {
		got, err := browserCommand(c.env, url)
		require.NoError(t, err, "BROWSER=%q", c.env)
		require.Equal(t, c.want, got, "BROWSER=%q", c.env)
	}
	_, err := browserCommand("absent-browser:other-absent --x", url)
	require.ErrorContains(t, err, "other-absent")
}
