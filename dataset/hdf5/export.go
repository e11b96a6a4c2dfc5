//go:build !nohdf5

package hdf5

// The Go functions that libhdf5 calls back (through the C functions of storage.go).
// A file with //export may declare C functions but not define them, hence this file.

import "C"

import (
	"fmt"

	"github.com/stemdot/stemdot/errs"
)

// sdCheckExternalLink checks the target file child of an external link in group of the
// file parent (as it was opened), before libhdf5 opens it: it must be found where
// libhdf5 looks for it (h5FindFile) and be a regular file. It returns 0 to let libhdf5
// go on, else -1 with the reason in h5SideErr (an *h5LinkError). Called with h5lock held.
//
//export sdCheckExternalLink
func sdCheckExternalLink(parent, group, child, object *C.char) C.int {
	file := C.GoString(child)
	target := file + ":" + C.GoString(object)
	link := fmt.Sprintf("external link in group %s of %s to %s:%s", h5Name(C.GoString(group)), C.GoString(parent), h5Name(file), h5Name(C.GoString(object)))
	path, missing, err := h5FindFile(file, C.GoString(parent), h5ExtLinkPrefix)
	switch {
	case err != nil:
		h5SideErr = &h5LinkError{link, target, err}
	case path == "":
		h5SideErr = &h5LinkError{link, target, errs.New(errs.IO, "file %s %s", h5Name(file), missing)}
	default:
		return 0
	}
	return -1
}

// h5LinkError is the failed check of the target file of an external link: link
// describes the link, target is where it points ("file:/path"), err why.
type h5LinkError struct {
	link, target string
	err          error
}

func (e *h5LinkError) Error() string { return e.link + ": " + e.err.Error() }
func (e *h5LinkError) Unwrap() error { return e.err }
