package formats_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
)

// Every format's Describe reads alike in Open's "supported:" list: its name, then what it
// is and, after a colon, how a file is known, naming each of its extensions.
func TestDescribe(t *testing.T) {
	for _, f := range dataset.Formats() {
		assert.Regexp(t, `^`+regexp.QuoteMeta(f.Name)+` \([^:]+: .+\)$`, f.Describe, f.Name)
		for _, ext := range f.Extensions {
			assert.Contains(t, f.Describe, ext, f.Name)
		}
	}
}

// The README's format table has a row for every registered format, its extensions
// column names the format's extensions, and its options column the flag of every option
// the format reads beyond the common ones.
func TestREADMETable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(b), "\n| format | extensions | what is read from metadata | options |\n")
	require.True(t, ok, "README has no format table")
	table, _, _ = strings.Cut(table, "\n\n")
	rows, exts := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		if m := regexp.MustCompile("^\\| `([a-z0-9_]+)`").FindStringSubmatch(line); m != nil {
			cells := strings.Split(line, " | ")
			rows[m[1]], exts[m[1]] = cells[len(cells)-1], cells[1]
		}
	}
	flag := func(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }
	for _, f := range dataset.Formats() {
		options, ok := rows[f.Name]
		if !assert.True(t, ok, "README has no row for format %s", f.Name) {
			continue
		}
		for _, ext := range f.Extensions {
			assert.Contains(t, exts[f.Name], "`"+ext+"`", f.Name)
		}
		for _, key := range f.Options {
			assert.Contains(t, options, flag(key), f.Name)
		}
		for _, o := range f.FormatOptions {
			assert.Contains(t, options, flag(o.Key), f.Name)
		}
	}
	assert.Len(t, rows, len(dataset.Formats()), "README rows %v", rows)
}
