package cli

import (
	"os"
	"os/exec"
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

// The page's command quotes a path for the shell; one with terminal control characters
// in bash's $'...', escaped (#33.6), which bash reads back as the path.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"scan.mib":            "scan.mib",
		"my scan's.mib":       `'my scan'\''s.mib'`,
		"scan\x1b[31m\\'.mib": `$'scan\x1b[31m\\\'.mib'`,
		"c1\u009b\xff.mib":    `$'c1\u009b\xff.mib'`,
	} {
		require.Equal(t, want, shellQuote(in), "%q", in)
		if bash, err := exec.LookPath("bash"); err == nil {
			out, err := exec.Command(bash, "-c", "printf %s "+shellQuote(in)).Output()
			require.NoError(t, err)
			require.Equal(t, in, string(out), "bash reads %s back", shellQuote(in))
		}
	}
}
