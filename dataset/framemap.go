package dataset

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// FrameMap locates a range of frames in a read-only memory mapping of the file, so that
// a consumer can move them without a CPU copy: a GPU worker registers the mapped pages
// with the driver (cudaHostRegister) and DMAs them to the device, where per-frame
// headers are skipped and byte order is swapped.
//
// Frame start+i of the range is the record Mapping[Offset+i*Stride : Offset+i*Stride+
// Stride]: Header bytes (a per-frame header, e.g. MIB's 384- or 768-byte one) followed by
// FrameBytes pixel bytes in the native dtype (any bytes after them up to Stride are
// padding or a footer).
type FrameMap struct {
	// Mapping is the whole read-only mapping; it starts on a page boundary and stays
	// valid until the dataset is closed.
	Mapping []byte
	// Offset is where the first frame's record starts in Mapping.
	Offset int64
	// Stride is the bytes from one frame's record to the next (>= Header + FrameBytes).
	Stride int64
	// Header is the bytes before each frame's pixels in its record.
	Header int
	// BigEndian is true when the pixels are stored most significant byte first (MIB);
	// the consumer converts them to host order.
	BigEndian bool
	// Magic, when not empty, is how every record's header must start ("MQ1," for MIB);
	// a consumer that skips the dataset's ReadFrames checks it instead.
	Magic string
}

// Release drops the pages of the first n frames' records from this process's memory
// (madvise MADV_DONTNEED over the whole pages they cover), so that reading a file in
// place keeps the process's resident memory bounded by what its workers are reading, not
// by the file: the pages stay in the page cache, and a later read maps them again.
// frameBytes is the frame's pixel bytes. Pages shared with frames outside the range are
// kept.
func (m FrameMap) Release(n, frameBytes int) error {
	if n < 1 {
		return nil
	}
	return ReleasePages(m.Mapping, m.Offset, m.Offset+int64(n-1)*m.Stride+int64(m.Header)+int64(frameBytes))
}

// ReleasePages drops the whole pages within bytes [lo, hi) of mapping, a read-only
// mapping of a file that starts on a page boundary (MapFile), from this process's memory
// (madvise MADV_DONTNEED): the pages stay in the page cache, and a later read maps them
// again, with the same bytes. Pages that [lo, hi) covers only in part are kept.
func ReleasePages(mapping []byte, lo, hi int64) error {
	page := int64(os.Getpagesize())
	lo = (lo + page - 1) / page * page
	hi = min(hi, int64(len(mapping))) / page * page
	if hi <= lo {
		return nil
	}
	return unix.Madvise(mapping[lo:hi], unix.MADV_DONTNEED)
}

// ReleaseBlock is the unit in which a BlockReleaser drops pages: 2 MiB, the size of the
// large folios a mapping advised MADV_HUGEPAGE maps with one page-table entry (PMD).
// Dropping part of such a block unmaps the whole block, which the frames beside the
// part then fault in again 4-64 KiB at a time.
const ReleaseBlock = 2 << 20

// BlockReleaser drops the pages of a read-only mapping of a file (MapFile) from this
// process's memory as ranges of it are reported read (Read), one ReleaseBlock at a time:
// a block goes once as many of its bytes have been reported as it holds, so that
// workers reporting neighbouring ranges smaller than a block, in any order, drop every
// block once, whole, after its last reader, and a run's resident memory stays bounded
// by the blocks being read. A range reported twice before its block went (two runs over
// some frames of a block, an ROI's edge) drops the block early: a reader then maps its
// pages again from the page cache, with the same bytes. Safe for concurrent use.
type BlockReleaser struct {
	mapping []byte
	read    []atomic.Int64 // per block: bytes reported since it was last dropped
}

// NewBlockReleaser returns the BlockReleaser of mapping (nil: a BlockReleaser that
// drops nothing).
func NewBlockReleaser(mapping []byte) *BlockReleaser {
	return &BlockReleaser{mapping: mapping, read: make([]atomic.Int64, (len(mapping)+ReleaseBlock-1)/ReleaseBlock)}
}

// Read reports bytes [lo, hi) of the mapping read and drops the blocks that are then
// read whole (ReleasePages); a range outside the mapping is clipped to it.
func (r *BlockReleaser) Read(lo, hi int64) error {
	lo, hi = max(lo, 0), min(hi, int64(len(r.mapping)))
	for b := lo / ReleaseBlock; lo < hi; b++ {
		bLo := b * ReleaseBlock
		bHi := min(bLo+ReleaseBlock, int64(len(r.mapping)))
		n := min(hi, bHi) - lo
		lo += n
		if n < bHi-bLo && r.read[b].Add(n) < bHi-bLo {
			continue
		}
		r.read[b].Store(0)
		if err := ReleasePages(r.mapping, bLo, bHi); err != nil {
			return err
		}
	}
	return nil
}

// Swapped tells whether the pixels are in the other byte order than this host's.
func (m FrameMap) Swapped() bool { return m.BigEndian != npy.HostBigEndian }

// Packed tells whether the records are frames of frameBytes back to back in host byte
// order: the mapped bytes are the frames as ReadFrames delivers them.
func (m FrameMap) Packed(frameBytes int64) bool {
	return m.Stride == frameBytes && m.Header == 0 && !m.Swapped()
}

// Mapper is implemented by datasets whose frames (or some of them) lie at a fixed stride
// in a memory mapping.
type Mapper interface {
	// MapFrames returns where frames [start, end) lie in the mapping, or ok == false when
	// they cannot be served in place (the caller then uses ReadFrames). Errors are those
	// of ReadFrames: a range outside the dataset, a closed dataset, a file that shrank
	// since it was opened (fault.go). A consumer that reads the mapping from Go does so
	// under debug.SetPanicOnFault and passes a recovered panic to MappingFault; one that
	// cannot (a DMA) calls MapFrames again after its read, to learn whether the file
	// shrank meanwhile.
	MapFrames(start, end int) (m FrameMap, ok bool, err error)
}

// closeMapped closes a file opened at path, unmapping its mapping (when not nil), once:
// a second call is an error.
func closeMapped(path string, closed *atomic.Bool, mapping []byte, f *os.File) error {
	if closed.Swap(true) {
		return errs.New(errs.Argument, "dataset: %s: already closed", path)
	}
	var err error
	if mapping != nil {
		unregister(mapping)
		err = unix.Munmap(mapping)
	}
	return errors.Join(err, f.Close())
}

// mapReadOnly maps the size bytes of the file f opened at path read-only and shared,
// registered for MappingFault, or returns nil when the file system refuses (the dataset
// then has no FrameMap and is read with pread).
func mapReadOnly(path string, f *os.File, size int64) []byte {
	if size <= 0 || size != int64(int(size)) {
		return nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	// Advice only (refused where transparent huge pages are off): the pages this mapping
	// reads from disk enter the page cache as 2 MiB folios, which any later mapping of the
	// file maps with one fault each, not one per 4 KiB to 128 KiB folio. Workers drop the
	// pages of each claim (FrameMap.Release), so every apply maps the file again: with
	// small folios that cost 40% of a one-core sweep (19 against 32 GB/s, 2026-12-02,
	// Zen 4 KVM guest, Linux 6.18, ext4), with 2 MiB folios nothing measurable.
	_ = unix.Madvise(data, unix.MADV_HUGEPAGE)
	register(data, func(off uintptr) error {
		return fileChanged(path, f, size, fmt.Sprintf("reading byte %d of its memory mapping failed", off))
	})
	return data
}
