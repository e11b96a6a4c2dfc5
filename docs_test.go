package stemdot_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README stays a first page (what, install, a session, links: #35 item 5); the rest is
// in doc/.
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.LessOrEqual(t, strings.Count(string(b), "\n"), 160, "README.md has at most 160 lines: move the detail to a page of doc/")
}

// mdLink matches a Markdown link or image, [text](target) or ![alt](target), capturing the
// target up to a space (a title) or the closing parenthesis.
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)[^)]*\)`)

// Every relative link of README.md and doc/*.md, outside code, names a file that exists
// (its #fragment aside), and every #fragment of a link to a Markdown file is a heading there.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob("doc/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, page := range append([]string{"README.md"}, pages...) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue // http:, https:, mailto:
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				_, err := os.Stat(path)
				require.NoError(t, err, "%s links to %s, which does not exist", page, target)
			}
			if frag != "" && strings.HasSuffix(path, ".md") {
				require.Contains(t, anchors(t, path), frag, "%s links to %s: no such heading in %s", page, target, path)
			}
		}
	}
}

// stripCode removes fenced code blocks and inline code spans from Markdown text.
func stripCode(s string) string {
	s = regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(s, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(s, "")
}

// anchors returns the anchors GitHub gives the headings of a Markdown file: lower case,
// punctuation but hyphens and underscores dropped, spaces as hyphens.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, h := range regexp.MustCompile(`(?m)^#+ (.*)$`).FindAllStringSubmatch(stripCode(string(b)), -1) {
		a := regexp.MustCompile(`[^\p{L}\p{N} _-]`).ReplaceAllString(strings.ToLower(h[1]), "")
		out = append(out, strings.ReplaceAll(a, " ", "-"))
	}
	return out
}

// The README's session runs as written with the installed stemdot on PATH, in an empty
// directory, and writes the files it names (`stemdot view`, which starts a server, left out).
func TestREADMESession(t *testing.T) {
	src := docBlock(t, "README.md", "## A first session", "sh")
	prefix, _ := installStemdot(t)
	var script []string
	var outputs []string
	for _, line := range strings.Split(strings.ReplaceAll(src, "\\\n", ""), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmd = strings.TrimSpace(cmd)
		if cmd == "" {
			continue
		}
		require.True(t, strings.HasPrefix(cmd, "stemdot "), "the session runs stemdot only: %q", line)
		if strings.HasPrefix(cmd, "stemdot view ") {
			continue
		}
		script = append(script, cmd)
		f := strings.Fields(cmd)
		for i, a := range f[:len(f)-1] {
			switch a {
			case "--out", "--com-shifts", "--icom":
				outputs = append(outputs, f[i+1])
			case "--png":
				outputs = append(outputs, f[i+1]+"_*.png")
			}
		}
	}
	require.GreaterOrEqual(t, len(script), 4, "the session: synth, info, apply, ...")
	require.LessOrEqual(t, strings.Count(src, "\n"), 10, "the session is at most ten lines")

	dir := t.TempDir()
	sh := exec.Command("sh", "-e", "-x", "-c", strings.Join(script, "\n"))
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PATH="+filepath.Join(prefix, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := sh.CombinedOutput()
	require.NoError(t, err, "the README's session:\n%s", b)
	require.Contains(t, outputs, "vd.npy")
	for _, o := range outputs {
		m, err := filepath.Glob(filepath.Join(dir, o))
		require.NoError(t, err)
		require.NotEmpty(t, m, "the session writes %s:\n%s", o, b)
		for _, f := range m {
			st, err := os.Stat(f)
			require.NoError(t, err)
			require.Positive(t, st.Size(), f)
		}
	}
	require.FileExists(t, filepath.Join(dir, "vd.json"), "apply writes the sidecar")
	shape, _ := readNPY(t, filepath.Join(dir, "vd.npy"))
	require.Equal(t, []int{32, 32, 5}, shape, "the README's shape of vd.npy")
}
