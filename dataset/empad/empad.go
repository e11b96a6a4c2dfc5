// Package empad reads EMPAD acquisitions for package dataset: importing it registers the
// format "empad" (extension .xml, or a .raw file that an EMPAD .xml beside it names,
// unless option sig_shape or option dtype is given).
//
// EMPAD (Electron Microscope Pixel Array Detector, Thermo Fisher / Cornell) files are
// read as LiberTEM (libertem.io.dataset.empad) and RosettaSciIO (rsciio.empad) read
// them: an XML metadata
// file whose <raw_file filename="..."/> names the raw file beside it, which holds
// float32 little-endian frames of 130 rows × 128 columns: 128×128 pixels of signal
// followed by 2 rows (1024 bytes) of per-frame metadata that are not signal. The sig
// shape is (128, 128); the 2 rows are read as a per-frame footer.
//
// The nav shape comes from the XML:
//
//   - <type>series</type> with <count>N</count> (LiberTEM), or
//     <scan_parameters><series_count>N</series_count> (RosettaSciIO): a time series of N
//     frames, nav shape (N,);
//   - otherwise a scan (also when <type> is missing): <scan_parameters mode="...">
//     blocks with <scan_resolution_x> and <scan_resolution_y>, nav shape (y, x). When
//     both a "search" and an "acquire" block exist the "acquire" one is the scan, unless
//     the raw file holds exactly the search scan's frames and not the acquire scan's
//     (LiberTEM's fix for files written so, LiberTEM issue #1617);
//   - legacy files: <pix_x> and <pix_y> under the root, nav shape (pix_y, pix_x).
//
// The .raw file opened alone (no XML beside it names it) has nav shape option
// nav_shape, or (1, n_frames) with a warning naming it.
package empad

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

func init() {
	dataset.Register(dataset.Format{Name: "empad", Extensions: []string{".xml"}, Open: open,
		Describe: "empad (EMPAD: .xml, or the .raw file an EMPAD .xml beside it names)",
		Detect: func(path string, opt dataset.Options) bool {
			if len(opt.SigShape) > 0 || opt.DType != dataset.Invalid || !strings.EqualFold(filepath.Ext(path), ".raw") {
				return false
			}
			xmlPath, _ := empadXMLFor(path)
			return xmlPath != ""
		}})
}

// EMPAD frame geometry.
const (
	empadSigY, empadSigX = 128, 128
	empadRawRows         = 130
	empadFooter          = (empadRawRows - empadSigY) * empadSigX * 4 // 1024 bytes of metadata rows
	empadRecord          = empadRawRows * empadSigX * 4
)

// maxEMPADXML bounds the XML files read: real ones are a few kB.
const maxEMPADXML = 16 << 20

// empadMeta is what an EMPAD XML file says about its raw file.
type empadMeta struct {
	rawFile string // as written in <raw_file filename>
	nav     []int  // the scan's nav shape, nil when the XML gives none
	source  string // where nav came from, for messages
	// search is the search block's nav shape when an acquire block was chosen over it.
	search []int
}

// empadXML is the part of the XML document the reader uses.
type empadXML struct {
	XMLName xml.Name
	RawFile []struct {
		Filename *string `xml:"filename,attr"`
	} `xml:"raw_file"`
	Type       []string `xml:"type"`
	Count      []string `xml:"count"`
	PixX       []string `xml:"pix_x"`
	PixY       []string `xml:"pix_y"`
	ScanParams []struct {
		Mode        string   `xml:"mode,attr"`
		X           []string `xml:"scan_resolution_x"`
		Y           []string `xml:"scan_resolution_y"`
		SeriesCount []string `xml:"series_count"`
	} `xml:"scan_parameters"`
}

// parseEMPADXML parses an EMPAD XML metadata file. Errors name the element at fault.
func parseEMPADXML(b []byte) (empadMeta, error) {
	var doc empadXML
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	if err := dec.Decode(&doc); err != nil {
		return empadMeta{}, notWellFormed(err)
	}
	// Only one root element: trailing elements mean a damaged or concatenated file.
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return empadMeta{}, notWellFormed(err)
		}
		if _, ok := tok.(xml.StartElement); ok {
			return empadMeta{}, errors.New("not a well-formed XML file: more than one root element")
		}
	}
	if len(doc.RawFile) == 0 {
		return empadMeta{}, fmt.Errorf("not an EMPAD XML file: the root element %q has no <raw_file filename=\"...\"/> naming the raw data", doc.XMLName.Local)
	}
	if len(doc.RawFile) > 1 {
		return empadMeta{}, fmt.Errorf("EMPAD XML: %d <raw_file> elements, want one", len(doc.RawFile))
	}
	f := doc.RawFile[0].Filename
	if f == nil || strings.TrimSpace(*f) == "" {
		return empadMeta{}, errors.New("EMPAD XML: <raw_file> has no filename attribute")
	}
	m := empadMeta{rawFile: strings.TrimSpace(*f)}

	typ, err := xmlSingle("type", doc.Type)
	if err != nil {
		return empadMeta{}, err
	}
	var seriesCounts []string
	for _, sp := range doc.ScanParams {
		seriesCounts = append(seriesCounts, sp.SeriesCount...)
	}
	switch strings.ToLower(typ) {
	case "series":
		n, err := xmlCount("count", doc.Count)
		if err == nil && n == 0 && len(seriesCounts) > 0 {
			n, err = xmlCount("scan_parameters/series_count", seriesCounts)
		}
		if err != nil {
			return empadMeta{}, err
		}
		if n == 0 {
			return empadMeta{}, errors.New("EMPAD XML: <type>series</type> without a <count> of frames")
		}
		m.nav, m.source = []int{n}, fmt.Sprintf(" from the XML (a series of %d frames)", n)
		return m, nil
	case "", "scan":
	default:
		return empadMeta{}, fmt.Errorf("EMPAD XML: unknown <type> %q (want scan or series)", typ)
	}
	if typ == "" && len(seriesCounts) > 0 {
		n, err := xmlCount("scan_parameters/series_count", seriesCounts)
		if err != nil {
			return empadMeta{}, err
		}
		if n > 0 {
			m.nav, m.source = []int{n}, fmt.Sprintf(" from the XML (a series of %d frames)", n)
			return m, nil
		}
	}

	// Scan blocks: mode -> nav shape.
	blocks := map[string][]int{}
	var order []string
	for _, sp := range doc.ScanParams {
		if len(sp.X) == 0 && len(sp.Y) == 0 {
			continue
		}
		mode := strings.ToLower(strings.TrimSpace(sp.Mode))
		x, err := xmlCount("scan_parameters/scan_resolution_x", sp.X)
		if err != nil {
			return empadMeta{}, err
		}
		y, err := xmlCount("scan_parameters/scan_resolution_y", sp.Y)
		if err != nil {
			return empadMeta{}, err
		}
		if x == 0 || y == 0 {
			return empadMeta{}, fmt.Errorf("EMPAD XML: <scan_parameters mode=%q> needs both a positive <scan_resolution_x> and <scan_resolution_y>", sp.Mode)
		}
		if _, dup := blocks[mode]; dup {
			return empadMeta{}, fmt.Errorf("EMPAD XML: two <scan_parameters mode=%q> blocks", sp.Mode)
		}
		blocks[mode] = []int{y, x}
		order = append(order, mode)
	}
	if acq, ok := blocks["acquire"]; ok {
		m.nav, m.source = acq, fmt.Sprintf(" from the XML's acquire scan (scan_resolution_y=%d, scan_resolution_x=%d)", acq[0], acq[1])
		if s, ok := blocks["search"]; ok && product(s) != product(acq) {
			m.search = s
		}
		return m, nil
	}
	if len(order) > 0 {
		nav := blocks[order[0]]
		if len(order) > 1 {
			return empadMeta{}, fmt.Errorf("EMPAD XML: %d <scan_parameters> blocks (modes %q) and none with mode \"acquire\": give option nav_shape", len(order), order)
		}
		m.nav, m.source = nav, fmt.Sprintf(" from the XML's scan_parameters (scan_resolution_y=%d, scan_resolution_x=%d)", nav[0], nav[1])
		return m, nil
	}
	if len(doc.PixX) > 0 || len(doc.PixY) > 0 {
		x, err := xmlCount("pix_x", doc.PixX)
		if err != nil {
			return empadMeta{}, err
		}
		y, err := xmlCount("pix_y", doc.PixY)
		if err != nil {
			return empadMeta{}, err
		}
		if x == 0 || y == 0 {
			return empadMeta{}, errors.New("EMPAD XML: the legacy scan size needs both a positive <pix_x> and <pix_y>")
		}
		m.nav, m.source = []int{y, x}, fmt.Sprintf(" from the XML (pix_y=%d, pix_x=%d)", y, x)
	}
	return m, nil
}

// notWellFormed is the XML decoder's error err, the message of a syntax error (which may
// hold the file's text: a name, an entity) quoted.
func notWellFormed(err error) error {
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not a well-formed XML file: line %d: %q", se.Line, se.Msg)
	}
	return fmt.Errorf("not a well-formed XML file: %w", err)
}

// xmlSingle returns the trimmed text of an element that may occur at most once ("" when
// absent).
func xmlSingle(name string, vals []string) (string, error) {
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return strings.TrimSpace(vals[0]), nil
	}
	for _, v := range vals[1:] {
		if strings.TrimSpace(v) != strings.TrimSpace(vals[0]) {
			return "", fmt.Errorf("EMPAD XML: <%s> given %d times with different values", name, len(vals))
		}
	}
	return strings.TrimSpace(vals[0]), nil
}

// xmlCount parses an element holding a positive count (0 when absent).
func xmlCount(name string, vals []string) (int, error) {
	s, err := xmlSingle(name, vals)
	if err != nil || s == "" {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("EMPAD XML: <%s> is %q, not a positive whole number", name, s)
	}
	return n, nil
}

// readEMPADXML reads and parses the XML file at path.
func readEMPADXML(path string) (empadMeta, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return empadMeta{}, err
	}
	defer f.Close()
	if size > maxEMPADXML {
		return empadMeta{}, fmt.Errorf("dataset: %s: %d bytes is too large for an EMPAD XML metadata file (at most %d)", path, size, maxEMPADXML)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return empadMeta{}, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	m, err := parseEMPADXML(b)
	if err != nil {
		return empadMeta{}, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return m, nil
}

// empadRawPath is where the raw file named by an XML file at xmlPath lies: beside the
// XML, under the base name of <raw_file filename> (as LiberTEM resolves it; acquisition
// software may write an absolute path of the acquisition machine).
func empadRawPath(xmlPath string, m empadMeta) string {
	name := m.rawFile
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return filepath.Join(filepath.Dir(xmlPath), name)
}

// empadXMLFor finds the EMPAD XML file beside the raw file at rawPath that names it, or
// returns "" when there is none.
func empadXMLFor(rawPath string) (string, empadMeta) {
	dir := filepath.Dir(rawPath)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", empadMeta{}
	}
	base := filepath.Base(rawPath)
	for _, e := range entries {
		if e.IsDir() || !strings.EqualFold(filepath.Ext(e.Name()), ".xml") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if m, err := readEMPADXML(p); err == nil && filepath.Base(empadRawPath(p, m)) == base {
			return p, m
		}
	}
	return "", empadMeta{}
}

// open opens an EMPAD acquisition from its XML file, or from its raw file: with the
// XML beside it that names it, or alone (then the nav shape is opt.NavShape, or guessed
// as (1, n_frames)). opt.NavShape overrides the XML's scan shape; frame counts that
// differ from the scan are reconciled as frames.go describes.
func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	rawPath, xmlPath := path, ""
	var meta empadMeta
	if strings.EqualFold(filepath.Ext(path), ".xml") {
		m, err := readEMPADXML(path)
		if err != nil {
			return nil, err
		}
		xmlPath, meta = path, m
		rawPath = empadRawPath(path, m)
		if _, err := os.Stat(rawPath); err != nil {
			return nil, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: the raw file it names (<raw_file filename=%q>) is not at %s: %w; put it there, or open the .raw file with option nav_shape",
				path, meta.rawFile, rawPath, err))
		}
	} else {
		xmlPath, meta = empadXMLFor(path)
	}
	f, size, err := dataset.OpenFile(rawPath)
	if err != nil {
		return nil, err
	}
	whole := int(size / empadRecord)
	var searchNote []string
	nav, source := meta.nav, meta.source
	if xmlPath != "" {
		source = strings.Replace(source, "the XML", filepath.Base(xmlPath), 1)
	}
	if meta.search != nil && whole == product(meta.search) && whole != product(nav) && len(opt.NavShape) == 0 {
		searchNote = append(searchNote, fmt.Sprintf("the raw file holds the %d frames of the search scan %s, not the %d of the acquire scan %s: reading the search scan",
			whole, npy.ShapeString(meta.search), product(nav), npy.ShapeString(nav)))
		nav = meta.search
		source = fmt.Sprintf(" from %s's search scan (scan_resolution_y=%d, scan_resolution_x=%d)", filepath.Base(xmlPath), nav[0], nav[1])
	}
	if xmlPath != "" && nav == nil && len(opt.NavShape) == 0 {
		f.Close()
		return nil, errs.New(errs.Shape, "dataset: %s: the EMPAD XML gives no scan size (no <scan_parameters> with scan_resolution_x/y, no <pix_x>/<pix_y>, no series <count>): give option nav_shape", xmlPath)
	}
	fl := dataset.Flat{Format: "empad", Path: rawPath, File: f, Size: size, Footer: empadFooter,
		Sig: [2]int{empadSigY, empadSigX}, DType: dataset.Float32}
	return dataset.OpenFlat(fl, opt, nav, source, dataset.FileFrames{Whole: whole, CutBytes: size % empadRecord, RecordBytes: empadRecord,
		Notes: searchNote})
}

// product is the number of positions of the nav shape s.
func product(s []int) int {
	p := 1
	for _, n := range s {
		p *= n
	}
	return p
}
