package dm_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/dm"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// A DM file writer for the tests: the images of ImageList as GMS lays them out, encoded
// by frametest.EncodeDM.

// tag is a tag to write: a group or data.
type tag = frametest.DMTag

func group(name string, children ...tag) tag {
	return tag{Name: name, Tags: children, IsGroup: true}
}

// enc encodes numbers in the file's tag byte order.
type enc struct{ o binary.ByteOrder }

// simple is a data tag of a simple type: 3 int32, 5 uint32, 7 float64, 8 bool.
func (e enc) simple(name string, typ uint64, v float64) tag {
	b := make([]byte, 8)
	switch typ {
	case 3, 5:
		e.o.PutUint32(b, uint32(int64(v)))
		b = b[:4]
	case 7:
		e.o.PutUint64(b, math.Float64bits(v))
	case 8:
		b = []byte{byte(v)}
	}
	return tag{Name: name, Info: []uint64{typ}, Value: b}
}

// str is a string tag as GMS writes them: an array of uint16 characters.
func (e enc) str(name, s string) tag {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		e.o.PutUint16(b[2*i:], c)
	}
	return tag{Name: name, Info: []uint64{20, 4, uint64(len(u))}, Value: b}
}

// dmImage describes an ImageList entry.
type dmImage struct {
	dataType int
	elemType uint64  // encoded type of the Data array's elements
	dims     []int   // fastest first
	data     []byte  // in the tag byte order
	format   string  // Meta Data.Format, or ""
	swapped  *bool   // Meta Data.Data Order Swapped, or absent
	cals     []dmCal // Calibrations.Dimension, one per dimension, or none
	cameraMM float64 // Microscope Info.STEM Camera Length, or 0: absent
}

// dmCal is an entry of ImageData.Calibrations.Dimension.
type dmCal struct {
	scale, origin float64
	units         string
}

func (e enc) image(im dmImage) tag {
	var dims []tag
	for _, d := range im.dims {
		dims = append(dims, e.simple("", 5, float64(d)))
	}
	es := map[uint64]int{2: 2, 3: 4, 4: 2, 5: 4, 6: 4, 7: 8, 9: 1, 10: 1}[im.elemType]
	var meta []tag
	if im.format != "" {
		meta = append(meta, e.str("Format", im.format))
	}
	if im.swapped != nil {
		v := 0.0
		if *im.swapped {
			v = 1
		}
		meta = append(meta, e.simple("Data Order Swapped", 8, v))
	}
	calibrations := []tag{e.simple("DisplayCalibratedUnits", 8, 1)}
	if im.cals != nil {
		var entries []tag
		for _, c := range im.cals {
			entries = append(entries, group("", e.simple("Origin", 7, c.origin), e.simple("Scale", 7, c.scale), e.str("Units", c.units)))
		}
		calibrations = append(calibrations, group("Dimension", entries...))
	}
	tags := []tag{group("Meta Data", meta...)}
	if im.cameraMM != 0 {
		tags = append(tags, group("Microscope Info", e.simple("STEM Camera Length", 7, im.cameraMM)))
	}
	return group("",
		group("ImageData",
			group("Calibrations", calibrations...),
			tag{Name: "Data", Info: []uint64{20, im.elemType, uint64(len(im.data) / es)}, Value: im.data},
			e.simple("DataType", 3, float64(im.dataType)),
			group("Dimensions", dims...),
			e.simple("PixelDepth", 5, float64(es))),
		group("ImageTags", tags...),
		e.str("Name", "test"))
}

// writeDM writes a DM file of the version (3 or 4) with the tag byte order, holding a
// 16×16 RGBA thumbnail (ImageList 0, listed under Thumbnails) and the images.
func writeDM(t testing.TB, path string, version int, little bool, images ...dmImage) {
	t.Helper()
	e := enc{binary.BigEndian}
	if little {
		e.o = binary.LittleEndian
	}
	list := []tag{e.image(dmImage{dataType: 23, elemType: 3, dims: []int{16, 16}, data: make([]byte, 16*16*4)})}
	for _, im := range images {
		list = append(list, e.image(im))
	}
	root := []tag{
		group("ApplicationBounds", e.simple("", 3, 0)),
		group("ImageList", list...),
		e.simple("InImageMode", 8, 1),
		group("Thumbnails", group("", e.simple("ImageIndex", 5, 0))),
	}
	require.NoError(t, os.WriteFile(path, frametest.EncodeDM(version, little, root), 0o644))
}

// pixel is the test's value of pixel p of frame i.
func pixel(i, p int) float64 { return float64((i*37+p*11)%1000) - 300 }

// encodePixels encodes the frames (n frames of npix pixels) as dtype dt in byte order o,
// in C order (frame by frame) or transposed (pixel by pixel).
func encodePixels(n, npix int, dt dataset.DType, o binary.ByteOrder, transposed bool) []byte {
	es := dt.Size()
	b := make([]byte, n*npix*es)
	for i := range n {
		for p := range npix {
			at := (i*npix + p) * es
			if transposed {
				at = (p*n + i) * es
			}
			v := pixel(i, p)
			switch dt {
			case dataset.Int16:
				o.PutUint16(b[at:], uint16(int16(v)))
			case dataset.Float32:
				o.PutUint32(b[at:], math.Float32bits(float32(v)))
			case dataset.Int32:
				o.PutUint32(b[at:], uint32(int32(v)))
			case dataset.Float64:
				o.PutUint64(b[at:], math.Float64bits(v))
			}
		}
	}
	return b
}

// checkFrames reads every frame of d and compares it with pixel(frame0+i, p).
func checkFrames(t *testing.T, d dataset.Dataset, frame0 int) {
	t.Helper()
	n, fb := d.NumFrames(), d.FrameBytes()
	buf := make([]byte, n*fb)
	require.NoError(t, d.ReadFrames(0, n, buf))
	es := d.DType().Size()
	npix := fb / es
	o := binary.NativeEndian
	for i := range n {
		for p := range npix {
			b := buf[(i*npix+p)*es:]
			var got float64
			switch d.DType() {
			case dataset.Int16:
				got = float64(int16(o.Uint16(b)))
			case dataset.Float32:
				got = float64(math.Float32frombits(o.Uint32(b)))
			case dataset.Int32:
				got = float64(int32(o.Uint32(b)))
			case dataset.Float64:
				got = math.Float64frombits(o.Uint64(b))
			}
			if got != pixel(frame0+i, p) {
				t.Fatalf("frame %d pixel %d: %v, want %v", i, p, got, pixel(frame0+i, p))
			}
		}
	}
}

var dmTypes = []struct {
	dt       dataset.DType
	code     int
	elemType uint64
}{{dataset.Int16, 1, 2}, {dataset.Float32, 2, 6}, {dataset.Int32, 7, 3}, {dataset.Float64, 12, 7}}

// Every version and byte order: a 3-D series of 3 frames of 4×5 pixels (Dimensions 5, 4,
// 3), beside a larger thumbnail that must not be taken for the data.
func TestSeries(t *testing.T) {
	dir := t.TempDir()
	for _, version := range []int{3, 4} {
		for _, little := range []bool{true, false} {
			for _, ty := range dmTypes {
				o := binary.ByteOrder(binary.BigEndian)
				if little {
					o = binary.LittleEndian
				}
				path := filepath.Join(dir, "series.dm"+string(rune('0'+version)))
				writeDM(t, path, version, little, dmImage{dataType: ty.code, elemType: ty.elemType, dims: []int{5, 4, 3},
					data: encodePixels(3, 20, ty.dt, o, false), format: "Image"})
				d, err := dataset.Open(path, dataset.Options{})
				require.NoError(t, err, "DM%d little=%v %s", version, little, ty.dt)
				assert.Equal(t, "dm", d.Format())
				assert.Equal(t, []int{3}, d.NavShape())
				assert.Equal(t, [2]int{4, 5}, d.SigShape())
				assert.Equal(t, ty.dt, d.DType())
				assert.False(t, dataset.NavShapeGuessed(d))
				checkFrames(t, d, 0)
				require.NoError(t, d.Close())

				// A series states no scan shape: any nav shape of its frames, and a sync offset.
				d, err = dataset.Open(path, dataset.Options{NavShape: []int{1, 3}})
				require.NoError(t, err)
				assert.Equal(t, []int{1, 3}, d.NavShape())
				require.NoError(t, d.Close())
				d, err = dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_c_order": "true"}})
				require.NoError(t, err)
				assert.Equal(t, []string{"option dm_c_order applies to 4-D and 5-D images only and was ignored: image 1 has 3 dimensions"}, dataset.Notes(d))
				checkFrames(t, d, 0)
				require.NoError(t, d.Close())
				// The nav shape is kept (LiberTEM's sync_offset): the last position has no frame.
				d, err = dataset.Open(path, dataset.Options{SyncOffset: 1})
				require.NoError(t, err)
				assert.Equal(t, []int{3}, d.NavShape())
				assert.Equal(t, []dataset.FrameSpan{{First: 2, Count: 1}}, dataset.Blanks(d))
				checkFrames(t, dataset.RealFrames(d), 1)
				require.NoError(t, d.Close())
			}
		}
	}
}

// 4-D images: C order (Data Order Swapped 1) and transposed (the tag 0 or absent), both
// byte orders, a scan of 2×3 positions of 4×5 pixels.
func Test4D(t *testing.T) {
	dir := t.TempDir()
	yes, no := true, false
	for _, little := range []bool{true, false} {
		o := binary.ByteOrder(binary.BigEndian)
		if little {
			o = binary.LittleEndian
		}
		for _, c := range []struct {
			name       string
			swapped    *bool
			transposed bool
		}{{"c-order", &yes, false}, {"transposed-tag-0", &no, true}, {"transposed-no-tag", nil, true}} {
			dims := []int{5, 4, 3, 2} // C order: sig_x, sig_y, scan_x, scan_y
			if c.transposed {
				dims = []int{3, 2, 5, 4} // scan_x, scan_y, sig_x, sig_y
			}
			path := filepath.Join(dir, c.name+".dm4")
			writeDM(t, path, 4, little, dmImage{dataType: 2, elemType: 6, dims: dims,
				data: encodePixels(6, 20, dataset.Float32, o, c.transposed), format: "Diffraction image", swapped: c.swapped})
			d, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err, c.name)
			assert.Equal(t, []int{2, 3}, d.NavShape(), c.name)
			assert.Equal(t, [2]int{4, 5}, d.SigShape(), c.name)
			checkFrames(t, d, 0)
			if c.transposed {
				assert.Contains(t, dataset.Notes(d)[0], "stored transposed", c.name)
			}
			require.NoError(t, d.Close())

			// Part of the scan (a frame range) reads the right frames.
			d, err = dataset.Open(path, dataset.Options{Frames: dataset.FrameSpan{First: 2, Count: 3}})
			require.NoError(t, err)
			checkFrames(t, d, 2)
			require.NoError(t, d.Close())

			// The scan shape is the file's: a nav shape of other positions contradicts it.
			_, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 2}})
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.Shape)
		}
	}
	// Option dm_c_order reads a transposed image as C order: (d3, d2) scan positions.
	path := filepath.Join(dir, "forced.dm4")
	writeDM(t, path, 4, true, dmImage{dataType: 2, elemType: 6, dims: []int{3, 2, 5, 4},
		data: encodePixels(6, 20, dataset.Float32, binary.LittleEndian, true)})
	d, err := dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_c_order": "true"}})
	require.NoError(t, err)
	assert.Equal(t, []int{4, 5}, d.NavShape())
	assert.Equal(t, [2]int{2, 3}, d.SigShape())
	assert.Contains(t, dataset.Notes(d), "option dm_c_order: the 4-D image is read as stored in C order (scan_y, scan_x, sig_y, sig_x)")
	require.NoError(t, d.Close())
	_, err = dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_c_order": "maybe"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.Argument)
	assert.Contains(t, err.Error(), "option dm_c_order")
}

// A 5-D image in C order (tagged, or option dm_c_order) is a scan of planes, nav shape
// (d4, d3, d2), as LiberTEM reads it; one not marked C order is refused naming
// dm_c_order, as LiberTEM refuses it (#33).
func Test5D(t *testing.T) {
	dir := t.TempDir()
	yes := true
	dims := []int{5, 4, 3, 1, 2} // sig_x, sig_y, scan_x, scan_y, scan_z
	for _, c := range []struct {
		name    string
		swapped *bool
		opt     map[string]string
		note    string
	}{
		{"tagged", &yes, nil, ""},
		{"forced", nil, map[string]string{"dm_c_order": "true"}, "option dm_c_order: the 5-D image is read as stored in C order (scan_z, scan_y, scan_x, sig_y, sig_x)"},
	} {
		path := filepath.Join(dir, c.name+".dm4")
		writeDM(t, path, 4, false, dmImage{dataType: 2, elemType: 6, dims: dims,
			data: encodePixels(6, 20, dataset.Float32, binary.BigEndian, false), format: "Diffraction image", swapped: c.swapped})
		d, err := dataset.Open(path, dataset.Options{FormatOptions: c.opt})
		require.NoError(t, err, c.name)
		assert.Equal(t, []int{2, 1, 3}, d.NavShape(), c.name)
		assert.Equal(t, [2]int{4, 5}, d.SigShape(), c.name)
		checkFrames(t, d, 0)
		if c.note != "" {
			assert.Contains(t, dataset.Notes(d), c.note)
		}
		require.NoError(t, d.Close())
	}
	path := filepath.Join(dir, "untagged.dm4")
	writeDM(t, path, 4, true, dmImage{dataType: 2, elemType: 6, dims: dims, data: encodePixels(6, 20, dataset.Float32, binary.LittleEndian, false)})
	_, err := dataset.Open(path, dataset.Options{})
	assert.ErrorIs(t, err, errs.Format)
	assert.ErrorContains(t, err, "image 1 has 5 dimensions [5 4 3 1 2] and is not marked C order (its tag Meta Data.Data Order Swapped is 0 or absent): stemdot reads a 5-D image stored in C order, (scan_z, scan_y, scan_x, sig_y, sig_x), as LiberTEM does; give option dm_c_order if it is")
}

// A file that shrinks after it was opened: the read fails (errs.IO), it does not return
// zeros; C-ordered (in place, and byte-swapped) and transposed.
func TestShrinks(t *testing.T) {
	yes := true
	for _, c := range []struct {
		name       string
		little     bool
		transposed bool
	}{{"c-order", true, false}, {"c-order-big-endian", false, false}, {"transposed", true, true}} {
		o := binary.ByteOrder(binary.BigEndian)
		if c.little {
			o = binary.LittleEndian
		}
		im := dmImage{dataType: 2, elemType: 6, dims: []int{5, 4, 3, 2}, data: encodePixels(6, 20, dataset.Float32, o, false), swapped: &yes}
		if c.transposed {
			im = dmImage{dataType: 2, elemType: 6, dims: []int{3, 2, 5, 4}, data: encodePixels(6, 20, dataset.Float32, o, true)}
		}
		path := filepath.Join(t.TempDir(), "x.dm4")
		writeDM(t, path, 4, c.little, im)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, st.Size()/2))
		err = d.ReadFrames(0, 6, make([]byte, 6*d.FrameBytes()))
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, errs.IO, c.name)
		require.NoError(t, d.Close())
	}
}

// A 2-D image is one frame; two images besides the thumbnail: the largest, with a note.
func TestImages(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "one.dm3")
	writeDM(t, path, 3, true, dmImage{dataType: 1, elemType: 2, dims: []int{5, 4}, data: encodePixels(1, 20, dataset.Int16, binary.LittleEndian, false)})
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{1}, d.NavShape())
	assert.Equal(t, [2]int{4, 5}, d.SigShape())
	checkFrames(t, d, 0)
	require.NoError(t, d.Close())

	path = filepath.Join(dir, "two.dm3")
	writeDM(t, path, 3, true,
		dmImage{dataType: 1, elemType: 2, dims: []int{5, 4}, data: encodePixels(1, 20, dataset.Int16, binary.LittleEndian, false)},
		dmImage{dataType: 1, elemType: 2, dims: []int{5, 4, 2}, data: encodePixels(2, 20, dataset.Int16, binary.LittleEndian, false)})
	d, err = dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{2}, d.NavShape())
	assert.Equal(t, []string{"the file holds 2 images besides thumbnails: image 2 (Dimensions [5 4 2]) is read (of the images with frames, the one of the most dimensions, then the largest); option dm_image N reads image 1 (Dimensions [5 4]) instead"}, dataset.Notes(d))
	checkFrames(t, d, 0)
	require.NoError(t, d.Close())

	// Option dm_image reads another image; one that is not there, or holds no frames, is
	// refused naming the option.
	d, err = dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_image": "1"}})
	require.NoError(t, err)
	assert.Equal(t, []int{1}, d.NavShape())
	assert.Empty(t, dataset.Notes(d))
	checkFrames(t, d, 0)
	require.NoError(t, d.Close())
	for _, c := range []struct{ value, want string }{
		{"3", "option dm_image 3: the file's ImageList holds images 0 to 2"},
		{"0", "image 0 has DM data type 23 (RGBA uint8)"},
		{"x", `option dm_image "x" is not an image index`},
	} {
		_, err = dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_image": c.value}})
		require.Error(t, err, c.value)
		assert.Contains(t, err.Error(), c.want, c.value)
	}
}

// Images that hold no frames stemdot reads are refused, naming the reason.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		im   dmImage
		kind errs.Kind
		want string
	}{
		{"rgb", dmImage{dataType: 23, elemType: 3, dims: []int{5, 4, 2}, data: make([]byte, 160)}, errs.DType, "DM data type 23 (RGBA uint8)"},
		{"complex", dmImage{dataType: 3, elemType: 6, dims: []int{5, 4, 2}, data: make([]byte, 320)}, errs.DType, "DM data type 3 (complex64)"},
		{"bool", dmImage{dataType: 14, elemType: 10, dims: []int{5, 4, 2}, data: make([]byte, 40)}, errs.DType, "binary (bool)"},
		{"spectrum-image", dmImage{dataType: 2, elemType: 6, dims: []int{2, 3, 100}, data: make([]byte, 2400), format: "Spectrum image"}, errs.Format, "holds spectra, not frames"},
		{"spectrum", dmImage{dataType: 2, elemType: 6, dims: []int{100}, data: make([]byte, 400)}, errs.Format, "holds spectra, not frames"},
		{"6-d", dmImage{dataType: 1, elemType: 2, dims: []int{2, 2, 2, 2, 2, 2}, data: make([]byte, 128)}, errs.Format, "6 dimensions [2 2 2 2 2 2]: stemdot reads images of 2 to 5 dimensions"},
		{"size", dmImage{dataType: 1, elemType: 2, dims: []int{5, 4, 3}, data: encodePixels(2, 20, dataset.Int16, le, false)}, errs.Format, "Dimensions [5 4 3] of int16 pixels do not make the 40 elements of 2 bytes its Data tag holds"},
		{"huge-dims", dmImage{dataType: 1, elemType: 2, dims: []int{1 << 30, 1 << 30, 1 << 30, 1 << 30}, data: make([]byte, 40)}, errs.Format, "do not make the 20 elements"},
		{"zero-dim", dmImage{dataType: 1, elemType: 2, dims: []int{5, 0, 3}, data: make([]byte, 40)}, errs.Format, `tag "ImageList.1.ImageData.Dimensions.1" is 0`},
	} {
		path := filepath.Join(dir, c.name+".dm4")
		writeDM(t, path, 4, true, c.im)
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, c.kind, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		assert.Contains(t, err.Error(), path, c.name)
	}
}

// Every cut of a DM file is refused as cut short (errs.Format), never a panic.
func TestCut(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.dm3")
	writeDM(t, full, 3, false, dmImage{dataType: 1, elemType: 2, dims: []int{5, 4, 2}, data: encodePixels(2, 20, dataset.Int16, binary.BigEndian, false)})
	b, err := os.ReadFile(full)
	require.NoError(t, err)
	path := filepath.Join(dir, "cut.dm3")
	for n := range len(b) - 8 { // the last 8 bytes are padding after the tag tree
		require.NoError(t, os.WriteFile(path, b[:n], 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err, "cut at %d", n)
		assert.ErrorIs(t, err, errs.Format, "cut at %d", n)
	}
	require.NoError(t, os.WriteFile(path, b[:100], 0o644))
	_, err = dataset.Open(path, dataset.Options{})
	assert.ErrorContains(t, err, "ends inside tag ")
}

// The real DM3 and DM4 files (RosettaSciIO's digitalmicrograph/3D/test-1): a 2×2×2 int16
// stack with a 64×64 RGBA thumbnail. The values, read by hand at the Data tags' offsets
// (DM3 byte 20973, DM4 byte 23117, little-endian), are 1 to 8.
func TestRealFiles(t *testing.T) {
	for _, name := range []string{"dm/test-1.dm3", "dm/test-1.dm4"} {
		path := testfiles.File(t, name)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, name)
		assert.Equal(t, "dm", d.Format())
		assert.Equal(t, []int{2}, d.NavShape())
		assert.Equal(t, [2]int{2, 2}, d.SigShape())
		assert.Equal(t, dataset.Int16, d.DType())
		assert.Empty(t, dataset.Notes(d))
		buf := make([]byte, 2*d.FrameBytes())
		require.NoError(t, d.ReadFrames(0, 2, buf))
		var got []int16
		for i := 0; i < len(buf); i += 2 {
			got = append(got, int16(binary.NativeEndian.Uint16(buf[i:])))
		}
		assert.Equal(t, []int16{1, 2, 3, 4, 5, 6, 7, 8}, got, name)
		require.NoError(t, d.Close())
	}
}

// BenchmarkTransposed reads a transposed 4-D image of 32×32 positions of 128×128 uint16
// pixels in tiles of 64 frames.
func BenchmarkTransposed(b *testing.B) {
	path := filepath.Join(b.TempDir(), "t.dm4")
	const n, npix = 32 * 32, 128 * 128
	writeDM(b, path, 4, true, dmImage{dataType: 10, elemType: 4, dims: []int{32, 32, 128, 128}, data: make([]byte, n*npix*2)})
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(b, err)
	defer d.Close()
	buf := make([]byte, 64*d.FrameBytes())
	b.SetBytes(int64(n * d.FrameBytes()))
	for b.Loop() {
		for s := 0; s < n; s += 64 {
			if err := d.ReadFrames(s, s+64, buf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// A 4-D scan beside a larger 2-D survey image (issue #33) is read, not the survey: of the
// images with frames, the one of the most dimensions; a note names the others and option
// dm_image, which reads the survey. With two 4-D images, the larger of them.
func TestSurveyBeside4D(t *testing.T) {
	le := binary.LittleEndian
	yes := true
	survey := dmImage{dataType: 2, elemType: 6, dims: []int{64, 64}, data: make([]byte, 64*64*4), format: "Image"}
	scan := dmImage{dataType: 2, elemType: 6, dims: []int{5, 4, 3, 2}, data: encodePixels(6, 20, dataset.Float32, le, false), swapped: &yes}
	path := filepath.Join(t.TempDir(), "survey.dm4")
	writeDM(t, path, 4, true, survey, scan)
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, d.NavShape())
	assert.Equal(t, [2]int{4, 5}, d.SigShape())
	checkFrames(t, d, 0)
	assert.Equal(t, []string{"the file holds 2 images besides thumbnails: image 2 (Dimensions [5 4 3 2]) is read (of the images with frames, the one of the most dimensions, then the largest); option dm_image N reads image 1 (Dimensions [64 64]) instead"}, dataset.Notes(d))
	require.NoError(t, d.Close())

	d, err = dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"dm_image": "1"}})
	require.NoError(t, err)
	assert.Equal(t, []int{1}, d.NavShape())
	assert.Equal(t, [2]int{64, 64}, d.SigShape())
	require.NoError(t, d.Close())

	// Two 4-D candidates and a spectrum image (no frames, however large): the larger scan.
	small := dmImage{dataType: 2, elemType: 6, dims: []int{5, 4, 1, 2}, data: encodePixels(2, 20, dataset.Float32, le, false), swapped: &yes}
	spectra := dmImage{dataType: 2, elemType: 6, dims: []int{1000, 2, 2}, data: make([]byte, 16000), format: "Spectrum image"}
	writeDM(t, path, 4, true, small, survey, spectra, scan)
	d, err = dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, d.NavShape())
	checkFrames(t, d, 0)
	assert.Equal(t, []string{"the file holds 4 images besides thumbnails: image 4 (Dimensions [5 4 3 2]) is read (of the images with frames, the one of the most dimensions, then the largest); option dm_image N reads image 1 (Dimensions [5 4 1 2]), 2 (Dimensions [64 64]), 3 (Dimensions [1000 2 2]) instead"}, dataset.Notes(d))
	require.NoError(t, d.Close())
}

// withEmptyGroups inserts n empty groups (tags without a name) into the group named
// group of the DM file b of the version, as its last tags; next is the name of the tag
// after that group.
func withEmptyGroups(b []byte, version int, group, next string, n int) []byte {
	be := binary.BigEndian
	at := bytes.Index(b, []byte(group)) + len(group) + 2 // the group's tag count (after sorted, open)
	end := bytes.Index(b, []byte(next)) - 3              // the next tag's kind and name length
	empty := []byte{20, 0, 0, 1, 0, 0, 0, 0, 0}          // DM3: kind, name length 0, sorted, open, 0 tags
	if version == 4 {
		at += 8 // the tag's size
		empty = append([]byte{20, 0, 0}, make([]byte, 8+2+8)...)
		be.PutUint64(empty[3:], 10)
		empty[11] = 1
		be.PutUint64(b[at:], be.Uint64(b[at:])+uint64(n))
	} else {
		be.PutUint32(b[at:], be.Uint32(b[at:])+uint32(n))
	}
	out := append([]byte(nil), b[:end]...)
	out = append(out, bytes.Repeat(empty, n)...)
	return append(out, b[end:]...)
}

// A file of a million empty tag groups in its ImageList (issue #33: 5 million, a 45 MB
// DM3, took 782 MB as a tag tree) opens allocating a small part of its size: the tags are
// not kept, only what the images' tags say.
func TestManyEmptyGroups(t *testing.T) {
	dir := t.TempDir()
	for _, version := range []int{3, 4} {
		path := filepath.Join(dir, fmt.Sprintf("empty.dm%d", version))
		writeDM(t, path, version, true, dmImage{dataType: 1, elemType: 2, dims: []int{5, 4, 3}, data: encodePixels(3, 20, dataset.Int16, binary.LittleEndian, false)})
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		b = withEmptyGroups(b, version, "ImageList", "InImageMode", 1_000_000)
		require.NoError(t, os.WriteFile(path, b, 0o644))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		d, err := dataset.Open(path, dataset.Options{})
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		// TotalAlloc, every byte allocated, bounds the peak heap of the open: 69 KB of a
		// 9 MB DM3 or 21 MB DM4 (349 MB before).
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "DM%d: bytes allocated opening a file of %d bytes", version, len(b))
		assert.Equal(t, []int{3}, d.NavShape())
		checkFrames(t, d, 0)
		require.NoError(t, d.Close())
	}
}

// Tag names reach messages quoted: a name holding a terminal's escape sequences is not
// printed raw.
func TestTagNamesQuoted(t *testing.T) {
	e := enc{binary.LittleEndian}
	b := frametest.EncodeDM(4, true, []tag{
		group("\x1b]0;title\a\x1b[2J", tag{Name: "\x1b[31mred", Info: []uint64{99}, Value: make([]byte, 4)}),
		group("ImageList", e.image(dmImage{dataType: 1, elemType: 2, dims: []int{5, 4}, data: make([]byte, 40)})),
	})
	path := filepath.Join(t.TempDir(), "escape.dm4")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), `tag "\x1b]0;title\a\x1b[2J.\x1b[31mred"`)
	assert.NotContains(t, err.Error(), "\x1b")

	b = frametest.EncodeDM(3, true, []tag{group("ImageList", group("", group("ImageData",
		tag{Name: "Data", Info: []uint64{20, 2, 20}, Value: make([]byte, 40)},
		e.simple("DataType", 3, 1),
		group("Dimensions", e.simple("", 3, 5), e.simple("\x1b[8m", 3, 0)))))})
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = dataset.Open(path, dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), `tag "ImageList.0.ImageData.Dimensions.\x1b[8m" is 0`)
	assert.NotContains(t, err.Error(), "\x1b")
}

// TestCalibration reads ImageData.Calibrations.Dimension and the STEM camera length of a
// 4-D scan in C order and of a transposed one, each dimension's entry mapped to its axis,
// against the values written and RosettaSciIO's reading of the same file (when
// installed).
func TestCalibration(t *testing.T) {
	dir := t.TempDir()
	yes := true
	// Dimensions fastest first; the entries give each its own scale, origin and units.
	cals := []dmCal{{0.25, 10, "1/nm"}, {0.5, 2, "1/nm"}, {1.5, 0, "µm"}, {3, -1, "µm"}}
	for _, c := range []struct {
		name    string
		swapped *bool
		dims    []int
		nav     []dataset.Axis // expected, numpy order
		sig     []dataset.Axis
	}{
		{"c-order", &yes, []int{5, 4, 3, 2},
			[]dataset.Axis{{Name: "y", Scale: 3, Offset: 3, Units: "µm"}, {Name: "x", Scale: 1.5, Units: "µm"}},
			[]dataset.Axis{{Name: "ky", Scale: 0.5, Offset: -1, Units: "1/nm"}, {Name: "kx", Scale: 0.25, Offset: -2.5, Units: "1/nm"}}},
		{"transposed", nil, []int{3, 2, 5, 4},
			[]dataset.Axis{{Name: "y", Scale: 0.5, Offset: -1, Units: "1/nm"}, {Name: "x", Scale: 0.25, Offset: -2.5, Units: "1/nm"}},
			[]dataset.Axis{{Name: "ky", Scale: 3, Offset: 3, Units: "µm"}, {Name: "kx", Scale: 1.5, Units: "µm"}}},
	} {
		path := filepath.Join(dir, c.name+".dm4")
		writeDM(t, path, 4, true, dmImage{dataType: 2, elemType: 6, dims: c.dims,
			data: encodePixels(6, 20, dataset.Float32, binary.LittleEndian, c.swapped == nil), format: "Diffraction image", swapped: c.swapped,
			cals: cals, cameraMM: 120})
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, c.name)
		cal := dataset.CalibrationOf(d)
		assert.Equal(t, c.nav, cal.Nav, c.name)
		assert.Equal(t, c.sig, cal.Sig, c.name)
		assert.InDelta(t, 0.12, cal.CameraLength, 1e-12, c.name)
		require.NoError(t, d.Close())

		// A user's nav shape other than the file's drops the nav axes; the signal axes stay.
		d, err = dataset.Open(path, dataset.Options{NavShape: []int{6}})
		require.NoError(t, err, c.name)
		cal = dataset.CalibrationOf(d)
		assert.Nil(t, cal.Nav, c.name)
		assert.Equal(t, c.sig, cal.Sig, c.name)
		require.NoError(t, d.Close())
	}

	// RosettaSciIO reads the C-ordered file's axes (numpy order) the same way.
	py := testfiles.Python(t, "rsciio.digitalmicrograph")
	out, err := exec.Command(py, "-c", `import sys, json
from rsciio.digitalmicrograph import file_reader
r = file_reader(sys.argv[1])[0]
print(json.dumps([[a["scale"], a["offset"], a["units"]] for a in r["axes"]]))`, filepath.Join(dir, "c-order.dm4")).Output()
	require.NoError(t, err)
	var axes [][3]any
	require.NoError(t, json.Unmarshal(out, &axes))
	want := []dataset.Axis{{Scale: 3, Offset: 3, Units: "µm"}, {Scale: 1.5, Units: "µm"}, {Scale: 0.5, Offset: -1, Units: "1/nm"}, {Scale: 0.25, Offset: -2.5, Units: "1/nm"}}
	require.Len(t, axes, 4)
	for i, a := range axes {
		assert.InDelta(t, want[i].Scale, a[0], 1e-12, "axis %d", i)
		assert.InDelta(t, want[i].Offset, a[1], 1e-12, "axis %d", i)
		assert.Equal(t, want[i].Units, a[2], "axis %d", i)
	}
}
