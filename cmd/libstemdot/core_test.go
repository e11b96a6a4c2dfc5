package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/internal/testformat"
	"github.com/stemdot/stemdot/masks"
)

// requireCode checks err's status code and message, as fail gives it to C (options
// named by key).
func requireCode(t *testing.T, err error, code status, contains string) {
	t.Helper()
	require.Error(t, err)
	assert.Equal(t, code, codeOf(err), "code of %q", err)
	assert.Contains(t, frontend.OptionKeys(err.Error()), contains)
}

func TestParseFormatOptions(t *testing.T) {
	opt, err := stemdot.ParseOptions(" format=raw; sig_shape=256,128 ;dtype=uint16;nav_shape=(4, 4);byte_order=big;offset=512;")
	require.NoError(t, err)
	assert.Equal(t, dataset.Options{Format: "raw", SigShape: []int{256, 128}, DType: dataset.Uint16,
		NavShape: []int{4, 4}, BigEndian: true, Offset: 512}, opt)

	opt, err = stemdot.ParseOptions("")
	require.NoError(t, err)
	assert.Equal(t, dataset.Options{}, opt)

	for _, tc := range []struct {
		in       string
		code     status
		contains string
	}{
		{"colour=blue", errInvalidArgument, `unknown option "colour"`},
		{"format", errInvalidArgument, `option "format" is not key=value`},
		{"dtype=uint12", errDType, `unsupported dtype "uint12"`},
		{"sig_shape=256", errShape, "want 2 comma-separated sizes, got 1"},
		{"nav_shape=4,-1", errShape, `"-1" is not a positive size`},
		{"byte_order=middle", errInvalidArgument, "want little or big"},
		{"offset=-3", errInvalidArgument, "non-negative byte count"},
		{"offset=1;offset=2", errInvalidArgument, `option offset given twice`},
	} {
		_, err := stemdot.ParseOptions(tc.in)
		requireCode(t, err, tc.code, tc.contains)
	}
}

// A format's own options (of the test-only format skiptest) are options of stemdot_open
// by key, a switch's value any of true/false, 1/0, yes/no, on/off (#19.1).
func TestOpenFormatOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f"+testformat.Ext)
	require.NoError(t, os.WriteFile(path, []byte{0xEE, 1, 2, 3, 4, 5, 6, 7, 8}, 0o644))
	ds, err := openDataset(path, "skip_bytes=1;skip_note=on")
	require.NoError(t, err)
	defer ds.Close()
	got := make([]byte, 8)
	require.NoError(t, ds.ReadFrames(0, 2, got))
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, got)
	assert.Equal(t, []string{testformat.Note}, dataset.Notes(ds))

	_, err = openDataset(path, "skip_bytes=x")
	requireCode(t, err, errInvalidArgument, `option skip_bytes "x" is not a byte count`)
	_, err = openDataset(path, "skip_note=2")
	requireCode(t, err, errInvalidArgument, `option skip_note "2": not a boolean`)
}

func TestHandleRegistry(t *testing.T) {
	ds := handles.add(kindDataset, "a dataset")
	plan := handles.add(kindPlan, "a plan")
	v, err := handles.get(ds, kindDataset)
	require.NoError(t, err)
	assert.Equal(t, "a dataset", v)

	_, err = handles.get(plan, kindDataset)
	requireCode(t, err, errBadHandle, fmt.Sprintf("handle %d is a plan handle, not a dataset handle", plan))
	_, err = handles.get(0, kindRun)
	requireCode(t, err, errBadHandle, "run handle is 0 (none)")
	_, err = handles.get(1<<40, kindRun)
	requireCode(t, err, errBadHandle, "never created, or already freed")

	refuse := errors.New("busy")
	_, err = handles.remove(plan, kindPlan, func(any) error { return refuse })
	require.ErrorIs(t, err, refuse)
	_, err = handles.get(plan, kindPlan)
	require.NoError(t, err, "a refused removal keeps the handle")

	for _, h := range []uint64{ds, plan} {
		kind := kindDataset
		if h == plan {
			kind = kindPlan
		}
		_, err = handles.remove(h, kind, nil)
		require.NoError(t, err)
		_, err = handles.remove(h, kind, nil)
		requireCode(t, err, errBadHandle, "already freed")
		_, err = handles.get(h, kind)
		requireCode(t, err, errBadHandle, "already freed")
	}
}

func TestRunStates(t *testing.T) {
	r := &run{}
	ctx, err := r.start()
	require.NoError(t, err)
	_, err = r.start()
	requireCode(t, err, errInvalidArgument, "already in use")
	requireCode(t, r.idle(), errInvalidArgument, "cannot free a run while an apply is running")
	requireCode(t, r.reset(), errInvalidArgument, "cannot reset")
	r.stop()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.True(t, r.finish(), "finish reports the cancellation")

	_, err = r.start()
	requireCode(t, err, errCancelled, "stemdot_run_reset")
	require.NoError(t, r.reset())
	ctx, err = r.start()
	require.NoError(t, err)
	assert.False(t, r.finish())
	require.ErrorIs(t, ctx.Err(), context.Canceled, "the context of a finished apply is released")
	require.NoError(t, r.idle())
}

// randomFrames returns n frames of sy×sx pixels of dt in host byte order and their values
// as float64.
func randomFrames(t *testing.T, rng *rand.Rand, dt dataset.DType, n, sy, sx int) ([]byte, []float64) {
	t.Helper()
	vals := make([]float64, n*sy*sx)
	buf := make([]byte, len(vals)*dt.Size())
	for i := range vals {
		p := buf[i*dt.Size():]
		switch dt {
		case dataset.Uint8:
			v := uint8(rng.IntN(256))
			p[0], vals[i] = v, float64(v)
		case dataset.Uint16:
			v := uint16(rng.IntN(1 << 16))
			binary.NativeEndian.PutUint16(p, v)
			vals[i] = float64(v)
		case dataset.Int16:
			v := int16(rng.IntN(1<<16) - 1<<15)
			binary.NativeEndian.PutUint16(p, uint16(v))
			vals[i] = float64(v)
		case dataset.Float32:
			v := float32(rng.NormFloat64() * 100)
			binary.NativeEndian.PutUint32(p, math.Float32bits(v))
			vals[i] = float64(v)
		default:
			t.Fatalf("randomFrames: dtype %v not covered", dt)
		}
	}
	return buf, vals
}

func TestApplyMemoryDataset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const sy, sx, nMasks = 9, 7, 3
	nav := []int{5, 3}
	n := nav[0] * nav[1]
	weights := make([]float32, nMasks*sy*sx)
	for i := range weights {
		weights[i] = float32(rng.NormFloat64())
	}
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Int16, dataset.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			buf, vals := randomFrames(t, rng, dt, n, sy, sx)
			ds, err := memoryDataset(buf, int(dt), nav, sy, sx)
			require.NoError(t, err)
			defer ds.Close()
			// want is the float64 reference; scale the sum of |terms|, which bounds the
			// rounding error of any summation order.
			want, scale := make([]float64, n*nMasks), make([]float64, n*nMasks)
			for f := range n {
				for m := range nMasks {
					for p := range sy * sx {
						term := float64(weights[m*sy*sx+p]) * vals[f*sy*sx+p]
						want[f*nMasks+m] += term
						scale[f*nMasks+m] += math.Abs(term)
					}
				}
			}

			out64 := make([]float64, n*nMasks)
			var reports [][2]uint64
			stack, err := newStack(masks.New(nMasks, sy, sx, weights, nil))
			require.NoError(t, err)
			err = apply(applyRequest{ds: ds, stack: stack, out64: out64,
				progress: func(done, total uint64) { reports = append(reports, [2]uint64{done, total}) }})
			require.NoError(t, err)
			out32 := make([]float32, n*nMasks)
			require.NoError(t, apply(applyRequest{ds: ds, stack: stack, out32: out32}))
			for i, w := range want {
				assert.InDelta(t, w, out64[i], 1e-12*scale[i], "float64 value %d", i)
				assert.InDelta(t, w, float64(out32[i]), 1e-5*scale[i], "float32 value %d", i)
			}

			require.NotEmpty(t, reports)
			for i, r := range reports {
				assert.EqualValues(t, n, r[1])
				if i > 0 {
					assert.Greater(t, r[0], reports[i-1][0], "progress strictly increasing")
				}
			}
			assert.EqualValues(t, n, reports[len(reports)-1][0], "progress ends at total")
		})
	}
}

func TestApplyErrors(t *testing.T) {
	buf := make([]byte, 4*3*2)
	ds, err := memoryDataset(buf, int(dataset.Uint16), []int{4}, 1, 3)
	require.NoError(t, err)
	defer ds.Close()
	ones := []float32{1, 1, 1}
	one, err := newStack(masks.New(1, 1, 3, ones, nil))
	require.NoError(t, err)
	ok := applyRequest{ds: ds, stack: one, out32: make([]float32, 4)}

	bad := ok
	bad.stack, err = newStack(masks.New(1, 3, 1, ones, nil))
	require.NoError(t, err)
	requireCode(t, apply(bad), errShape, "masks of sig_shape (3, 1) do not match the frames' sig_shape (1, 3)")
	bad = ok
	bad.out32 = make([]float32, 5)
	requireCode(t, apply(bad), errShape, "the float32 result buffer holds 5 values, but 4 frames × 1 masks need 4")
	_, err = newStack(masks.New(1, 1, 3, []float32{1, float32(math.Inf(1)), 1}, nil))
	requireCode(t, err, errInvalidArgument, "+Inf")

	// A run cancelled from the progress callback reports errCancelled, deterministically.
	r := &run{}
	withCancel := ok
	withCancel.run = r
	withCancel.progress = func(uint64, uint64) { r.stop() }
	requireCode(t, apply(withCancel), errCancelled, "cancelled")
	requireCode(t, apply(withCancel), errCancelled, "stemdot_run_reset")
	require.NoError(t, r.reset())
	withCancel.progress = nil
	require.NoError(t, apply(withCancel))

	// A closed dataset fails the run with errIO (a read error during the run).
	closed, err := memoryDataset(make([]byte, 6), int(dataset.Uint16), []int{1}, 1, 3)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	bad = ok
	bad.ds, bad.out32 = closed, make([]float32, 1)
	requireCode(t, apply(bad), errIO, "")
}

func TestMemoryDatasetErrors(t *testing.T) {
	_, err := memoryDataset(make([]byte, 8), 0, []int{1}, 2, 2)
	requireCode(t, err, errDType, "invalid frame dtype 0")
	_, err = memoryDataset(make([]byte, 8), 9, []int{1}, 2, 2)
	requireCode(t, err, errDType, "invalid frame dtype 9")
	_, err = memoryDataset(make([]byte, 6), int(dataset.Uint16), []int{1}, 2, 2)
	requireCode(t, err, errShape, "6 bytes")
	_, err = memoryDataset(make([]byte, 8), int(dataset.Uint8), make([]int, 9), 2, 2)
	requireCode(t, err, errInvalidArgument, "nav_ndim 9")
}

func TestOpenDataset(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "scan.mib")
	_, err := openDataset(missing, "")
	requireCode(t, err, errIO, missing)

	truncated := filepath.Join(t.TempDir(), "scan.raw")
	require.NoError(t, os.WriteFile(truncated, make([]byte, 33), 0o644))
	_, err = openDataset(truncated, "sig_shape=4,4;dtype=uint16")
	requireCode(t, err, errFormat, truncated)
	_, err = openDataset("", "")
	requireCode(t, err, errInvalidArgument, "empty dataset path")

	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	ds, err := openDataset(path, "nav_shape=2,4")
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, []int{2, 4}, ds.NavShape())
	assert.Equal(t, [2]int{256, 256}, ds.SigShape())
	assert.Equal(t, dataset.Uint8, ds.DType())
	// A nav shape of 3 axes, a scan of planes (#33); of 4, refused naming the forms.
	planes, err := openDataset(path, "nav_shape=2,2,2")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2, 2}, planes.NavShape())
	require.NoError(t, planes.Close())
	_, err = openDataset(path, "nav_shape=2,1,2,2")
	requireCode(t, err, errInvalidArgument, `option nav_shape "2,1,2,2": want Y,X, N or Z,Y,X, got 4 sizes`)
}

// TestApplyRealFile checks a virtual bright field of a real MIB file against sums
// computed from the file's bytes (384-byte frame headers, 256×256 uint8 pixels).
func TestApplyRealFile(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	ds, err := openDataset(path, "")
	require.NoError(t, err)
	defer ds.Close()
	disk, err := masksFrom(nil, []string{"disk:42,126,30"}, 256, 256, nil)
	require.NoError(t, err)
	out := make([]float64, ds.NumFrames())
	require.NoError(t, apply(applyRequest{ds: ds, stack: disk, out64: out}))
	const frameBytes = 384 + 256*256
	require.Len(t, raw, 8*frameBytes)
	for f := range 8 {
		var want float64
		for p, w := range disk.Dense() {
			want += float64(w) * float64(raw[f*frameBytes+384+p])
		}
		assert.Equal(t, want, out[f], "frame %d", f)
	}
}

func TestPlanner(t *testing.T) {
	p, err := newPlanner("1", "")
	require.NoError(t, err)
	ds, err := memoryDataset(make([]byte, 6*2*2), int(dataset.Uint8), []int{6}, 2, 2)
	require.NoError(t, err)
	defer ds.Close()
	h := handles.add(kindPlan, p)
	dh := handles.add(kindDataset, ds)
	text, err := describePlan(h, dh)
	require.NoError(t, err)
	var got struct {
		Workers    []map[string]any `json:"workers"`
		Partitions [][2]int         `json:"partitions"`
	}
	require.NoError(t, json.Unmarshal(text, &got))
	assert.Len(t, got.Workers, 1)
	require.NotEmpty(t, got.Partitions)
	assert.Equal(t, 0, got.Partitions[0][0])
	assert.Equal(t, 6, got.Partitions[len(got.Partitions)-1][1])
	_, err = describePlan(dh, 0)
	requireCode(t, err, errBadHandle, "is a dataset handle, not a plan handle")

	_, err = newPlanner("two", "")
	requireCode(t, err, errInvalidArgument, "two")
	_, err = newPlanner("4095,", "")
	requireCode(t, err, errPlan, "4095")
	if _, err := newPlanner("", "1"); err != nil {
		requireCode(t, err, errCUDAUnavailable, "GPU")
	}
}

func TestParseMask(t *testing.T) {
	s, err := masksFrom(nil, []string{"com"}, 4, 6, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, s.N)
	_, err = masksFrom(nil, []string{"disk:1,2"}, 4, 6, nil)
	requireCode(t, err, errInvalidArgument, "disk:1,2")
	_, err = masksFrom(nil, []string{"com"}, 0, 6, nil)
	requireCode(t, err, errShape, "non-positive")
}

func TestCodeOf(t *testing.T) {
	assert.Equal(t, statusOK, codeOf(nil))
	assert.Equal(t, errCancelled, codeOf(fmt.Errorf("worker 0: %w", context.Canceled)))
	assert.Equal(t, errInternal, codeOf(errors.New("unclassified")))
	assert.Equal(t, errShape, codeOf(fmt.Errorf("wrapped: %w", failf(errs.Shape, "x"))))
	assert.Equal(t, errBadHandle, codeOf(badHandlef("handle %d", 7)))
	for k := errs.Internal; k <= errs.CUDA; k++ {
		_, ok := kindStatus[k]
		assert.True(t, ok, "every error kind has a status: %v", k)
	}
	assert.Equal(t, errInternal, codeOf(panicError("boom")))
	assert.Contains(t, panicError("boom").Error(), "recovered panic): boom")
}

// TestOpenFrameRange checks the frames=first,count option: the view holds the file's
// frames [first, first+count), after nav_shape; bad ranges are rejected by name.
func TestOpenFrameRange(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	full, err := openDataset(path, "nav_shape=2,4")
	require.NoError(t, err)
	defer full.Close()
	fb := full.FrameBytes()
	want := make([]byte, 8*fb)
	require.NoError(t, full.ReadFrames(0, 8, want))

	ds, err := openDataset(path, "nav_shape=2,4; frames = (3, 4)")
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, []int{4}, ds.NavShape())
	got := make([]byte, 4*fb)
	require.NoError(t, ds.ReadFrames(0, 4, got))
	assert.Equal(t, want[3*fb:7*fb], got)

	for _, tc := range []struct {
		options  string
		code     status
		contains string
	}{
		{"frames=3", errInvalidArgument, "want FIRST,COUNT"},
		{"frames=-1,2", errInvalidArgument, "want FIRST,COUNT"},
		{"frames=0,0", errInvalidArgument, "want FIRST,COUNT"},
		{"frames=1,1;frames=2,1", errInvalidArgument, "option frames given twice"},
		{"frames=7,2", errShape, "option frames 7,2: a range of 2 frames from frame 7 is not within its 8 frames"},
		{"frame=1,2", errInvalidArgument, "frames"},
	} {
		_, err := openDataset(path, tc.options)
		requireCode(t, err, tc.code, tc.contains)
	}
}
