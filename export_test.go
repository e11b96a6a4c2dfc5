package stemdot

// GoNames rewrites the options named by key in a message as a Go caller sets them
// (goNamesOf), for the tests of package stemdot_test.
var GoNames = goNamesOf
