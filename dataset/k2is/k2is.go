// Package k2is reads Gatan K2 IS raw acquisitions, as LiberTEM reads them
// (libertem.io.dataset.k2is): eight sector files <name>1.bin ... <name>8.bin (the files
// <name>*.bin, in sorted order) and a DigitalMicrograph tag file <name>.gtg with the
// acquisition's metadata. Importing it registers the format "k2is" with package dataset
// (a .gtg, or a .bin that is a sector file).
//
// Each sector file is a sequence of blocks of 0x5758 bytes: a 40-byte big-endian header
//
//	0 sync u32 (0xFFFF0055)  8 version u8  9 flags u8 (bit 0: shutter active)
//	16 block_count u32  20 width u16 (256)  22 height u16 (1860)  24 frame_id u32
//	28 pixel_x_start u16  30 pixel_y_start u16  32 pixel_x_end u16  34 pixel_y_end u16
//	36 block_size u32
//
// then 930×16 pixels of 12 bits, two pixels in three bytes (a = b0 | (b1&0x0F)<<8,
// b = b1>>4 | b2<<4), rows of 16. A frame is 1860 rows × 2048 columns of uint16: sector s
// (0..7) holds columns 256·s to 256·s+255 in 32 consecutive blocks, each the 930×16
// region of its pixel start/end coordinates within the sector.
//
// The sector files start and end at arbitrary blocks. The reader syncs them as LiberTEM
// does: the first frame is the first frame id whose 32 blocks follow one another in all
// eight files (blocks of earlier, incomplete frames are skipped, with a note), the last
// the last frame complete in all eight; every frame read is checked to carry one frame id
// in all its 256 blocks, each block at its own place. The scan then starts at the first
// frame whose blocks have the shutter-active flag, or, when the .gtg gives the scan shape,
// one frame earlier (LiberTEM: "the sync flag appears to be set one frame too late");
// frames before it are not read, with a note. Option sync_offset counts from there.
//
// The nav shape is the .gtg's tags SI Dimensions.Size Y × SI Dimensions.Size X (as
// LiberTEM reads them with ncempy; package dataset/dm reads the .gtg's tag tree); without
// a .gtg, or without those tags (a time series), give option nav_shape, else the frames
// are read as one row with a warning.
package k2is

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/dm"
	"github.com/stemdot/stemdot/errs"
)

// Name is the format's name (option format, Dataset.Format).
const Name = "k2is"

func init() {
	dataset.Register(dataset.Format{Name: Name, Extensions: []string{".gtg", ".bin"},
		Describe: "k2is (Gatan K2 IS: .gtg, or one of its 8 sector .bin files)",
		Detect:   detect, Open: Open})
}

// The K2 IS geometry.
const (
	blockSize      = 0x5758
	headerSize     = 40
	blockRows      = 930
	blockCols      = 16
	blocksPerFrame = 32 // per sector
	sectors        = 8
	sectorCols     = 256
	sigY, sigX     = 2 * blockRows, sectors * sectorCols
	syncWord       = 0xFFFF0055
	shutterActive  = 0x1
	// syncWindow is how many blocks of each sector the sync looks at for the first
	// frame complete in all sectors.
	syncWindow = 4 * blocksPerFrame
	// maxDropped is how many incomplete frames at the end the sync drops.
	maxDropped = 16
)

// blockHeader is a block's header.
type blockHeader struct {
	flags          uint8
	frameID        uint32
	x0, y0, x1, y1 int
}

// parseHeader checks and parses a block's 40-byte header.
func parseHeader(b []byte) (blockHeader, error) {
	be := binary.BigEndian
	if s := be.Uint32(b); s != syncWord {
		return blockHeader{}, fmt.Errorf("sync word 0x%08X, want 0xFFFF0055", s)
	}
	if w, h := be.Uint16(b[20:]), be.Uint16(b[22:]); w != sectorCols || h != sigY {
		return blockHeader{}, fmt.Errorf("sector width %d × height %d, want 256 × 1860", w, h)
	}
	return blockHeader{flags: b[9], frameID: be.Uint32(b[24:]),
		x0: int(be.Uint16(b[28:])), y0: int(be.Uint16(b[30:])), x1: int(be.Uint16(b[32:])), y1: int(be.Uint16(b[34:]))}, nil
}

// place returns the block's index (0..31) in its sector's frame, checking that its
// pixel region is a 930×16 block of the sector.
func (h blockHeader) place() (int, error) {
	if h.x1-h.x0 != blockCols-1 || h.y1-h.y0 != blockRows-1 || h.x0%blockCols != 0 || h.y0%blockRows != 0 ||
		h.x1 >= sectorCols || h.y1 >= sigY {
		return 0, fmt.Errorf("pixel region x %d..%d, y %d..%d is not a 16×930 block of the 256×1860 sector", h.x0, h.x1, h.y0, h.y1)
	}
	return h.y0/blockRows*(sectorCols/blockCols) + h.x0/blockCols, nil
}

// files finds the sector files and the .gtg of the acquisition that path (a .gtg or a
// .bin) belongs to: <base>*.bin in sorted order and <base>.gtg, where base is the .gtg's
// path without extension or the .bin's without extension and trailing digits.
func files(path string) (bins []string, gtg string, err error) {
	ext := filepath.Ext(path)
	base := strings.TrimSuffix(path, ext)
	if strings.EqualFold(ext, ".bin") {
		base = strings.TrimRight(base, "0123456789")
	}
	dir, prefix := filepath.Split(base)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", errs.Wrap(errs.IO, err)
	}
	for _, e := range entries {
		n := e.Name()
		// A directory of a sector file's name is kept: opening it says what it is.
		if strings.HasPrefix(n, prefix) && strings.EqualFold(filepath.Ext(n), ".bin") {
			bins = append(bins, filepath.Join(filepath.Dir(base), n))
		}
		if strings.EqualFold(n, prefix+".gtg") {
			gtg = filepath.Join(filepath.Dir(base), n)
		}
	}
	slices.Sort(bins)
	if len(bins) != sectors {
		return nil, "", errs.New(errs.Format, "a K2 IS acquisition has 8 sector files %s*.bin, found %d%s", base, len(bins), listed(bins))
	}
	return bins, gtg, nil
}

func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	var b []string
	for _, n := range names {
		b = append(b, filepath.Base(n))
	}
	return " (" + strings.Join(b, ", ") + ")"
}

// detect claims a .gtg, and a .bin that starts with a block's sync word and has its
// seven sibling sector files (other .bin files are raw).
func detect(path string, opt dataset.Options) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".gtg":
		return true
	case ".bin":
	default:
		return false
	}
	f, _, err := dataset.OpenFile(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [headerSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return false
	}
	if _, err := parseHeader(b[:]); err != nil {
		return false
	}
	_, _, err = files(path)
	return err == nil
}

// sector is one open sector file.
type sector struct {
	path  string
	f     *os.File
	size  int64
	first int64 // block index of the first synced frame's first block
}

func (s *sector) header(block int64) (blockHeader, error) {
	var b [headerSize]byte
	if _, err := s.f.ReadAt(b[:], block*blockSize); err != nil {
		return blockHeader{}, errs.Wrap(errs.IO, fmt.Errorf("%s: reading block %d: %w", s.path, block, err))
	}
	h, err := parseHeader(b[:])
	if err != nil {
		return blockHeader{}, errs.Wrap(errs.Format, fmt.Errorf("%s: block %d (byte %d): %w", s.path, block, block*blockSize, err))
	}
	return h, nil
}

func (s *sector) blocks() int64 { return s.size / blockSize }

// reader is the acquisition's frames from the first synced frame on.
type reader struct {
	path    string
	sectors [sectors]*sector
	start   int // the scan's first frame, counted from the first synced frame
	n       int // frames from start on
}

// syncSectors finds the first frame complete in all sectors (each sector's first block
// of it) and the number of frames complete in all from there on. header reads block
// b's header of sector s; blocks[s] is the number of whole blocks of sector s.
func syncSectors(header func(s int, b int64) (blockHeader, error), blocks [sectors]int64) (first [sectors]int64, n int, err error) {
	type run struct {
		id    uint32
		start int64
	}
	// Complete runs of 32 blocks of one frame id in each sector's first blocks.
	complete := make([]map[uint32]int64, sectors)
	var order []run
	for s := range sectors {
		complete[s] = map[uint32]int64{}
		end := min(blocks[s], syncWindow)
		var cur run
		var length int64
		for b := int64(0); b < end; b++ {
			h, err := header(s, b)
			if err != nil {
				return first, 0, err
			}
			if b > 0 && h.frameID == cur.id {
				length++
			} else {
				cur, length = run{h.frameID, b}, 1
			}
			if length == blocksPerFrame {
				if _, dup := complete[s][cur.id]; dup {
					return first, 0, fmt.Errorf("sector file %d: frame id %d occurs twice in its first blocks", s+1, cur.id)
				}
				complete[s][cur.id] = cur.start
				if s == 0 {
					order = append(order, cur)
				}
			}
		}
	}
	found := false
	for _, r := range order {
		ok := true
		for s := 1; s < sectors && ok; s++ {
			first[s], ok = complete[s][r.id]
		}
		if ok {
			first[0], found = r.start, true
			break
		}
	}
	if !found {
		return first, 0, fmt.Errorf("no frame id has its %d blocks one after the other in all 8 sector files within their first %d blocks: not a K2 IS acquisition, or its sector files do not belong together",
			blocksPerFrame, syncWindow)
	}
	n = math.MaxInt
	for s := range sectors {
		n = min(n, int((blocks[s]-first[s])/blocksPerFrame))
	}
	// The last frame must be complete in all sectors: its first and last blocks carry
	// the same frame id everywhere (LiberTEM's end sync); drop incomplete ones, a few:
	// more mean blocks missing inside the files.
	for dropped := 0; n > 0; n, dropped = n-1, dropped+1 {
		if dropped == maxDropped {
			return first, 0, fmt.Errorf("the last %d frames are not complete in all 8 sector files (their first and last blocks differ in frame id): blocks are missing inside the files", maxDropped)
		}
		var id uint32
		ok := true
		for s := 0; s < sectors && ok; s++ {
			for _, b := range []int64{0, blocksPerFrame - 1} {
				h, err := header(s, first[s]+int64(n-1)*blocksPerFrame+b)
				if err != nil {
					return first, 0, err
				}
				if s == 0 && b == 0 {
					id = h.frameID
				}
				ok = ok && h.frameID == id
			}
		}
		if ok {
			break
		}
	}
	return first, n, nil
}

// Open opens the K2 IS acquisition that path (its .gtg or one of its .bin files) belongs
// to: frames of 1860×2048 uint16 at the scan positions of the .gtg's scan shape or option
// nav_shape, reconciled as package dataset describes. Errors name the file and the
// block at fault (errs.Format), or the missing sector files.
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	bins, gtg, err := files(path)
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	var fileNav []int
	source := ""
	if gtg != "" {
		if fileNav, source, err = navShape(gtg); err != nil {
			return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", gtg, err))
		}
	}
	r := &reader{path: path}
	fail := func(err error) (dataset.Dataset, error) {
		r.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	var blocks [sectors]int64
	for i, p := range bins {
		f, size, err := dataset.OpenFile(p)
		if err != nil {
			return fail(err)
		}
		r.sectors[i] = &sector{path: p, f: f, size: size}
		blocks[i] = r.sectors[i].blocks()
	}
	first, n, err := syncSectors(func(s int, b int64) (blockHeader, error) { return r.sectors[s].header(b) }, blocks)
	if err != nil {
		return fail(err)
	}
	var notes []string
	var skipped []string
	for i, s := range r.sectors {
		s.first = first[i]
		if first[i] > 0 {
			skipped = append(skipped, fmt.Sprintf("%s: %d", filepath.Base(s.path), first[i]))
		}
	}
	if len(skipped) > 0 {
		h, _ := r.sectors[0].header(first[0])
		notes = append(notes, fmt.Sprintf("blocks before frame id %d, the first frame complete in all 8 sector files, are not read (%s)", h.frameID, strings.Join(skipped, ", ")))
	}
	if n == 0 {
		return fail(fmt.Errorf("no frame is complete in all 8 sector files"))
	}
	start, note, err := r.scanStart(n, fileNav != nil)
	if err != nil {
		return fail(err)
	}
	if note != "" {
		notes = append(notes, note)
	}
	r.start, r.n = start, n-start
	ds, err := dataset.Reconcile(r, opt, fileNav, source, dataset.FileFrames{Whole: r.n, RecordBytes: sectors * blocksPerFrame * blockSize, Notes: notes})
	if err != nil {
		r.Close()
		return nil, err
	}
	return ds, nil
}

// scanStart finds the first frame of the scan among the n synced frames: the first whose
// blocks have the shutter-active flag (it stays set from there on: binary search), or
// one earlier for a STEM scan (the .gtg gives its shape).
func (r *reader) scanStart(n int, scan bool) (int, string, error) {
	active := func(i int) (bool, uint32, error) {
		h, err := r.sectors[0].header(r.sectors[0].first + int64(i)*blocksPerFrame)
		return h.flags&shutterActive != 0, h.frameID, err
	}
	last, _, err := active(n - 1)
	if err != nil || !last {
		return 0, "no block has the shutter-active flag: the scan starts at the first complete frame", err
	}
	lo, hi := 0, n-1 // the first active frame is in [lo, hi]
	for lo < hi {
		mid := (lo + hi) / 2
		a, _, err := active(mid)
		if err != nil {
			return 0, "", err
		}
		if a {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	_, id, err := active(lo)
	if err != nil {
		return 0, "", err
	}
	start := lo
	if scan && start > 0 {
		start-- // LiberTEM: the flag is set one frame too late
	}
	if start == 0 {
		return 0, "", nil
	}
	how := ""
	if scan {
		how = ", and a scan starts one frame earlier, as LiberTEM reads it"
	}
	what := fmt.Sprintf("the first %d complete frames precede the scan and are", start)
	if start == 1 {
		what = "the first complete frame precedes the scan and is"
	}
	return start, fmt.Sprintf("%s not read (the shutter-active flag is set from frame id %d on%s); option sync_offset counts from the scan's first frame",
		what, id, how), nil
}

// navShape reads the scan shape from the .gtg's SI Dimensions tags (nil when it has
// none: a time series); the .gtg is a DigitalMicrograph tag file, read by package
// dataset/dm.
func navShape(gtg string) ([]int, string, error) {
	f, size, err := dataset.OpenFile(gtg)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	tags, err := dm.ReadTags(f, size, "SI Dimensions.Size Y", "SI Dimensions.Size X")
	if err != nil {
		return nil, "", err
	}
	y, okY := tags.Number("SI Dimensions.Size Y")
	x, okX := tags.Number("SI Dimensions.Size X")
	if !okY || !okX {
		return nil, "", nil
	}
	if y < 1 || x < 1 || y > 1<<24 || x > 1<<24 || y != math.Trunc(y) || x != math.Trunc(x) {
		return nil, "", fmt.Errorf("SI Dimensions: Size Y %v × Size X %v is not a scan shape", y, x)
	}
	return []int{int(y), int(x)}, fmt.Sprintf(" from %s (SI Dimensions: Size Y %d, Size X %d)", filepath.Base(gtg), int(y), int(x)), nil
}

// Dataset methods of the reader: every frame from the scan's start on.

func (r *reader) Format() string       { return Name }
func (r *reader) Path() string         { return r.path }
func (r *reader) NavShape() []int      { return []int{1, r.n} }
func (r *reader) SigShape() [2]int     { return [2]int{sigY, sigX} }
func (r *reader) DType() dataset.DType { return dataset.Uint16 }
func (r *reader) NumFrames() int       { return r.n }
func (r *reader) FrameBytes() int      { return sigY * sigX * 2 }

func (r *reader) Close() error {
	var first error
	for i, s := range r.sectors {
		if s != nil {
			if err := s.f.Close(); err != nil && first == nil {
				first = err
			}
			r.sectors[i] = nil
		}
	}
	return first
}

// sectorFrame is one sector's 32 blocks of a frame.
const sectorFrame = blocksPerFrame * blockSize

var bufPool = sync.Pool{New: func() any { b := make([]byte, sectorFrame); return &b }}

// ReadFrames reads frames [start, end): the 32 blocks of each sector, each block's 12-bit
// pixels placed at the region its header gives, after checking that all 256 blocks of
// the frame carry one frame id and cover the frame.
func (r *reader) ReadFrames(start, end int, dst []byte) error {
	if err := dataset.CheckRange(r.path, start, end, r.n, r.FrameBytes(), len(dst)); err != nil {
		return err
	}
	if r.sectors[0] == nil {
		return errs.New(errs.IO, "dataset: %s: read after Close", r.path)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for i := start; i < end; i++ {
		frame := dst[(i-start)*r.FrameBytes() : (i-start+1)*r.FrameBytes()]
		var id uint32
		for si, s := range r.sectors {
			off := (s.first + int64(r.start+i)*blocksPerFrame) * blockSize
			if _, err := s.f.ReadAt(buf, off); err != nil {
				return dataset.ReadError(s.path, s.f, s.size, i, i+1, err)
			}
			var seen uint32
			for b := range blocksPerFrame {
				blk := buf[b*blockSize : (b+1)*blockSize]
				h, err := parseHeader(blk)
				if err == nil && si == 0 && b == 0 {
					id = h.frameID
				}
				var place int
				if err == nil {
					place, err = h.place()
				}
				switch {
				case err != nil:
				case h.frameID != id:
					err = fmt.Errorf("frame id %d, but the frame's first block has %d: blocks are missing", h.frameID, id)
				case seen&(1<<place) != 0:
					err = fmt.Errorf("a second block for pixels x %d..%d, y %d..%d", h.x0, h.x1, h.y0, h.y1)
				}
				if err != nil {
					return errs.New(errs.Format, "dataset: %s: frame %d: block at byte %d: %v", s.path, i, off+int64(b*blockSize), err)
				}
				seen |= 1 << place
				decodeBlock(frame, blk[headerSize:], si*sectorCols+h.x0, h.y0)
			}
		}
	}
	return nil
}

// decodeBlock unpacks a block's 930×16 12-bit pixels into frame (uint16, host byte
// order, rows of 2048) at column x, row y.
func decodeBlock(frame, src []byte, x, y int) {
	const inRow, outRow = blockCols * 3 / 2, blockCols * 2
	for row := range blockRows {
		in := (*[inRow]byte)(src[row*inRow:])
		out := (*[outRow]byte)(frame[((y+row)*sigX+x)*2:])
		for j := range blockCols / 2 {
			b0, b1, b2 := uint16(in[3*j]), uint16(in[3*j+1]), uint16(in[3*j+2])
			binary.NativeEndian.PutUint16(out[4*j:4*j+2], b0|(b1&0x0F)<<8)
			binary.NativeEndian.PutUint16(out[4*j+2:4*j+4], b1>>4|b2<<4)
		}
	}
}
