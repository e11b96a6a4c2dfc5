package main

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"unsafe"

	"github.com/stemdot/stemdot/cmd/internal/cli"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/safetext"
)

// stemdot_go_cli_main runs the command line argv[1:argc] with backend's callback
// (stemdot_cli_main of include/stemdot.h), or on this machine with backend NULL; it
// returns the exit status.
//
//export stemdot_go_cli_main
func stemdot_go_cli_main(argc C.int, argv **C.char, backend *C.stemdot_cli_backend) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "stemdot_cli_main: %s\n", safetext.String(panicError(r).Error()))
			rc = 1
		}
	}()
	var args []string
	if argc > 1 && argv != nil {
		for _, a := range unsafe.Slice(argv, int(argc))[1:] {
			args = append(args, C.GoString(a))
		}
	}
	if backend == nil {
		return C.int(cli.Run(cli.Front{Name: "stemdot", Use: "stemdot", Backend: cli.Local()}, args))
	}
	if backend.call == nil || backend.name == nil || backend.use == nil || backend.n_flags > 0 && backend.flags == nil {
		fmt.Fprintln(os.Stderr, "stemdot_cli_main: the backend's name, use and call must be set (and flags, with n_flags)")
		return 1
	}
	if _, err := sizeProduct("n_flags", int(unsafe.Sizeof(*backend.flags)), 0, backend.n_flags); err != nil {
		fmt.Fprintf(os.Stderr, "stemdot_cli_main: %v\n", err)
		return 1
	}
	remote := &cli.Remote{Call: func(op string, request any, masks []byte, shifts []float64, out []byte) ([]byte, error) {
		return callCLI(backend, op, request, masks, shifts, out)
	}}
	if backend.n_flags > 0 {
		for _, f := range unsafe.Slice(backend.flags, int(backend.n_flags)) {
			remote.Extra = append(remote.Extra, cli.RemoteFlag{Name: C.GoString(f.name), Default: C.GoString(f.default_value),
				Usage: C.GoString(f.usage), Repeatable: f.repeatable != 0})
		}
	}
	return C.int(cli.Run(cli.Front{Name: C.GoString(backend.name), Use: C.GoString(backend.use), Backend: remote}, args))
}

// callCLI calls backend's callback with op and request (as JSON) and returns its reply,
// or the error it replied, of the kind of its status.
func callCLI(backend *C.stemdot_cli_backend, op string, request any, masks []byte, shifts []float64, out []byte) ([]byte, error) {
	text, err := json.Marshal(request)
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err)
	}
	cop, creq := C.CString(op), C.CString(string(text))
	defer C.free(unsafe.Pointer(cop))
	defer C.free(unsafe.Pointer(creq))
	var m, o unsafe.Pointer
	var s *C.double
	if len(masks) > 0 {
		m = unsafe.Pointer(&masks[0])
	}
	if len(shifts) > 0 {
		s = (*C.double)(unsafe.Pointer(&shifts[0]))
	}
	if len(out) > 0 {
		o = unsafe.Pointer(&out[0])
	}
	reply := C.stemdot_capi_call_cli(backend, cop, creq, m, C.size_t(len(masks)), s, C.size_t(len(shifts)), o, C.size_t(len(out)))
	if reply == nil {
		return nil, errs.New(errs.Internal, "the backend's callback returned no reply to %s", op)
	}
	b := []byte(C.GoString(reply))
	var failed struct {
		Error  *string `json:"error"`
		Status status  `json:"status"`
	}
	if json.Unmarshal(b, &failed) == nil && failed.Error != nil {
		return nil, errs.New(statusKind(failed.Status), "%s", *failed.Error)
	}
	return b, nil
}

// statusKind is the error kind of a status code (kindStatus reversed; errs.Internal for
// an unknown one).
func statusKind(st status) errs.Kind {
	for kind, s := range kindStatus {
		if s == st {
			return kind
		}
	}
	return errs.Internal
}
