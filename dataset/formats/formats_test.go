package formats_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

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
