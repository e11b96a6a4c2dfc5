package safetext

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"plain text, é ü — ∑ 日本\n\t": "plain text, é ü — ∑ 日本\n\t",
		"a\x1b[31mred\x1b[0m":        `a\x1b[31mred\x1b[0m`,
		"title\x1b]0;pwned\x07":      `title\x1b]0;pwned\x07`,
		"over\rwrite\x00\x7f":        `over\x0dwrite\x00\x7f`,
		"c1 \u009b31m \u0085":        `c1 \u009b31m \u0085`,
		"lone \x9b byte \xff":        `lone \x9b byte \xff`,
		"u+00a0\u00a0 stays":         "u+00a0\u00a0 stays",
		`already \x1b escaped`:       `already \x1b escaped`,
	} {
		assert.Equal(t, want, String(in), "String(%q)", in)
		assert.Equal(t, String(in), String(String(in)), "escaping twice of %q", in)
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	n, err := Writer{&b}.Write([]byte("stemdot: file \x1b[2J.mib: not found\n"))
	assert.NoError(t, err)
	assert.Equal(t, len("stemdot: file \x1b[2J.mib: not found\n"), n)
	assert.Equal(t, "stemdot: file \\x1b[2J.mib: not found\n", b.String())
	assert.NoError(t, Writer{&b}.Sync())
}
