//go:build !nohdf5

package testfiles

// GoTags are the build flags that a go command run by a test (go build, go run) needs
// to build what the test binary was built as: none here; -tags nohdf5 in a build
// without libhdf5.
var GoTags []string
