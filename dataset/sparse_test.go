package dataset_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// sparseFrames returns n random uint16 frames of sig pixels in CSR form (events drawn
// with replacement: duplicates) and the same frames densified by hand.
func sparseFrames(rng *rand.Rand, n int, sig [2]int) (dataset.SparseFrames, []uint16) {
	pixels := sig[0] * sig[1]
	var sf dataset.SparseFrames
	sf.Reset()
	dense := make([]uint16, n*pixels)
	for f := range n {
		for range rng.IntN(pixels / 2) {
			p, v := rng.IntN(pixels), uint16(1+rng.IntN(100))
			sf.Indices = append(sf.Indices, int32(p))
			sf.Data = binary.NativeEndian.AppendUint16(sf.Data, v)
			dense[f*pixels+p] += v
		}
		sf.Indptr = append(sf.Indptr, len(sf.Indices))
	}
	return sf, dense
}

// readSparseDense reads frames [start, end) of ds through SparseOf and densifies them.
func readSparseDense(t *testing.T, ds dataset.Dataset, start, end int) []byte {
	t.Helper()
	sr := dataset.SparseOf(ds)
	require.NotNil(t, sr)
	var sf dataset.SparseFrames
	sf.Reset()
	sf.AppendBlank(1) // ReadSparse appends after what dst holds
	require.NoError(t, sr.ReadSparse(start, end, &sf))
	require.Equal(t, end-start+1, sf.Frames())
	out := make([]byte, (end-start+1)*ds.FrameBytes())
	require.NoError(t, sf.Densify(out, ds.SigShape(), ds.DType()))
	require.Equal(t, make([]byte, ds.FrameBytes()), out[:ds.FrameBytes()])
	return out[ds.FrameBytes():]
}

// checkSparseView: every range of ds read sparse and densified equals ReadFrames, and
// frame i equals want's frame frames[i].
func checkSparseView(t *testing.T, ds dataset.Dataset, want []uint16, frames []int) (viewed int) {
	t.Helper()
	fb := ds.FrameBytes()
	pixels := fb / 2
	require.Equal(t, len(frames), ds.NumFrames())
	all := make([]byte, len(frames)*fb)
	require.NoError(t, ds.ReadFrames(0, len(frames), all))
	for i, f := range frames {
		for p := range pixels {
			var w uint16
			if f >= 0 && f*pixels < len(want) {
				w = want[f*pixels+p]
			}
			require.Equal(t, w, binary.NativeEndian.Uint16(all[i*fb+2*p:]), "frame %d (file frame %d) pixel %d", i, f, p)
		}
	}
	for s := 0; s <= len(frames); s++ {
		for e := s; e <= len(frames); e++ {
			require.Equal(t, all[s*fb:e*fb], readSparseDense(t, ds, s, e), "frames [%d, %d)", s, e)
			var sf dataset.SparseFrames
			ok, err := dataset.SparseOf(ds).(dataset.SparseViewer).ViewSparse(s, e, &sf)
			require.NoError(t, err)
			if ok {
				viewed++
				got := make([]byte, (e-s)*fb)
				require.NoError(t, sf.Densify(got, ds.SigShape(), ds.DType()))
				require.Equal(t, all[s*fb:e*fb], got, "view of frames [%d, %d)", s, e)
			}
		}
	}
	return viewed
}

// TestSparseViews: the sparse frames of an in-memory sparse dataset, and of the views
// that Open puts in front of a format's dataset (scan reconciliation with sync offsets
// and flyback frames, an ROI, a frame range), densify to the frames ReadFrames gives,
// which equal the frames densified by hand (duplicates summed, blank frames zero).
func TestSparseViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sig := [2]int{5, 7}
	sf, dense := sparseFrames(rng, 14, sig)
	mem, err := dataset.FromSparse(sf, nil, sig, dataset.Uint16)
	require.NoError(t, err)
	require.Equal(t, 15*16/2, checkSparseView(t, mem, dense, seqInts(0, 14)), "every range of FromSparse is viewed in place")

	for _, c := range []struct {
		opt    dataset.Options
		frames []int
	}{
		{dataset.Options{NavShape: []int{3, 4}, SyncOffset: 2}, seqInts(2, 14)},
		{dataset.Options{NavShape: []int{3, 5}, SyncOffset: -1}, seqInts(-1, 14)},
		// The last 3 positions have no frame (frames 14 to 16): blank, nav shape kept.
		{dataset.Options{NavShape: []int{2, 7}, SyncOffset: 3}, seqInts(3, 17)},
		{dataset.Options{NavShape: []int{2, 6}, Flyback: dataset.Flyback{Place: dataset.FlybackEnd}}, []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12}},
		{dataset.Options{NavShape: []int{3, 4}, SyncOffset: 1, Flyback: dataset.Flyback{Place: dataset.FlybackStart}}, []int{2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14, 15}[:12]},
	} {
		t.Run(fmt.Sprintf("%+v", c.opt), func(t *testing.T) {
			if c.frames[len(c.frames)-1] >= 14 && c.opt.Flyback.Place != 0 {
				c.frames = c.frames[:8] // an interrupted scan: its incomplete last row is dropped
			}
			inner, err := dataset.FromSparse(sf, nil, sig, dataset.Uint16)
			require.NoError(t, err)
			ds, err := dataset.Reconcile(inner, c.opt, nil, "", dataset.FileFrames{Whole: 14})
			require.NoError(t, err)
			viewed := checkSparseView(t, ds, dense, c.frames)
			if held := 14 - c.opt.SyncOffset; c.opt.SyncOffset > 0 && c.opt.Flyback.Place == 0 {
				assert.Equal(t, (held+1)*(held+2)/2, viewed, "consecutive frames of the file are viewed in place, no position without a frame")
			} else {
				assert.Positive(t, viewed)
			}
		})
	}

	sel, err := dataset.Select(mem, dataset.ROI{Mask: []bool{true, false, false, true, true, true, false, true, true, false, false, false, true, true}, Shape: []int{1, 14}})
	require.NoError(t, err)
	assert.Less(t, checkSparseView(t, sel, dense, []int{0, 3, 4, 5, 7, 8, 12, 13}), 9*10/2, "non-consecutive frames are read, not viewed")
	r, err := dataset.Range(sel, 2, 5)
	require.NoError(t, err)
	assert.Positive(t, checkSparseView(t, r, dense, []int{4, 5, 7, 8, 12}))

	raw, err := dataset.FromMemory(make([]byte, 14*sig[0]*sig[1]*2), nil, sig, dataset.Uint16)
	require.NoError(t, err)
	require.Nil(t, dataset.SparseOf(raw), "dense data")
	dr, err := dataset.Range(raw, 1, 3)
	require.NoError(t, err)
	require.Nil(t, dataset.SparseOf(dr), "a view of dense data")
}

func seqInts(a, b int) []int {
	s := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		s = append(s, i)
	}
	return s
}

// TestFromSparseErrors: malformed CSR arrays are refused with errs.Format, shapes that
// do not fit with errs.Shape; never a panic.
func TestFromSparseErrors(t *testing.T) {
	sig := [2]int{2, 2}
	u16 := func(v ...uint16) []byte {
		var b []byte
		for _, x := range v {
			b = binary.NativeEndian.AppendUint16(b, x)
		}
		return b
	}
	for _, c := range []struct {
		name string
		sf   dataset.SparseFrames
		nav  []int
		kind errs.Kind
		msg  string
	}{
		{"index outside", dataset.SparseFrames{Indptr: []int{0, 1}, Indices: []int32{4}, Data: u16(1)}, nil, errs.Format, "pixel 4, outside the frame of 4 pixels"},
		{"negative index", dataset.SparseFrames{Indptr: []int{0, 1}, Indices: []int32{-1}, Data: u16(1)}, nil, errs.Format, "pixel -1"},
		{"indptr decreases", dataset.SparseFrames{Indptr: []int{0, 2, 1, 2}, Indices: []int32{0, 1}, Data: u16(1, 2)}, nil, errs.Format, "indptr decreases at frame 1"},
		{"short data", dataset.SparseFrames{Indptr: []int{0, 2}, Indices: []int32{0, 1}, Data: u16(1)}, nil, errs.Format, "do not agree"},
		{"indptr start", dataset.SparseFrames{Indptr: []int{1, 2}, Indices: []int32{0, 1}, Data: u16(1, 2)}, nil, errs.Format, "do not agree"},
		{"nav shape", dataset.SparseFrames{Indptr: []int{0, 1, 2}, Indices: []int32{0, 1}, Data: u16(1, 2)}, []int{3}, errs.Shape, "indptr holds 2 frames"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := dataset.FromSparse(c.sf, c.nav, sig, dataset.Uint16)
			require.Error(t, err)
			require.Equal(t, c.kind, errs.KindOf(err), "%v", err)
			require.ErrorContains(t, err, c.msg)
		})
	}
}
