package seq

import (
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// The DE metadata file beside a SEQ file, which places the defect map on the frame.
const metadataExt = ".seq.metadata"

// Bytes of the files read for the defect map: more is not a metadata file or defect list.
const maxDefectFile = 64 << 20

// defects is the patch of a frame's defect pixels: each is replaced by the mean of its
// good neighbours (LiberTEM's libertem.io.corrections.detector: the up to 8 pixels
// around it inside the frame that are not defect pixels themselves, summed in float64
// in row-major order, the mean rounded to float32).
type defects struct {
	pixels []int32 // flat index of each defect pixel, row-major
	start  []int32 // pixel i's good neighbours are near[start[i]:start[i+1]]
	near   []int32 // flat indices
}

// patch patches the defect pixels of frame, float32 pixels in host byte order.
func (d *defects) patch(frame []byte) {
	ne := binary.NativeEndian
	for i, p := range d.pixels {
		near := d.near[d.start[i]:d.start[i+1]]
		var acc float64
		for _, q := range near {
			acc += float64(math.Float32frombits(ne.Uint32(frame[4*q:])))
		}
		ne.PutUint32(frame[4*p:], math.Float32bits(float32(acc/float64(len(near)))))
	}
}

// readDefects reads the defect pixels of frames of shape sig that <base>.seq.Config.
// Metadata.xml (defectPath) lists, placed on the frame by <base>.seq.metadata, as
// LiberTEM 0.16 reads them (libertem.io.dataset.seq: xml_processing):
//
//   - The metadata file holds, from byte 282, little-endian int32 DEMetadataSize,
//     DEMetadataVersion, UnbinnedFrameSizeX, UnbinnedFrameSizeY, OffsetX, OffsetY and
//     HardwareBinning. Without it the defect list is not applied (LiberTEM skips it too):
//     d is nil and note says so.
//   - Of the <BadPixelMap Columns= Rows= [Binning=]> elements below the root, those of
//     Binning 2 or more when HardwareBinning is 2 or more, else the others, the one of
//     most Columns is used (the first map when none is of that binning).
//   - Its <Defect> children mark pixels: one attribute Row or Column marks a row or
//     column, Rows or Columns "a-b" rows or columns a to b (cut at the map's edge), or
//     a single one; other single attributes are ignored; a Defect of other attributes
//     marks the pixel at Row and Column.
//   - The map is cut to the detector area read, UnbinnedFrameSizeY/X at OffsetY/X
//     (divided by the binning when it is 2 or more), when that lies inside it; the map
//     must then be of the frames' shape.
//
// LiberTEM builds the map as an array of Columns rows and Rows columns and halves the
// area for any binning; stemdot reads Rows as rows and divides by the binning, which
// agrees with it for square detectors and binning 1 or 2. The note says how many pixels
// are patched; errors name the file and option seq_defect_pixels.
func readDefects(defectPath, base string, sig [2]int) (d *defects, note string, err error) {
	name := filepath.Base(defectPath)
	metaPath := base + metadataExt
	fail := func(err error) (*defects, string, error) {
		return nil, "", fmt.Errorf("%w (option %s=false reads the frames without patching the defect pixels)", err, OptDefectPixels)
	}
	meta, err := readSmall(metaPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Sprintf("the defect pixels that %s lists are not patched: %s, which places them on the frame, is missing (LiberTEM skips them too)",
			name, filepath.Base(metaPath)), nil
	}
	if err != nil {
		return fail(err)
	}
	const at, fields = 282, 7
	if len(meta) < at+4*fields {
		return fail(errs.New(errs.Format, "%s: %d bytes, too short for the DE metadata fields at byte %d", metaPath, len(meta), at))
	}
	field := func(i int) int { return int(int32(binary.LittleEndian.Uint32(meta[at+4*i:]))) }
	area := [2]int{field(3), field(2)} // UnbinnedFrameSizeY, X
	offset := [2]int{field(5), field(4)}
	binning := field(6)

	b, err := readSmall(defectPath)
	if err != nil {
		return fail(err)
	}
	maps, err := parseBadPixelMaps(b)
	if err != nil {
		return fail(errs.Wrap(errs.Format, fmt.Errorf("%s: %w", defectPath, err)))
	}
	if len(maps) == 0 {
		return nil, fmt.Sprintf("%s lists no BadPixelMap: no defect pixel is patched", name), nil
	}
	m := maps[0]
	best := 0
	for _, c := range maps {
		if (c.binning > 1) == (binning > 1) && c.cols > best {
			m, best = c, c.cols
		}
	}
	if binning > 1 {
		area, offset = [2]int{area[0] / binning, area[1] / binning}, [2]int{offset[0] / binning, offset[1] / binning}
	}
	// The area read when it lies inside the map, else the whole map.
	origin, size := [2]int{}, [2]int{m.rows, m.cols}
	if area[0] > 0 && area[1] > 0 && offset[0] >= 0 && offset[1] >= 0 && offset[0]+area[0] <= m.rows && offset[1]+area[1] <= m.cols {
		origin, size = offset, area
	}
	if size != sig {
		return fail(errs.New(errs.Shape, "%s: its BadPixelMap of %d rows × %d columns, cut to the area %s gives (%d × %d at %d, %d, binning %d), is %d × %d pixels, not the frames' %d × %d",
			defectPath, m.rows, m.cols, filepath.Base(metaPath), area[0], area[1], offset[0], offset[1], binning, size[0], size[1], sig[0], sig[1]))
	}
	bad, err := m.mark(origin, sig)
	if err != nil {
		return fail(errs.Wrap(errs.Format, fmt.Errorf("%s: %w", defectPath, err)))
	}
	d, err = neighbours(bad, sig)
	if err != nil {
		return fail(errs.Wrap(errs.Format, fmt.Errorf("%s: %w", defectPath, err)))
	}
	if len(d.pixels) == 0 {
		return nil, fmt.Sprintf("%s lists no defect pixel: none is patched", name), nil
	}
	return d, fmt.Sprintf("%d defect pixels that %s lists are patched with the mean of their neighbours, as LiberTEM does, giving float32 frames (option %s=false keeps their recorded values)",
		len(d.pixels), name, OptDefectPixels), nil
}

// readSmall reads the regular file at path, of at most maxDefectFile bytes.
func readSmall(path string) ([]byte, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxDefectFile {
		return nil, errs.New(errs.Format, "%s: %d bytes, more than the %d of a DE metadata or defect file", path, size, maxDefectFile)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("reading %s: %w", path, err))
	}
	return b, nil
}

// badPixelMap is a <BadPixelMap> element: its size, binning and <Defect> children.
type badPixelMap struct {
	rows, cols, binning int
	defects             [][]xml.Attr
}

// parseBadPixelMaps returns the <BadPixelMap> elements below the root of the XML
// document b, in document order (ElementTree's findall(".//BadPixelMap")), each with
// its <Defect> children's attributes.
func parseBadPixelMaps(b []byte) ([]badPixelMap, error) {
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	var maps []badPixelMap
	var open []int // per open element: its index in maps, or -1
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return maps, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not an XML document: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			idx := -1
			attrs := plainAttrs(t.Attr)
			switch {
			case t.Name.Space != "":
			case t.Name.Local == "BadPixelMap" && len(open) > 0:
				m, err := newBadPixelMap(attrs)
				if err != nil {
					return nil, fmt.Errorf("BadPixelMap %d: %w", len(maps)+1, err)
				}
				idx = len(maps)
				maps = append(maps, m)
			case t.Name.Local == "Defect" && len(open) > 0 && open[len(open)-1] >= 0:
				m := &maps[open[len(open)-1]]
				m.defects = append(m.defects, attrs)
			}
			open = append(open, idx)
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
}

// plainAttrs returns the attributes of attrs that are not namespace declarations.
func plainAttrs(attrs []xml.Attr) []xml.Attr {
	var out []xml.Attr
	for _, a := range attrs {
		if a.Name.Space != "xmlns" && a.Name.Local != "xmlns" {
			out = append(out, a)
		}
	}
	return out
}

// attr returns the value of the attribute key of attrs.
func attr(attrs []xml.Attr, key string) (string, bool) {
	for _, a := range attrs {
		if a.Name.Space == "" && a.Name.Local == key {
			return a.Value, true
		}
	}
	return "", false
}

// intAttr returns the attribute key of attrs as a whole number.
func intAttr(attrs []xml.Attr, key string) (int, error) {
	v, ok := attr(attrs, key)
	if !ok {
		return 0, fmt.Errorf("no attribute %s", key)
	}
	return atoi(key, v)
}

// atoi parses the value v of attribute key as a whole number.
func atoi(key, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("attribute %s=%q is not a whole number", key, v)
	}
	return n, nil
}

// newBadPixelMap reads a <BadPixelMap>'s Columns, Rows and Binning (1 when absent).
func newBadPixelMap(attrs []xml.Attr) (badPixelMap, error) {
	cols, err := intAttr(attrs, "Columns")
	if err != nil {
		return badPixelMap{}, err
	}
	rows, err := intAttr(attrs, "Rows")
	if err != nil {
		return badPixelMap{}, err
	}
	m := badPixelMap{rows: rows, cols: cols, binning: 1}
	if _, ok := attr(attrs, "Binning"); ok {
		if m.binning, err = intAttr(attrs, "Binning"); err != nil {
			return badPixelMap{}, err
		}
	}
	if rows < 1 || cols < 1 || rows > 1<<20 || cols > 1<<20 {
		return badPixelMap{}, fmt.Errorf("Rows=%d, Columns=%d: not a detector's size", rows, cols)
	}
	return m, nil
}

// mark returns the defect pixels of the part of the map of shape sig at origin (y, x),
// row-major, true where a <Defect> marks them. A pixel, row or column outside the map is
// an error; a range is cut at the map's edge.
func (m badPixelMap) mark(origin, sig [2]int) ([]bool, error) {
	bad := make([]bool, sig[0]*sig[1])
	set := func(y, x int) {
		if y -= origin[0]; y >= 0 && y < sig[0] {
			if x -= origin[1]; x >= 0 && x < sig[1] {
				bad[y*sig[1]+x] = true
			}
		}
	}
	for i, attrs := range m.defects {
		errf := func(err error) ([]bool, error) {
			return nil, fmt.Errorf("Defect %d %s: %w", i+1, describe(attrs), err)
		}
		if len(attrs) != 1 {
			y, err := index(attrs, "Row", m.rows)
			if err != nil {
				return errf(err)
			}
			x, err := index(attrs, "Column", m.cols)
			if err != nil {
				return errf(err)
			}
			set(y, x)
			continue
		}
		key := attrs[0].Name.Local
		rows := strings.HasPrefix(key, "Row")
		n := m.cols
		if rows {
			n = m.rows
		}
		var lo, hi int
		var err error
		switch parts := strings.Split(attrs[0].Value, "-"); {
		case key == "Row" || key == "Column" || (key == "Rows" || key == "Columns") && len(parts) == 1:
			lo, err = index(attrs, key, n)
			hi = lo
		case key == "Rows" || key == "Columns": // a range "a-b"
			if lo, err = atoi(key, parts[0]); err == nil {
				hi, err = atoi(key, parts[1])
			}
		default: // ignored, as LiberTEM does
			continue
		}
		if err != nil {
			return errf(err)
		}
		for v := max(lo, 0); v <= min(hi, n-1); v++ {
			if rows {
				for x := range sig[1] {
					set(v, origin[1]+x)
				}
			} else {
				for y := range sig[0] {
					set(origin[0]+y, v)
				}
			}
		}
	}
	return bad, nil
}

// index returns the attribute key of attrs as an index below n.
func index(attrs []xml.Attr, key string, n int) (int, error) {
	v, err := intAttr(attrs, key)
	if err != nil {
		return 0, err
	}
	if v < 0 || v >= n {
		return 0, fmt.Errorf("%s %d is outside the map's 0 to %d", key, v, n-1)
	}
	return v, nil
}

// describe writes attrs as they read in the file, each value quoted.
func describe(attrs []xml.Attr) string {
	var b strings.Builder
	b.WriteString("<Defect")
	for _, a := range attrs {
		fmt.Fprintf(&b, " %s=%q", a.Name.Local, a.Value)
	}
	b.WriteString("/>")
	return b.String()
}

// neighbours returns the patch of the defect pixels bad (row-major, of shape sig): each
// pixel's neighbours (row-major over the 3×3 around it) inside the frame that are not
// defect pixels. A defect pixel without any is an error, as in LiberTEM.
func neighbours(bad []bool, sig [2]int) (*defects, error) {
	d := &defects{start: []int32{0}}
	for p, isBad := range bad {
		if !isBad {
			continue
		}
		y, x := p/sig[1], p%sig[1]
		for dy := -1; dy <= 1; dy++ {
			for dx := -1; dx <= 1; dx++ {
				ny, nx := y+dy, x+dx
				if (dy != 0 || dx != 0) && ny >= 0 && ny < sig[0] && nx >= 0 && nx < sig[1] && !bad[ny*sig[1]+nx] {
					d.near = append(d.near, int32(ny*sig[1]+nx))
				}
			}
		}
		if int(d.start[len(d.start)-1]) == len(d.near) {
			return nil, fmt.Errorf("defect pixel (y %d, x %d) has no good neighbour to be patched from (LiberTEM refuses it too)", y, x)
		}
		d.pixels = append(d.pixels, int32(p))
		d.start = append(d.start, int32(len(d.near)))
	}
	return d, nil
}
