package empad_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
)

// requireFrames reads every frame of ds and compares it with want, exactly (float32
// values survive float64 untouched).
func requireFrames(t *testing.T, ds dataset.Dataset, want [][]float64) {
	t.Helper()
	require.Equal(t, "empad", ds.Format())
	require.Equal(t, [2]int{128, 128}, ds.SigShape())
	require.Equal(t, dataset.Float32, ds.DType())
	require.Equal(t, len(want), ds.NumFrames())
	got := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), got))
	for f, fr := range want {
		for i, v := range fr {
			g := float64(math.Float32frombits(binary.LittleEndian.Uint32(got[(f*len(fr)+i)*4:])))
			if g != v {
				t.Fatalf("frame %d pixel %d: got %g, want %g", f, i, g, v)
			}
		}
	}
	// One frame at a time, from the middle.
	if n := ds.NumFrames(); n > 2 {
		one := make([]byte, ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(n/2, n/2+1, one))
		require.Equal(t, got[n/2*ds.FrameBytes():(n/2+1)*ds.FrameBytes()], one)
	}
}

func openEMPAD(t *testing.T, path string, opt dataset.Options) dataset.Dataset {
	t.Helper()
	ds, err := dataset.Open(path, opt)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	return ds
}

func TestEMPADNewerKeysAcquireOverSearch(t *testing.T) {
	dir := t.TempDir()
	xmlPath, rawPath, frames := frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 6, 1)
	for _, path := range []string{xmlPath, rawPath} { // the .raw finds its .xml beside it
		ds := openEMPAD(t, path, dataset.Options{})
		require.Equal(t, []int{2, 3}, ds.NavShape(), "acquire block: y=2, x=3")
		require.False(t, dataset.NavShapeGuessed(ds))
		require.Empty(t, dataset.Notes(ds))
		requireFrames(t, ds, frames)
		require.Equal(t, rawPath, ds.Path())
	}
	// The user's nav shape wins.
	ds := openEMPAD(t, xmlPath, dataset.Options{NavShape: []int{3, 2}})
	require.Equal(t, []int{3, 2}, ds.NavShape())
	requireFrames(t, ds, frames)
}

// A raw file that holds the search scan's frames (LiberTEM issue #1617) is read as the
// search scan.
func TestEMPADSearchScanFrames(t *testing.T) {
	xmlPath, _, frames := frametest.WriteEMPAD(t, t.TempDir(), "acquisition_v122.xml", 16, 2)
	ds := openEMPAD(t, xmlPath, dataset.Options{})
	require.Equal(t, []int{4, 4}, ds.NavShape())
	require.Len(t, dataset.Notes(ds), 1)
	require.Contains(t, dataset.Notes(ds)[0], "search scan (4, 4)")
	requireFrames(t, ds, frames)
}

func TestEMPADLegacyKeys(t *testing.T) {
	xmlPath, _, frames := frametest.WriteEMPAD(t, t.TempDir(), "acquisition_legacy.xml", 6, 3)
	ds := openEMPAD(t, xmlPath, dataset.Options{})
	require.Equal(t, []int{2, 3}, ds.NavShape(), "pix_y=2, pix_x=3")
	requireFrames(t, ds, frames)
}

func TestEMPADSeries(t *testing.T) {
	for _, name := range []string{"acquisition_series.xml", "acquisition_series_count.xml"} {
		t.Run(name, func(t *testing.T) {
			xmlPath, _, frames := frametest.WriteEMPAD(t, t.TempDir(), name, 5, 4)
			ds := openEMPAD(t, xmlPath, dataset.Options{})
			require.Equal(t, []int{5}, ds.NavShape())
			requireFrames(t, ds, frames)
		})
	}
}

// Frame counts that differ from the scan follow frames.go: surplus frames are not read,
// an interrupted acquisition keeps its complete rows, sync_offset shifts.
func TestEMPADFrameCounts(t *testing.T) {
	dir := t.TempDir()
	xmlPath, rawPath, frames := frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 7, 5)
	ds := openEMPAD(t, xmlPath, dataset.Options{})
	require.Equal(t, []int{2, 3}, ds.NavShape())
	require.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "the last 1 are surplus")
	requireFrames(t, ds, frames[:6])

	ds = openEMPAD(t, xmlPath, dataset.Options{SyncOffset: 1})
	requireFrames(t, ds, frames[1:7])

	// Cut inside frame 5: one complete row of 3.
	b, err := os.ReadFile(rawPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(rawPath, b[:5*frametest.EMPADRecord-100], 0o644))
	ds = openEMPAD(t, xmlPath, dataset.Options{})
	require.Equal(t, []int{1, 3}, ds.NavShape())
	notes := strings.Join(dataset.Notes(ds), "\n")
	require.Contains(t, notes, "the file ends inside frame 4")
	require.Contains(t, notes, "incomplete acquisition")
	requireFrames(t, ds, frames[:3])

	// Less than one scan row: an error naming nav_shape; with it the frames are read.
	require.NoError(t, os.WriteFile(rawPath, b[:2*frametest.EMPADRecord], 0o644))
	_, err = dataset.Open(xmlPath, dataset.Options{})
	require.ErrorContains(t, err, "less than one scan row of 3; give option nav_shape")
	assert.Equal(t, errs.Shape, errs.KindOf(err))
	ds = openEMPAD(t, xmlPath, dataset.Options{NavShape: []int{2}})
	requireFrames(t, ds, frames[:2])

	// Smaller than one frame record.
	require.NoError(t, os.WriteFile(rawPath, b[:frametest.EMPADRecord-4], 0o644))
	_, err = dataset.Open(xmlPath, dataset.Options{})
	require.ErrorContains(t, err, "the file holds no whole frame (a frame takes 66560 bytes)")
}

// A raw file without its XML: option format empad, nav shape given or guessed.
func TestEMPADRawWithoutXML(t *testing.T) {
	dir := t.TempDir()
	xmlPath, rawPath, frames := frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 6, 6)
	require.NoError(t, os.Remove(xmlPath))
	ds := openEMPAD(t, rawPath, dataset.Options{Format: "empad"})
	require.Equal(t, []int{1, 6}, ds.NavShape())
	require.True(t, dataset.NavShapeGuessed(ds))
	requireFrames(t, ds, frames)
	ds = openEMPAD(t, rawPath, dataset.Options{Format: "empad", NavShape: []int{3, 2}})
	require.Equal(t, []int{3, 2}, ds.NavShape())
	requireFrames(t, ds, frames)

	// Without format empad it is a raw file, whose error says how to read it as EMPAD.
	_, err := dataset.Open(rawPath, dataset.Options{})
	require.ErrorContains(t, err, "option format empad")
	// sig_shape and dtype make a .raw beside an EMPAD XML a plain raw file.
	_, _, _ = frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 6, 6)
	ds = openEMPAD(t, rawPath, dataset.Options{SigShape: []int{130, 128}, DType: dataset.Float32})
	require.Equal(t, "raw", ds.Format())
}

// The metadata rows are a per-frame footer: MapFrames serves records of 130 rows.
func TestEMPADMapFrames(t *testing.T) {
	xmlPath, rawPath, _ := frametest.WriteEMPAD(t, t.TempDir(), "acquisition_v122.xml", 6, 8)
	ds := openEMPAD(t, xmlPath, dataset.Options{})
	m, ok, err := ds.(dataset.Mapper).MapFrames(2, 5)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(frametest.EMPADRecord), m.Stride)
	require.Equal(t, int64(2*frametest.EMPADRecord), m.Offset)
	require.Zero(t, m.Header)
	require.False(t, m.Packed(int64(ds.FrameBytes())))
	b, err := os.ReadFile(rawPath)
	require.NoError(t, err)
	require.Equal(t, b[3*frametest.EMPADRecord:3*frametest.EMPADRecord+ds.FrameBytes()], m.Mapping[m.Offset+m.Stride:m.Offset+m.Stride+int64(ds.FrameBytes())])
	_, _, err = ds.(dataset.Mapper).MapFrames(5, 7)
	require.Error(t, err)
}

func TestEMPADBadXML(t *testing.T) {
	dir := t.TempDir()
	_, _, _ = frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 6, 9)
	cases := []struct{ xml, want string }{
		{`<root><raw_file filename="scan_x3_y2.raw"/><pix_x>3</pix_x>`, "not a well-formed XML file"},
		{`not xml at all`, "not a well-formed XML file"},
		{`<root><pix_x>3</pix_x><pix_y>2</pix_y></root>`, `not an EMPAD XML file: the root element "root" has no <raw_file filename="..."/>`},
		// Text of the file in a syntax error is quoted: a name with a right-to-left override.
		{"<a\u202eb/>", `not a well-formed XML file: line 1: "invalid XML name: a\u202eb"`},
		{`<root><raw_file/><pix_x>3</pix_x><pix_y>2</pix_y></root>`, "<raw_file> has no filename attribute"},
		{`<root><raw_file filename="scan_x3_y2.raw"/><pix_x>three</pix_x><pix_y>2</pix_y></root>`, `<pix_x> is "three", not a positive whole number`},
		{`<root><raw_file filename="scan_x3_y2.raw"/><pix_x>3</pix_x></root>`, "needs both a positive <pix_x> and <pix_y>"},
		{`<root><raw_file filename="scan_x3_y2.raw"/><pix_x>3</pix_x><pix_y>2</pix_y><pix_y>3</pix_y></root>`, "<pix_y> given 2 times with different values"},
		{`<root><raw_file filename="scan_x3_y2.raw"/><raw_file filename="b.raw"/></root>`, "2 <raw_file> elements"},
		{`<root><raw_file filename="scan_x3_y2.raw"/><type>movie</type></root>`, `unknown <type> "movie"`},
		{`<root><raw_file filename="scan_x3_y2.raw"/><type>series</type></root>`, "without a <count>"},
		{`<root><raw_file filename="scan_x3_y2.raw"/><scan_parameters mode="acquire"><scan_resolution_x>3</scan_resolution_x></scan_parameters></root>`, "needs both a positive <scan_resolution_x> and <scan_resolution_y>"},
		{`<root><raw_file filename="scan_x3_y2.raw"/></root>`, "gives no scan size"},
		{`<!DOCTYPE root [<!ENTITY x SYSTEM "file:///etc/passwd">]><root><raw_file filename="scan_x3_y2.raw"/><pix_x>3</pix_x><pix_y>2</pix_y>&x;</root>`, "not a well-formed XML file"},
		{`<root><raw_file filename="missing.raw"/><pix_x>3</pix_x><pix_y>2</pix_y></root>`, `the raw file it names (<raw_file filename="missing.raw">) is not at`},
	}
	for _, c := range cases {
		p := filepath.Join(dir, "bad.xml")
		require.NoError(t, os.WriteFile(p, []byte(c.xml), 0o644))
		_, err := dataset.Open(p, dataset.Options{})
		require.ErrorContains(t, err, c.want, c.xml)
		require.Contains(t, err.Error(), p)
	}
	// Given a nav shape, an XML without a scan size opens.
	p := filepath.Join(dir, "bad.xml")
	require.NoError(t, os.WriteFile(p, []byte(`<root><raw_file filename="scan_x3_y2.raw"/></root>`), 0o644))
	ds := openEMPAD(t, p, dataset.Options{NavShape: []int{6}})
	require.Equal(t, []int{6}, ds.NavShape())
	// Raw-only options are refused.
	_, err := dataset.Open(p, dataset.Options{FrameFooter: 1024})
	require.ErrorContains(t, err, "empad files do not take")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
}
