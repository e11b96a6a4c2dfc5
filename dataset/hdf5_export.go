//go:build !nohdf5

package dataset

// The Go functions that libhdf5 calls back (through the C functions of hdf5_storage.go).
// A file with //export may declare C functions but not define them, hence this file.

import "C"

import (
	"fmt"

	"github.com/stemdot/stemdot/errs"
)

// sdCheckExternalLink checks the target file child of an external link in group of the
// file parent (as it was opened), before libhdf5 opens it: it must be found where
// libhdf5 looks for it (h5FindFile) and be a regular file. It returns 0 to let libhdf5
// go on, else -1 with the reason in h5SideErr. Called with h5lock held.
//
//export sdCheckExternalLink
func sdCheckExternalLink(parent, group, child, object *C.char) C.int {
	file := C.GoString(child)
	link := fmt.Sprintf("external link in group %s of %s to %s:%s", h5Name(C.GoString(group)), C.GoString(parent), file, h5Name(C.GoString(object)))
	path, missing, err := h5FindFile(file, C.GoString(parent), h5ExtLinkPrefix)
	switch {
	case err != nil:
		h5SideErr = fmt.Errorf("%s: %w", link, err)
	case path == "":
		h5SideErr = errs.New(errs.IO, "%s: file %s %s", link, file, missing)
	default:
		return 0
	}
	return -1
}
