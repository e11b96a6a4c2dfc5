package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/masks"
)

// planned is a Remote's Call computed by this process's stemdot.Planner, as a cluster's
// workers compute it: the frames (an ROI's selected ones) in the order read, the
// reductions' frames in the order asked.
func planned(t *testing.T) func(op string, request any, weights []byte, shifts []float64, out []byte) ([]byte, error) {
	pl, err := stemdot.Plan{CPUs: "2"}.Planner()
	require.NoError(t, err)
	var ds dataset.Dataset
	t.Cleanup(func() {
		if ds != nil {
			ds.Close()
		}
	})
	return func(op string, request any, weights []byte, shifts []float64, out []byte) ([]byte, error) {
		text, err := json.Marshal(request) // as the C ABI passes it
		require.NoError(t, err)
		var req struct {
			Path       string            `json:"path"`
			Options    map[string]string `json:"options"`
			NMasks     int               `json:"n_masks"`
			Float64    bool              `json:"float64"`
			Reductions []string          `json:"reductions"`
		}
		require.NoError(t, json.Unmarshal(text, &req))
		var reply any = map[string]any{}
		ctx := context.Background()
		switch op {
		case "open":
			var opt stemdot.Options
			for k, v := range req.Options {
				require.NoError(t, stemdot.SetOpenOption(&opt, k, v))
			}
			if ds, err = stemdot.Open(req.Path, opt); err != nil {
				return nil, err
			}
			scan, pos := dataset.ScanPositions(ds)
			sig := ds.SigShape()
			d := description{NavShape: ds.NavShape(), SigShape: sig[:], DType: ds.DType().String(), NFrames: ds.NumFrames(),
				Format: ds.Format(), Warnings: stemdot.OpenWarnings(ds), ScanShape: scan, PositionsWithoutFrame: stemdot.BlankPositions(ds)}
			if dataset.IsROI(ds) {
				d.Positions = pos
			}
			if len(pos) != (&described{scan: scan}).NumFrames() {
				d.FramePositions = pos
			}
			reply = d
		case "centre":
			c, err := pl.Centre(ctx, ds, shifts)
			if err != nil {
				return nil, err
			}
			reply = map[string]float64{"x": c.X, "y": c.Y, "r": c.R}
		case "apply":
			sig := ds.SigShape()
			var stack *masks.Stack
			if req.Float64 {
				stack, err = masks.New64(req.NMasks, sig[0], sig[1], unsafe.Slice((*float64)(unsafe.Pointer(&weights[0])), len(weights)/8), nil)
			} else {
				stack, err = masks.New(req.NMasks, sig[0], sig[1], unsafe.Slice((*float32)(unsafe.Pointer(&weights[0])), len(weights)/4), nil)
			}
			require.NoError(t, err)
			res, err := pl.Apply(ctx, ds, stack, stemdot.ApplyOptions{Float64: req.Float64, Shifts: shifts, ROICompact: true})
			if err != nil {
				return nil, err
			}
			if req.Float64 {
				require.Equal(t, len(out), copy(out, bytesOf(res.F64)))
			} else {
				require.Equal(t, len(out), copy(out, bytesOf(res.F32)))
			}
			reply = workers{CPU: res.Stats.CPUWorkers, GPU: res.Stats.GPUWorkers}
		case "reduce":
			opt := stemdot.ReduceOptions{}
			for _, name := range req.Reductions {
				*map[string]*bool{"sum": &opt.Sum, "mean": &opt.Mean, "max": &opt.Max, "std": &opt.Std}[name] = true
			}
			red, err := pl.Reduce(ctx, ds, opt)
			if err != nil {
				return nil, err
			}
			var frames []float64
			for _, name := range req.Reductions {
				frames = append(frames, red.Frame(name)...)
			}
			require.Equal(t, len(out), copy(out, bytesOf(frames)))
			reply = workers{CPU: red.Stats.CPUWorkers}
		}
		return json.Marshal(reply)
	}
}

// The apply and sum commands on a Remote backend write the files that stemdot writes
// with the same workers (here both this machine's: the sidecars are equal too), byte for
// byte: the described dataset places ROI and frames-range results as the opened one.
// (Not the std frame, nor the centre of frames moved back by sub-pixel shifts: workers'
// float partials merge in the order they finish, which can change their last bits from
// one run to the next.)
func TestRemoteWritesWhatLocalWrites(t *testing.T) {
	dir := t.TempDir()
	scan := filepath.Join(dir, "scan.mib")
	require.Equal(t, 0, runRoot(t.Context(), NewRootCmd(), []string{"synth", "--out", scan, "--nav-shape", "9,7", "--sig-shape", "32,32", "--shift", "2"}))
	shifts := filepath.Join(dir, "shifts.npy")
	values := make([]float64, 9*7*2)
	for i := range values {
		values[i] = float64(i%5)*0.7 - 1.3
	}
	require.NoError(t, npy.WriteFile(shifts, []int{9, 7, 2}, values))
	for _, args := range [][]string{
		{"apply", "--mask", "disk:auto", "--mask", "com", "--mask", "ring:16,16,4,12", "--png", "{out}/img", "--com-shifts", "{out}/com.npy"},
		{"apply", "--mask", "com:16,15,8", "--mask", "disk:16,16,5", "--float64", "--shifts", shifts, "--frames", "10,40"},
		{"apply", "--mask", "disk:auto", "--shift", "1,-2", "--roi", "rect:1,2,4,5", "--roi-compact"},
		{"apply", "--mask", "com", "--roi", "rect:0,3,7,2", "--frames", "2,9", "--com-shifts", "{out}/c.npy"},
		{"sum", "--mean", "{out}/mean.npy", "--max", "{out}/max.npy", "--png", "{out}/s", "--roi", "rect:1,1,3,3"},
		// Positions without a frame (#33): named in the sidecar, left out of the mean.
		{"apply", "--mask", "disk:16,16,5", "--sync-offset", "-5", "--roi", "rect:0,0,7,2"},
		{"apply", "--mask", "disk:16,16,5", "--sync-offset", "4", "--frames", "50,13"},
		{"sum", "--mean", "{out}/mean.npy", "--sync-offset", "4", "--roi", "rect:2,5,5,4"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			outs := [2]string{t.TempDir(), t.TempDir()}
			for i, out := range outs {
				argv := []string{args[0], scan, "--out", filepath.Join(out, "r.npy"), "-q"}
				for _, a := range args[1:] {
					argv = append(argv, strings.ReplaceAll(a, "{out}", out))
				}
				if i == 0 {
					require.Equal(t, 0, runRoot(t.Context(), NewRootCmd(), append(argv, "--cpus", "2")))
				} else {
					require.Equal(t, 0, Run(Front{Name: "test", Use: "test", Backend: &Remote{Call: planned(t)}}, argv))
				}
			}
			local, err := os.ReadDir(outs[0])
			require.NoError(t, err)
			remote, err := os.ReadDir(outs[1])
			require.NoError(t, err)
			require.Equal(t, len(local), len(remote))
			for i, e := range local {
				require.Equal(t, e.Name(), remote[i].Name())
				a, err := os.ReadFile(filepath.Join(outs[0], e.Name()))
				require.NoError(t, err)
				b, err := os.ReadFile(filepath.Join(outs[1], e.Name()))
				require.NoError(t, err)
				require.True(t, bytes.Equal(bytes.ReplaceAll(a, []byte(outs[0]), nil), bytes.ReplaceAll(b, []byte(outs[1]), nil)), "%s differs", e.Name())
			}
		})
	}
}

// A backend's error that names a flag of the backend by its keyword (python -m
// stemdot.dask's resources=, range_frames=) is said with the flag, its kind kept (#20 F).
func TestRemoteErrorsNameTheFlags(t *testing.T) {
	message := "no running worker of the cluster has the resources {'GPU': 1.0}: start workers that declare them " +
		"(dask worker SCHEDULER --resources NAME=N), or drop resources=; range_frames=0: want at least 1, max_attempts=4"
	b := &Remote{Extra: []RemoteFlag{{Name: "resources", Repeatable: true}, {Name: "range-frames"}},
		Call: func(op string, request any, masks []byte, shifts []float64, out []byte) ([]byte, error) {
			return nil, errs.New(errs.Resources, "%s", message)
		}}
	err := b.call("apply", nil, nil, nil, nil, &workers{})
	require.EqualError(t, err, "no running worker of the cluster has the resources {'GPU': 1.0}: start workers that declare them "+
		"(dask worker SCHEDULER --resources NAME=N), or drop --resources; --range-frames 0: want at least 1, max_attempts=4")
	require.Equal(t, errs.Resources, errs.KindOf(err))
}
