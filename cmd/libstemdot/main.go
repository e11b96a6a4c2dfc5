// Command libstemdot is, stemdot's C ABI, built as a shared library:
//
//	go build -buildmode=c-shared -o build/libstemdot.so ./cmd/libstemdot
//
// The public, hand-kept header is include/stemdot.h; it documents every function, the
// ownership of memory and handles, and thread safety. The Go package is layered:
// core.go holds the ABI's logic on Go types (handle registry, option parsing, error
// codes, apply with cancellation and progress relay) and is tested by core_test.go;
// exports.go is the thin cgo layer that converts C arguments, recovers panics and sets
// the thread-local last error, exporting each function as a hidden stemdot_go_<name>;
// abi.c defines the public stemdot_<name> around it (refusing calls in a forked child,
// where the Go runtime cannot run); shim.c holds the other parts written in C
// (thread-local error storage, version, status names, the progress-callback
// trampoline, the fork detection).
//
// The Python package in python/ binds this library with ctypes, and
// cmd/libstemdot/examples/apply.c shows its use from C.
package main

import _ "github.com/stemdot/stemdot/dataset/formats" // every format (the stemdot package imports it too)

// main is required by -buildmode=c-shared and never runs.
func main() {}
