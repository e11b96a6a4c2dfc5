package masks

import (
	"cmp"
	"fmt"
	"github.com/stemdot/stemdot/internal/memlimit"
	"math"
)

// Disk returns one mask named "disk" on frames of sig_shape sig = (sig_y, sig_x): weight
// 1 at the pixels with (x−cx)² + (y−cy)² ≤ r², 0 elsewhere (LiberTEM masks.circular).
// It is the virtual bright-field detector. cx, cy, r are in pixels; r must be positive
// and finite. It returns an error for a bad sig, centre or radius, or a disk that selects
// no pixel of the frame.
func Disk(sig [2]int, cx, cy, r float64) (*Stack, error) {
	if err := cmp.Or(checkCentre(sig, cx, cy), checkRadius("radius", r)); err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	return selection(sig, "disk", func(y, x int) bool { return inDisk(y, x, cx, cy, r) },
		fmt.Sprintf("disk at (cx=%g, cy=%g) with r=%g", cx, cy, r))
}

// Ring returns one mask named "ring" on frames of sig_shape sig: weight 1 at the pixels
// with rInner² < (x−cx)² + (y−cy)² ≤ rOuter², 0 elsewhere, which is Disk(rOuter) minus
// Disk(rInner) (LiberTEM masks.ring: outer & ~inner, pixel for pixel). It is the annular
// dark-field detector. Radii are in pixels, finite, rOuter positive and rInner at least 0
// and less than rOuter. rInner 0 gives the disk of radius rOuter less the pixel at its
// centre when the centre is a pixel (x = cx and y = cy: 0 < 0 is false), as LiberTEM's
// ring of radius_inner 0 does. It returns an error for a bad sig, centre or radii, or a
// ring that selects no pixel of the frame.
func Ring(sig [2]int, cx, cy, rInner, rOuter float64) (*Stack, error) {
	err := checkCentre(sig, cx, cy)
	if err == nil && (!(rInner >= 0) || math.IsInf(rInner, 0)) {
		err = fmt.Errorf("inner radius must be 0 or positive, and finite, got %g", rInner)
	}
	err = cmp.Or(err, checkRadius("outer radius", rOuter))
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if rInner >= rOuter {
		return nil, fmt.Errorf("ring: inner radius %g must be less than outer radius %g", rInner, rOuter)
	}
	return selection(sig, "ring",
		func(y, x int) bool { return inDisk(y, x, cx, cy, rOuter) && !inDisk(y, x, cx, cy, rInner) },
		fmt.Sprintf("ring at (cx=%g, cy=%g) with radii %g..%g", cx, cy, rInner, rOuter))
}

// Point returns one mask named "point" on frames of sig_shape sig: weight 1 at pixel
// (column x, row y), 0 elsewhere. It returns an error for a bad sig or a pixel outside
// the frame.
func Point(sig [2]int, x, y int) (*Stack, error) {
	if err := checkSig(sig); err != nil {
		return nil, fmt.Errorf("point: %w", err)
	}
	if x < 0 || x >= sig[1] || y < 0 || y >= sig[0] {
		return nil, fmt.Errorf("point: pixel (x=%d, y=%d) is outside the frame of sig_shape (%d, %d)", x, y, sig[0], sig[1])
	}
	return selection(sig, "point", func(py, px int) bool { return px == x && py == y },
		fmt.Sprintf("point (x=%d, y=%d)", x, y))
}

// Rect returns one mask named "rect" on frames of sig_shape sig: weight 1 at the pixels
// with x ≤ column < x+w and y ≤ row < y+h, 0 elsewhere. A rectangle partly outside the
// frame keeps its part inside, as Disk and Ring do. It returns an error for a bad sig, a
// width or height that is not positive, or a rectangle that selects no pixel of the
// frame.
func Rect(sig [2]int, x, y, w, h int) (*Stack, error) {
	if err := checkSig(sig); err != nil {
		return nil, fmt.Errorf("rect: %w", err)
	}
	if w < 1 || h < 1 {
		return nil, fmt.Errorf("rect: width %d and height %d must be positive", w, h)
	}
	x0, x1 := clipSpan(x, w, sig[1])
	y0, y1 := clipSpan(y, h, sig[0])
	return selection(sig, "rect", func(py, px int) bool { return px >= x0 && px < x1 && py >= y0 && py < y1 },
		fmt.Sprintf("rect (x=%d, y=%d, w=%d, h=%d)", x, y, w, h))
}

// clipSpan returns the part [lo, hi) of the pixels start ≤ i < start+n (n > 0) that lies
// in [0, size), empty (lo ≥ hi) when none does; start+n may exceed an int.
func clipSpan(start, n, size int) (lo, hi int) {
	switch {
	case start >= size:
		return size, size
	case start < 0: // a negative plus a positive int cannot overflow
		return 0, min(start+n, size)
	}
	return start, start + min(n, size-start)
}

// COM returns the three centre-of-mass masks on frames of sig_shape sig, relative to the
// reference point (cx, cy) in pixels:
//
//   - "com_sum": 1 on the selected pixels,
//   - "com_y": y − cy on the selected pixels,
//   - "com_x": x − cx on the selected pixels,
//
// 0 elsewhere. The selection is the disk (x−cx)² + (y−cy)² ≤ r², or the whole frame for
// r = 0. For a frame with sums (s, my, mx) over these masks the centre of mass is
// (y, x) = (my/s + cy, mx/s + cx) and the shift from the reference point is (my/s, mx/s).
//
// This follows LiberTEM's com_masks_factory (src/libertem/udf/com.py) and CoMUDF (whose
// default reference point is (sig_y//2, sig_x//2) and default r = inf), except that
// LiberTEM's moment masks hold the absolute coordinates y and x and subtract cy, cx
// after the division; moments relative to the reference point give the same centre of
// mass and keep float32 weights small. It returns an error for a bad sig or centre, a
// sig of more than MaxWeights/3 pixels, a negative or non-finite r, or a disk that
// selects no pixel.
func COM(sig [2]int, cx, cy, r float64) (*Stack, error) {
	err := checkCentre(sig, cx, cy)
	if err == nil && r != 0 {
		err = checkRadius("radius (0 for the whole frame)", r)
	}
	if err == nil && sig[0]*sig[1] > MaxWeights/3 {
		err = fmt.Errorf("three masks of sig_shape (%d, %d) exceed %d weights", sig[0], sig[1], MaxWeights)
	}
	if err != nil {
		return nil, fmt.Errorf("com: %w", err)
	}
	where := fmt.Sprintf("within r=%g of (cx=%g, cy=%g)", r, cx, cy)
	if r == 0 {
		where = fmt.Sprintf("on the whole frame, about (cx=%g, cy=%g)", cx, cy)
	}
	sel, err := selectPixels(sig, func(y, x int) bool { return r == 0 || inDisk(y, x, cx, cy, r) },
		fmt.Sprintf("com disk at (cx=%g, cy=%g) with r=%g", cx, cy, r))
	if err != nil {
		return nil, err
	}
	// The selection, then the three masks: dense, their float64 weights while building,
	// then the float32 and Lo parts (New64), 16 bytes a weight; sparse, a pixel index, a
	// float32 value and a Lo part per nonzero of the three.
	p := sel.pixels()
	need := sel.bytes() + 3*16*int64(p)
	if !sel.dense {
		need = sel.bytes() + 3*12*int64(sel.count) + 16
	}
	what := fmt.Sprintf("building the 3 com masks %s (sig_shape (%d, %d), %d pixels selected, %s)", where, sig[0], sig[1], sel.count, sel.form())
	if err := memlimit.Check(what, need, "use a com disk of fewer pixels (com:CX,CY,R)"); err != nil {
		return nil, err
	}
	names := []string{"com_sum", "com_y", "com_x"}
	s, err := sel.stack("com_sum")
	if err != nil {
		return nil, err
	}
	if s.Data != nil {
		data := make([]float64, 3*p)
		for i, v := range s.Data {
			if v != 0 {
				y, x := i/sig[1], i%sig[1]
				data[i], data[p+i], data[2*p+i] = 1, float64(y)-cy, float64(x)-cx
			}
		}
		return New64(3, sig[0], sig[1], data, names)
	}
	// The three masks share the disk's pixels: in CSR form, a pixel on the centre's row
	// (column) has no y (x) moment.
	disk := s.Sparse
	c := &CSR{N: 3, Pixels: p, RowPtr: make([]int32, 1, 4), Col: make([]int32, 0, 3*sel.count), Val: make([]float32, 0, 3*sel.count)}
	for row := range 3 {
		for _, col := range disk.Col {
			y, x := int(col)/sig[1], int(col)%sig[1]
			if w := [3]float64{1, float64(y) - cy, float64(x) - cx}[row]; float32(w) != 0 {
				c.appendNonzero(col, w)
			}
		}
		c.RowPtr = append(c.RowPtr, int32(len(c.Col)))
	}
	return newSparse(3, sig[0], sig[1], c, names)
}

// inDisk is LiberTEM's disk rule: (x−cx)² + (y−cy)² ≤ r².
func inDisk(y, x int, cx, cy, r float64) bool {
	dx, dy := float64(x)-cx, float64(y)-cy
	return dx*dx+dy*dy <= r*r
}

// checkCentre checks sig and a finite centre (cx, cy).
func checkCentre(sig [2]int, cx, cy float64) error {
	if err := checkSig(sig); err != nil {
		return err
	}
	if math.IsNaN(cx) || math.IsInf(cx, 0) || math.IsNaN(cy) || math.IsInf(cy, 0) {
		return fmt.Errorf("centre (cx=%g, cy=%g) must be finite", cx, cy)
	}
	return nil
}

// checkRadius checks that the radius named what is positive and finite.
func checkRadius(what string, r float64) error {
	if !(r > 0) || math.IsInf(r, 0) {
		return fmt.Errorf("%s must be positive and finite, got %g", what, r)
	}
	return nil
}

// selection returns a one-mask stack named name with weight 1 where selected(y, x). If
// no pixel is selected it returns an error that starts with what (the mask and its
// parameters); before allocating the stack it checks that it fits in memory
// (internal/memlimit; errs.Resources).
func selection(sig [2]int, name string, selected func(y, x int) bool, what string) (*Stack, error) {
	sel, err := selectPixels(sig, selected, what)
	if err != nil {
		return nil, err
	}
	if err := memlimit.Check(fmt.Sprintf("the %s (one mask of sig_shape (%d, %d), %d pixels selected, %s)", what, sig[0], sig[1], sel.count, sel.form()),
		sel.bytes(), "use a smaller mask"); err != nil {
		return nil, err
	}
	return sel.stack(name)
}

// pixelSelection is the set of pixels of a frame that a generator selects, counted, and
// the form its stack is held in: dense when it is not sparse enough to be applied
// sparse (as settle would have it), else CSR.
type pixelSelection struct {
	sig      [2]int
	selected func(y, x int) bool
	count    int
	dense    bool
}

// selectPixels counts the pixels selected(y, x) of a frame of sig_shape sig; none is an
// error that starts with what (the mask and its parameters).
func selectPixels(sig [2]int, selected func(y, x int) bool, what string) (pixelSelection, error) {
	s := pixelSelection{sig: sig, selected: selected}
	for y := 0; y < sig[0]; y++ {
		for x := 0; x < sig[1]; x++ {
			if selected(y, x) {
				s.count++
			}
		}
	}
	if s.count == 0 {
		return s, fmt.Errorf("%s selects no pixel of the frame of sig_shape (%d, %d)", what, sig[0], sig[1])
	}
	s.dense = float64(s.count) >= DefaultSparseDensity*float64(s.pixels())
	return s, nil
}

func (s pixelSelection) pixels() int { return s.sig[0] * s.sig[1] }

// bytes is the memory of the selection's one-mask stack: a float32 weight per pixel
// dense, a pixel index and a float32 value per selected pixel in CSR form.
func (s pixelSelection) bytes() int64 {
	if s.dense {
		return 4 * int64(s.pixels())
	}
	return 8*int64(s.count) + 8
}

// form says how the stack is held, for messages.
func (s pixelSelection) form() string {
	if s.dense {
		return "held dense"
	}
	return "held sparse"
}

// stack allocates the selection's one-mask stack named name, weight 1 at the selected
// pixels.
func (s pixelSelection) stack(name string) (*Stack, error) {
	sig, p := s.sig, s.pixels()
	if s.dense {
		data := make([]float32, p)
		for y := 0; y < sig[0]; y++ {
			for x := 0; x < sig[1]; x++ {
				if s.selected(y, x) {
					data[y*sig[1]+x] = 1
				}
			}
		}
		return New(1, sig[0], sig[1], data, []string{name})
	}
	c := &CSR{N: 1, Pixels: p, RowPtr: []int32{0, int32(s.count)}, Col: make([]int32, 0, s.count), Val: make([]float32, 0, s.count)}
	for y := 0; y < sig[0]; y++ {
		for x := 0; x < sig[1]; x++ {
			if s.selected(y, x) {
				c.Col = append(c.Col, int32(y*sig[1]+x))
				c.Val = append(c.Val, 1)
			}
		}
	}
	return newSparse(1, sig[0], sig[1], c, []string{name})
}
