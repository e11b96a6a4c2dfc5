package dataset_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// checkRangeView compares every sub-range of view (frames [first, first+count) of full)
// with the frames read from full, and checks that view implements exactly the optional
// interfaces of full.
func checkRangeView(t *testing.T, full, view dataset.Dataset, first, count int) {
	t.Helper()
	fb := full.FrameBytes()
	assert.Equal(t, []int{count}, view.NavShape())
	assert.Equal(t, count, view.NumFrames())
	assert.Equal(t, full.SigShape(), view.SigShape())
	assert.Equal(t, full.DType(), view.DType())
	assert.Equal(t, fb, view.FrameBytes())

	want := make([]byte, full.NumFrames()*fb)
	require.NoError(t, full.ReadFrames(0, full.NumFrames(), want))
	for s := 0; s <= count; s++ {
		for e := s; e <= count; e++ {
			got := make([]byte, (e-s)*fb)
			require.NoError(t, view.ReadFrames(s, e, got))
			require.Equal(t, want[(first+s)*fb:(first+e)*fb], got, "ReadFrames(%d, %d)", s, e)
		}
	}

	_, fullViewer := full.(dataset.Viewer)
	v, viewer := view.(dataset.Viewer)
	assert.Equal(t, fullViewer, viewer, "Viewer forwarded exactly when the dataset is one")
	if viewer {
		got, err := v.ViewFrames(1, count)
		require.NoError(t, err)
		assert.Equal(t, want[(first+1)*fb:(first+count)*fb], got)
	}
	fullMapper, isFullMapper := full.(dataset.Mapper)
	m, mapper := view.(dataset.Mapper)
	assert.Equal(t, isFullMapper, mapper, "Mapper forwarded exactly when the dataset is one")
	if mapper {
		got, ok, err := m.MapFrames(1, count)
		require.NoError(t, err)
		ref, refOK, err := fullMapper.MapFrames(first+1, first+count)
		require.NoError(t, err)
		assert.Equal(t, refOK, ok)
		assert.Equal(t, ref.Offset, got.Offset)
		assert.Equal(t, ref.Stride, got.Stride)
		_, _, err = m.MapFrames(0, count+1)
		assert.ErrorContains(t, err, "out of range")
	}

	assert.ErrorContains(t, view.ReadFrames(0, count+1, make([]byte, (count+1)*fb)), "out of range")
	assert.ErrorContains(t, view.ReadFrames(-1, 1, make([]byte, 2*fb)), "out of range")
}

func TestRangeRawNPYAndMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nav, sig, dt := []int{3, 5}, [2]int{6, 4}, dataset.Uint16
	values := frametest.RandomValues(rng, dt, 15*6*4)
	stored := func(bo binary.ByteOrder) []byte { return frametest.Encode(values, dt, bo) }
	dir := t.TempDir()
	open := map[string]func() (dataset.Dataset, error){
		"raw mapped": func() (dataset.Dataset, error) {
			p := filepath.Join(dir, "le.raw")
			require.NoError(t, os.WriteFile(p, stored(binary.LittleEndian), 0o644))
			return dataset.Open(p, dataset.Options{SigShape: sig[:], DType: dt, NavShape: nav})
		},
		"raw big-endian (pread)": func() (dataset.Dataset, error) {
			p := filepath.Join(dir, "be.raw")
			require.NoError(t, os.WriteFile(p, stored(binary.BigEndian), 0o644))
			return dataset.Open(p, dataset.Options{SigShape: sig[:], DType: dt, NavShape: nav, BigEndian: true})
		},
		"npy": func() (dataset.Dataset, error) {
			p := filepath.Join(dir, "a.npy")
			require.NoError(t, os.WriteFile(p, npyBytes("<u2", false, "(3, 5, 6, 4)", stored(binary.LittleEndian)), 0o644))
			return dataset.Open(p, dataset.Options{})
		},
		"memory": func() (dataset.Dataset, error) {
			return dataset.FromMemory(stored(binary.NativeEndian), nav, sig, dt)
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			for _, r := range [][2]int{{0, 15}, {0, 1}, {14, 1}, {4, 7}} {
				full, err := o()
				require.NoError(t, err)
				defer full.Close()
				base, err := o()
				require.NoError(t, err)
				view, err := dataset.Range(base, r[0], r[1])
				require.NoError(t, err)
				checkRangeView(t, full, view, r[0], r[1])
				require.NoError(t, view.Close(), "Close closes the dataset")
				assert.Error(t, base.ReadFrames(0, 1, make([]byte, base.FrameBytes())), "the view closed the dataset")
			}
		})
	}
}

func TestRangeMIB(t *testing.T) {
	path := testfiles.File(t, "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib")
	full, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer full.Close()
	base, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	view, err := dataset.Range(base, 2, 5)
	require.NoError(t, err)
	defer view.Close()
	assert.Equal(t, "mib", view.Format())
	assert.Equal(t, path, view.Path())
	checkRangeView(t, full, view, 2, 5)
}

func TestRangeErrors(t *testing.T) {
	ds, err := dataset.FromMemory(make([]byte, 4*2*2), []int{2, 2}, [2]int{2, 2}, dataset.Uint8)
	require.NoError(t, err)
	for _, r := range [][2]int{{-1, 2}, {0, 0}, {0, 5}, {3, 2}, {4, 1}, {1, -1}} {
		_, err := dataset.Range(ds, r[0], r[1])
		assert.ErrorContains(t, err, "is not within its 4 frames", "range %v", r)
	}
}
