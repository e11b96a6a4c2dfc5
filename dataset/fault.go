package dataset

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Files that change while they are read.
//
// Raw, NPY, MIB, BLO and EMPAD files are memory-mapped (CPU workers read raw and NPY
// frames in place, GPU workers DMA from the mapping). When another program truncates a
// mapped file (an acquisition rewritten in place, a copy restarted onto the same path),
// reading a page past its new end raises SIGBUS, which kills a Go program, and the
// Python interpreter that loaded stemdot's library. stemdot turns this into an errs.IO
// error that says the file changed while being read and names it:
//
//   - Every read checks the file's size (fstat on the open file) before it touches the
//     mapping: ViewFrames, ReadFrames and MapFrames of a mapped file fail when the file
//     is smaller than when it was opened, and so does a pread that comes up short.
//   - A fault that still happens (the file shrank between the check and the read) is
//     recovered where Go code reads the mapping: ReadFrames copies under
//     debug.SetPanicOnFault, and a consumer of ViewFrames or FrameMap memory does the
//     same and passes the recovered value to MappingFault (the engine's workers do).
//     Consumers outside Go (the GPU's DMA) check the size again after their read.
//
// The same holds for the frames of FromMemory, memory the caller owns (Python's
// from_array of a numpy.memmap, C's stemdot_dataset_from_memory): a fault while reading
// them is an errs.IO error that says at which byte of the buffer its memory became
// unreadable, as when a memory-mapped file is truncated by another program.
//
// A file replaced while open (another file renamed over its path) is read as it was
// when opened: the open file keeps its data, and no frame of the new file is mixed in.
// A file rewritten in place to its size or beyond cannot be told from one that was not;
// it reads what the file holds at each read.

// region is memory that frames are read from in place, for MappingFault: the mapping of
// an opened file, or a caller's buffer (FromMemory). It holds the address, not the
// memory: a caller's buffer that is never closed stays the garbage collector's.
type region struct {
	base, n uintptr
	// fault is the error of a fault at byte off of the region.
	fault func(off uintptr) error
}

// regions are the live regions, the newest last.
var regions struct {
	sync.Mutex
	list []region
}

// register adds data to regions, with the error of a fault at byte off of it;
// unregister removes it (before it is unmapped or given back), the newest registration
// of data's address.
func register(data []byte, fault func(off uintptr) error) {
	if len(data) == 0 {
		return
	}
	regions.Lock()
	defer regions.Unlock()
	regions.list = append(regions.list, region{base: uintptr(unsafe.Pointer(unsafe.SliceData(data))), n: uintptr(len(data)), fault: fault})
}

func unregister(data []byte) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	regions.Lock()
	defer regions.Unlock()
	for i := len(regions.list) - 1; i >= 0; i-- {
		if regions.list[i].base == base {
			regions.list = append(regions.list[:i], regions.list[i+1:]...)
			return
		}
	}
}

// MappingFault returns, for a value recovered from a panic, the errs.IO error of a fault
// on the frames' memory of an open dataset (the mapping of a file that shrank while
// being read, naming it; a caller's buffer of FromMemory that became unreadable; see
// above), or nil when the value is anything else. The panic is one the Go runtime raises
// for a memory fault in a goroutine that set debug.SetPanicOnFault(true): a
// runtime.Error with an Addr method giving the faulting address.
func MappingFault(recovered any) error {
	f, ok := recovered.(interface {
		error
		Addr() uintptr
	})
	if !ok {
		return nil
	}
	addr := f.Addr()
	regions.Lock()
	var fault func(uintptr) error
	var off uintptr
	for i := len(regions.list) - 1; i >= 0 && fault == nil; i-- {
		if r := regions.list[i]; addr >= r.base && addr-r.base < r.n {
			fault, off = r.fault, addr-r.base
		}
	}
	regions.Unlock()
	if fault == nil {
		return nil
	}
	return fault(off)
}

// guardMapped runs read, which reads a region (a file's mapping, a caller's buffer), and
// returns the error MappingFault gives for a fault on it; another panic goes on.
func guardMapped(read func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			if err = MappingFault(v); err == nil {
				panic(v)
			}
		}
	}()
	read()
	return nil
}

// checkSize returns an errs.IO error when the open file f at path, of size bytes when
// opened, is smaller now (fstat): another program truncated or rewrote it.
func checkSize(path string, f *os.File, size int64) error { return fileChanged(path, f, size, "") }

// fileChanged returns the errs.IO error saying that the open file f at path, of size
// bytes when opened, changed while being read: when it is smaller now (fstat), or in any
// case when a read failed as what says (a fault on its mapping). It returns nil for a
// file no smaller and what "".
func fileChanged(path string, f *os.File, size int64, what string) error {
	var st unix.Stat_t // not f.Stat: no allocation in a check made per tile
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	now := st.Size
	var state string
	switch {
	case now < size:
		state = fmt.Sprintf("it is now %d bytes, %d when it was opened (truncated or rewritten by another program)", now, size)
	case what == "":
		return nil
	default:
		state = fmt.Sprintf("it was cut short, and is %d bytes again", now)
	}
	if what != "" {
		state += ", and " + what
	}
	return errs.New(errs.IO, "dataset: %s: the file changed while being read: %s; read it again once it is complete", path, state)
}

// readError is the error of a failed pread of frames [start, end) of the file f at
// path, of size bytes when opened: a file that shrank says so (checkSize).
func readError(path string, f *os.File, size int64, start, end int, err error) error {
	if shrank := checkSize(path, f, size); shrank != nil {
		return shrank
	}
	return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: reading frames [%d, %d): %w", path, start, end, err))
}
