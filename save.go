package stemdot

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/atomicfile"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/npy"
)

// Outputs are the files Save writes for a result; empty fields are not written.
type Outputs struct {
	// NPY is the result file, NPY of shape nav_shape + (n_masks,), float32 or float64.
	// It must end in .npy, after a file name. Its JSON sidecar (SidecarPath: RESULT.json
	// beside RESULT.npy) is written with it: the result's ResultInfo, which names the
	// columns.
	NPY string
	// PNGPrefix, when set, adds one 8-bit greyscale PNG per mask, PREFIX_<m>_<name>.png
	// (PREFIX a path whose last element is a file name prefix, not a directory):
	// the image of shape (nav_y, nav_x) (a 1-D nav shape as one row; a scan of planes is
	// refused, see CheckNavShape), its values mapped linearly from the finite minimum
	// (black) to the maximum (white), NaN black. Small
	// images are scaled up by a whole factor, each scan position a square block of
	// pixels (nearest neighbour), until the short side has at least 256 pixels, as long
	// as the long side stays within 4096; never down. With COMShifts, the com set the
	// shifts come from is shown as the shift maps, PREFIX_com_shift_y.png and
	// PREFIX_com_shift_x.png, instead of its three raw images (sum and moments).
	PNGPrefix string
	// COMShifts, when set, adds the centre-of-mass shift maps (see COMShifts) as NPY of
	// shape nav_shape + (2,), float64: [..., 0] the y shift, [..., 1] the x shift, in
	// pixels. It must end in .npy, after a file name, and the masks must include a com
	// spec.
	COMShifts string
	// Mean, Max and Std are the outputs of a reduction (SaveReduction), beside NPY, which
	// holds the sum frame there: NPY files of the mean, maximum and standard-deviation
	// frames, shape (sig_y, sig_x), float64. Mask applies (Save) refuse them.
	Mean, Max, Std string
	// Positions, when set, adds the scan positions of an ROI's result (Result.Positions)
	// as NPY of shape (n_selected,), int64: flat indices in C order over the scan's nav
	// shape (numpy.unravel_index(positions, nav_shape) gives the rows and columns); with
	// ApplyOptions.ROICompact, row i of the result is position positions[i]. It must end
	// in .npy, after a file name, and the result must be of an ROI (Options.ROI).
	Positions string
	// HDF5, when set, adds the result as an HDF5 file in HyperSpy's HSPY layout
	// (saveh5.go: the images, the masks' names and specs, the calibration, the
	// provenance), instead of or beside NPY. It must end in .h5, .hdf5 or .hspy, after a
	// file name; a stemdot built without HDF5 refuses it (errs.Argument).
	HDF5 string
	// Command is the command line that computed the result, recorded in the HDF5 file's
	// provenance ("" when not known).
	Command string
}

// Check reports, before any work, why the outputs for masks named names cannot be
// written: an NPY path not ending in .npy or whose file name is only the extension
// (".npy"), a PNG prefix that names a directory (errs.Argument), or a path that
// atomicfile.Check refuses (errs.IO: missing directory, not a writable regular file,
// one of inputs).
// Errors name the field (Outputs.NPY, Outputs.PNGPrefix, Outputs.COMShifts).
func (o Outputs) Check(names []string, inputs ...string) (err error) {
	defer goErrs(&err)
	if err := o.checkPNGPrefix(); err != nil {
		return err
	}
	for _, f := range []output{{"mean", o.Mean, true}, {"max", o.Max, true}, {"std", o.Std, true}} {
		if f.path != "" {
			return errs.New(errs.Argument, "option %s is an output of reductions (stemdot sum, SaveReduction), not of mask applies: leave it out", f.option)
		}
	}
	if _, ok := hdf5.Library(); o.HDF5 != "" && !ok {
		_, err := hdf5.ResultImage(hdf5.ResultFile{}) // the error of a build without HDF5
		return err
	}
	if o.COMShifts != "" {
		if _, ok := frontend.FindCOM(names); !ok {
			return errs.New(errs.Argument, "option com_shifts: the masks hold no centre-of-mass set (com_sum, com_y, com_x): add the mask spec com")
		}
	}
	return checkFiles(o.files(names), inputs)
}

// CheckNavShape reports why the outputs cannot be written for a result of nav shape nav
// (Result.NavShape): PNG images are drawn of 1-D and 2-D scans only, a scan of planes
// (nav_z, nav_y, nav_x) is errs.Shape naming the option nav_shape that reads it as a
// 2-D one (see Check for the other reasons, known before the nav shape).
func (o Outputs) CheckNavShape(nav []int) error { return goErr(o.checkNavShape(nav)) }

func (o Outputs) checkNavShape(nav []int) error {
	if o.PNGPrefix == "" {
		return nil
	}
	return needs2D(nav, "option png: PNG images are")
}

// needs2D refuses a nav shape of more than 2 axes for what (frontend.CheckScan2D).
func needs2D(nav []int, what string) error {
	if len(nav) <= 2 {
		return nil
	}
	var sizes []string // of the 2-D nav shape
	for _, n := range nav {
		if n != 1 {
			sizes = append(sizes, strconv.Itoa(n))
		}
	}
	how := "without its axes of size 1"
	switch {
	case len(sizes) == 0: // (1, 1, 1)
		sizes = []string{"1"}
	case len(sizes) > 2:
		sizes = []string{strconv.Itoa(product(nav[:len(nav)-1])), strconv.Itoa(nav[len(nav)-1])}
		how = fmt.Sprintf("its %d planes one below the other", product(nav[:len(nav)-2]))
	}
	return errs.New(errs.Shape, "%s of 1-D and 2-D scans, not of nav shape %s: give option nav_shape %s to read the scan as a 2-D one, %s",
		what, npy.ShapeString(nav), strings.Join(sizes, ","), how)
}

// checkPNGPrefix refuses a PNG prefix that names a directory.
func (o Outputs) checkPNGPrefix() error {
	if o.PNGPrefix != "" {
		if base := filepath.Base(o.PNGPrefix); strings.HasSuffix(o.PNGPrefix, "/") || base == "." || base == ".." {
			return errs.New(errs.Argument, "option png %s names a directory, not a file name prefix: give one, e.g. %s", o.PNGPrefix, filepath.Join(o.PNGPrefix, "img"))
		}
	}
	return nil
}

// checkFiles refuses outputs that are the same file, NPY paths not ending in .npy or
// named only by the extension, and paths atomicfile.Check refuses (one of inputs, or an
// earlier output).
func checkFiles(files []output, inputs []string) error {
	for i, f := range files {
		for _, g := range files[:i] {
			if samePath(f.path, g.path) {
				return errs.New(errs.Argument, "option %s %s and option %s %s are the same file: give each output its own path", g.option, g.path, f.option, f.path)
			}
		}
		if f.option == "hdf5" {
			if ext := strings.ToLower(pathExt(f.path)); ext != ".h5" && ext != ".hdf5" && ext != ".hspy" || strings.EqualFold(filepath.Base(f.path), ext) {
				return errs.New(errs.Argument, "option hdf5 %s: give a path ending in .h5, .hdf5 or .hspy, after a file name", f.path)
			}
		}
		if f.npy && !strings.EqualFold(pathExt(f.path), ".npy") {
			return errs.New(errs.Argument, "option %s %s: results are written as NPY: give a path ending in .npy", f.option, f.path)
		}
		if f.npy && strings.EqualFold(filepath.Base(f.path), ".npy") {
			example := map[string]string{"out": "result.npy", "com_shifts": "shifts.npy", "roi_compact": "result_positions.npy"}[f.option]
			if example == "" {
				example = f.option + ".npy"
			}
			return errs.New(errs.Argument, "option %s %s: the file name is only the extension (a hidden file named %s): give a name, e.g. %s",
				f.option, f.path, filepath.Base(f.path), filepath.Join(filepath.Dir(f.path), example))
		}
		if err := atomicfile.Check(f.path, inputs...); err != nil {
			return errs.Wrap(errs.IO, fmt.Errorf("option %s: %w", f.option, err))
		}
		inputs = append(inputs, f.path)
	}
	return nil
}

type output struct {
	option, path string
	npy          bool
}

// files lists the outputs' paths in writing order, the NPY result and its sidecar last.
func (o Outputs) files(names []string) []output {
	var out []output
	if o.PNGPrefix != "" {
		for _, m := range o.pngMasks(names) {
			out = append(out, output{"png", pngName(o.PNGPrefix, m, names[m]), false})
		}
		if o.COMShifts != "" {
			out = append(out, output{"png", o.PNGPrefix + "_com_shift_y.png", false}, output{"png", o.PNGPrefix + "_com_shift_x.png", false})
		}
	}
	if o.COMShifts != "" {
		out = append(out, output{"com_shifts", o.COMShifts, true})
	}
	if o.Positions != "" {
		out = append(out, output{"roi_compact", o.Positions, true})
	}
	if o.NPY != "" {
		out = append(out, output{"out", o.NPY, true}, output{"out", SidecarPath(o.NPY), false})
	}
	if o.HDF5 != "" {
		out = append(out, output{"hdf5", o.HDF5, false})
	}
	return out
}

// pngMasks are the indices of the masks that get a PNG: all, but with COMShifts not the
// com set the shifts come from (their shift maps are drawn instead).
func (o Outputs) pngMasks(names []string) []int {
	sum, com := frontend.FindCOM(names)
	var ms []int
	for m := range names {
		if !com || o.COMShifts == "" || m < sum || m > sum+2 {
			ms = append(ms, m)
		}
	}
	return ms
}

// samePath reports whether paths a and b name the same file: the same absolute path
// once cleaned, or the same existing file (through links).
func samePath(a, b string) bool {
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	if errA == nil && errB == nil && aa == ab {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

func pathExt(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 && !strings.ContainsRune(p[i:], '/') {
		return p[i:]
	}
	return ""
}

// SaveNPY writes the result as NPY of shape nav_shape + (n_masks,) at path (ending in
// .npy), atomically: Save with Outputs{NPY: path}.
func SaveNPY(path string, res *Result) error { return Save(res, Outputs{NPY: path}) }

// Save writes the outputs of res all or nothing: every file goes to a temporary name
// beside its final path and all are renamed only when all were written; a failure
// leaves no file of this call behind. The NPY's sidecar holds res.Info (for a Result
// made by hand, what res itself tells: shape, dtype, mask names), its shape and dtype
// those of the NPY written, and the com shift maps' file when written. New files get
// mode 0666 less the umask; a file replaced keeps its permissions.
func Save(res *Result, o Outputs) error { return goErr(save(res, o)) }

// save is Save, its errors naming options by key.
func save(res *Result, o Outputs) error {
	if res == nil {
		return errs.New(errs.Argument, "no result to save (a nil *Result)")
	}
	if err := o.Check(res.Names); err != nil {
		return err
	}
	if err := o.checkNavShape(res.NavShape); err != nil {
		return err
	}
	if o.Positions != "" && res.Positions == nil {
		return errs.New(errs.Argument, "option roi_compact: the result holds every scan position (no option roi): there are no positions to write")
	}
	var shifts []float64
	if o.COMShifts != "" {
		sum, _ := frontend.FindCOM(res.Names)
		var err error
		if shifts, err = COMShifts(res, sum); err != nil {
			return err
		}
	}
	var out outputBatch
	return out.commit(func() error {
		frames := len(res.F32) + len(res.F64)
		if res.NMasks > 0 {
			frames /= res.NMasks
		}
		if o.PNGPrefix != "" {
			for _, m := range o.pngMasks(res.Names) {
				img := grey(res.NavShape, frames, func(f int) float64 { return res.Value(f, m) })
				if err := out.png(pngName(o.PNGPrefix, m, res.Names[m]), img); err != nil {
					return err
				}
			}
			for axis, name := range []string{"y", "x"} {
				if shifts == nil {
					break
				}
				img := grey(res.NavShape, frames, func(f int) float64 { return shifts[2*f+axis] })
				if err := out.png(o.PNGPrefix+"_com_shift_"+name+".png", img); err != nil {
					return err
				}
			}
		}
		if shifts != nil {
			if err := out.npy(o.COMShifts, append(slices.Clone(res.NavShape), 2), shifts); err != nil {
				return err
			}
		}
		if o.Positions != "" {
			pos := make([]int64, len(res.Positions))
			for i, p := range res.Positions {
				pos[i] = int64(p)
			}
			if err := out.npy(o.Positions, []int{len(pos)}, pos); err != nil {
				return err
			}
		}
		if o.HDF5 != "" {
			if err := out.hdf5(o.HDF5, res, res.sidecar(o), o.Command); err != nil {
				return err
			}
		}
		if o.NPY != "" {
			sidecar, err := res.sidecar(o).JSON()
			if err != nil {
				return errs.Wrap(errs.Internal, err)
			}
			if err := out.file(SidecarPath(o.NPY), func(w io.Writer) error { _, err := w.Write(sidecar); return err }); err != nil {
				return err
			}
			var data any = res.F32
			if res.F64 != nil {
				data = res.F64
			}
			return out.npy(o.NPY, append(slices.Clone(res.NavShape), res.NMasks), data)
		}
		return nil
	}())
}

// sidecar is the ResultInfo written beside the NPY of o: res.Info completed by
// describe, and the com shift maps of o.
func (res *Result) sidecar(o Outputs) *ResultInfo {
	info := res.describe(res.Info)
	if o.COMShifts != "" {
		sum, _ := frontend.FindCOM(res.Names)
		info.COMShifts = &COMShiftsInfo{File: besideNPY(o.NPY, o.COMShifts), Shape: append(slices.Clone(res.NavShape), 2), DType: "float64",
			Components: []string{"y", "x"}, Columns: []int{sum, sum + 1, sum + 2}}
	}
	if o.Positions != "" && info.ROI != nil {
		info.ROI.Positions = besideNPY(o.NPY, o.Positions)
	}
	return &info
}

// besideNPY is file as a sidecar of the result npy names it: relative to npy's
// directory when it lies in it or below, else absolute.
func besideNPY(npy, file string) string {
	file = absPath(file)
	if rel, err := filepath.Rel(filepath.Dir(absPath(npy)), file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}

// outputBatch prepares the files of one save, to be written all or nothing
// (internal/atomicfile): each under a temporary name beside its path, all renamed by
// commit.
type outputBatch struct{ ready []*atomicfile.File }

// file prepares path, its bytes written by write.
func (b *outputBatch) file(path string, write func(io.Writer) error) error {
	f, err := atomicfile.Prepare(path, write)
	if err == nil {
		b.ready = append(b.ready, f)
	}
	return err
}

// png prepares img as PNG at path.
func (b *outputBatch) png(path string, img image.Image) error {
	return b.file(path, func(w io.Writer) error { return png.Encode(w, img) })
}

// npy prepares data ([]float32, []float64 or []int64) as NPY of shape at path.
func (b *outputBatch) npy(path string, shape []int, data any) error {
	descr := "<f8"
	switch data.(type) {
	case []float32:
		descr = "<f4"
	case []int64:
		descr = "<i8"
	}
	header, err := npy.Header(descr, shape)
	if err != nil {
		return err
	}
	return b.file(path, func(w io.Writer) error {
		if _, err := w.Write(header); err != nil {
			return err
		}
		return npy.WriteData(w, data)
	})
}

// commit renames every file prepared into place; after a failure (err), it removes
// them instead and returns err.
func (b *outputBatch) commit(err error) error {
	if err != nil {
		atomicfile.AbortAll(b.ready...)
		return err
	}
	return atomicfile.CommitAll(b.ready...)
}

// COMShifts returns the centre-of-mass shift of every frame, in pixels, from the
// results of the com masks from index sum, that of "com_sum" in res.Names (then com_y,
// com_x: see masks.COM):
// shift_y = Σ(y−cy)·frame / Σframe and shift_x = Σ(x−cx)·frame / Σframe over the
// selected pixels, as LiberTEM's CoM analysis gives them (the centre of mass relative
// to the reference point (cx, cy)). The slice is frame-major, y then x: [2f] and
// [2f+1]. A frame with a zero sum has no centre of mass: its shifts are NaN. An index
// without room for the three masks is errs.Argument; shift maps that do not fit in memory
// are errs.Resources (internal/memlimit).
func COMShifts(res *Result, sum int) ([]float64, error) {
	if res == nil {
		return nil, errs.New(errs.Argument, "no result for the com shifts (a nil *Result)")
	}
	if sum < 0 || sum+2 >= res.NMasks {
		return nil, errs.New(errs.Argument, "com masks at index %d: the result has %d masks, the set needs indices %d to %d", sum, res.NMasks, sum, sum+2)
	}
	frames := (len(res.F32) + len(res.F64)) / res.NMasks
	if err := memlimit.Check(fmt.Sprintf("the centre-of-mass shift maps (%d frames × 2 × 8 bytes)", frames), 16*int64(frames), "split the scan"); err != nil {
		return nil, err
	}
	out := make([]float64, 2*frames)
	for f := range frames {
		s := res.Value(f, sum)
		if s == 0 {
			out[2*f], out[2*f+1] = math.NaN(), math.NaN()
			continue
		}
		out[2*f], out[2*f+1] = res.Value(f, sum+1)/s, res.Value(f, sum+2)/s
	}
	return out, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// pngName is the PNG file of mask m: PREFIX_<m>_<name>.png, with the characters of name
// other than letters, digits, '_', '.' and '-' replaced by '_'.
func pngName(prefix string, m int, name string) string {
	return fmt.Sprintf("%s_%d_%s.png", prefix, m, strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_"))
}

// PNGs of small images are scaled up until the short side has pngMinSide pixels, the
// long side staying within pngMaxSide (Outputs.PNGPrefix).
const pngMinSide, pngMaxSide = 256, 4096

// pngScale is the whole factor by which an image of rows × cols is scaled up
// (Outputs.PNGPrefix): 1 when it is large enough or its long side already fills
// pngMaxSide.
func pngScale(rows, cols int) int {
	short, long := min(rows, cols), max(rows, cols)
	if short < 1 {
		return 1
	}
	return max(1, min((pngMinSide+short-1)/short, pngMaxSide/long))
}

// grey is the 8-bit image of value(f) for frames f laid out as nav (rows of its last
// axis), mapped from the finite minimum (black) to the finite maximum (white), NaN and
// a constant image black, and scaled up by pngScale, nearest neighbour.
func grey(nav []int, frames int, value func(f int) float64) *image.Gray {
	width := 1
	if len(nav) > 0 {
		width = nav[len(nav)-1]
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for f := range frames {
		if v := value(f); !math.IsNaN(v) && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	rows := frames / width
	k := pngScale(rows, width)
	img := image.NewGray(image.Rect(0, 0, width*k, rows*k))
	for r := range rows {
		line := img.Pix[r*k*img.Stride : r*k*img.Stride+width*k]
		for c := range width {
			var g uint8
			switch v := value(r*width + c); {
			case math.IsInf(v, 1):
				g = 255
			case math.IsNaN(v), math.IsInf(v, -1), hi <= lo:
			default: // halves: no overflow between ±MaxFloat64
				g = uint8(math.Round((v/2 - lo/2) / (hi/2 - lo/2) * 255))
			}
			for i := range k {
				line[c*k+i] = g
			}
		}
		for i := 1; i < k; i++ {
			copy(img.Pix[(r*k+i)*img.Stride:], line)
		}
	}
	return img
}
