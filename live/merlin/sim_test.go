package merlin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/live"
)

// simulator returns LiberTEM-live's Merlin simulator (libertem-live[sim]==0.3.0 from
// PyPI): STEMDOT_MERLIN_SIM, else the repository's python/.venv, else the PATH's; it
// skips the test with a message when there is none.
func simulator(t *testing.T) string {
	if p := os.Getenv("STEMDOT_MERLIN_SIM"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0) // <repo>/live/merlin/sim_test.go
	venv := filepath.Join(filepath.Dir(file), "..", "..", "python", ".venv", "bin", "libertem-live-mib-sim")
	if _, err := os.Stat(venv); err == nil {
		return venv
	}
	if p, err := exec.LookPath("libertem-live-mib-sim"); err == nil {
		return p
	}
	t.Skipf("LiberTEM-live's Merlin simulator is not installed (python/.venv/bin/python -m pip install 'libertem-live[sim]==0.3.0', or set STEMDOT_MERLIN_SIM): skipping the test against it")
	return ""
}

var simListening = regexp.MustCompile(`(DataSocketServer|ControlSocketServer) listening \('127\.0\.0\.1', (\d+)\)`)

// startSim runs the simulator on the MIB file name of the test data (the file and its
// .hdr alone in a directory, as the simulator takes every .mib its .hdr's name starts)
// with the extra arguments, on free loopback ports, until the test ends; it returns
// the data and control ports' addresses.
func startSim(t *testing.T, name string, args ...string) (data, control string) {
	sim := simulator(t)
	path := testfiles.File(t, "mib/"+name)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(path, filepath.Join(dir, "scan.mib")))
	hdr, err := os.ReadFile(strings.TrimSuffix(path, ".mib") + ".hdr")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scan.hdr"), hdr, 0o644))
	cmd := exec.Command(sim, append([]string{filepath.Join(dir, "scan.hdr"), "--host", "127.0.0.1",
		"--data-port", "0", "--control-port", "0", "--trigger-port", "0"}, args...)...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	ports := make(chan [2]string, 8)
	var log strings.Builder
	go func() {
		defer close(exited)
		defer cmd.Wait()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := simListening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case ports <- [2]string{m[1], "127.0.0.1:" + m[2]}:
				default:
				}
			} else if log.Len() < 1<<16 {
				log.WriteString(sc.Text() + "\n")
			}
		}
		close(ports)
	}()
	timeout := time.After(5 * time.Minute) // the simulator imports LiberTEM and numba
	for data == "" || control == "" {
		select {
		case p, ok := <-ports:
			if !ok { // the log is complete: its writer has ended
				t.Fatalf("the simulator exited before listening:\n%s", log.String())
			}
			if p[0] == "DataSocketServer" {
				data = p[1]
			} else {
				control = p[1]
			}
		case <-timeout:
			t.Fatalf("the simulator did not listen in 5 minutes")
		}
	}
	return data, control
}

// The frames that LiberTEM-live's simulator sends of a real MIB file (as stored: raw
// R64 frames, quads) decode as dataset/mib reads the file; passive mode, and active
// mode with a soft trigger.
func TestLiberTEMSimulator(t *testing.T) {
	for _, c := range []struct {
		name   string
		active bool
		nav    []int
	}{
		{"Single_9_Frame_CounterDepth_1_Rows_256RAW.mib", false, []int{1, 9}},
		{"Quad_9_Frame_CounterDepth_12_Rows_256.mib", false, nil},
		{"002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", false, []int{2, 4}},
		{"Single_9_Frame_CounterDepth_24_Rows_256.mib", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := testfiles.File(t, "mib/"+c.name)
			_, want := fileFrames(t, path, dataset.Options{})
			var opt Options
			if c.active {
				opt.Addr, opt.Control = startSim(t, c.name, "--wait-trigger")
				opt.SoftTrigger = true
				opt.Settings = [][2]string{{"TRIGGERSTART", "5"}}
			} else {
				opt.Addr, _ = startSim(t, c.name)
			}
			got, err := receive(t, opt)
			require.NoError(t, err)
			checkFrames(t, got, want)
			assert.Equal(t, c.nav, got.header.NavShape)
			assert.Equal(t, len(want), got.header.Frames)
		})
	}
}

// LiberTEM-live's simulator sends acquisition after acquisition on one connection:
// each its file's .hdr and frames (passive, without --wait-trigger), or with
// --continuous the .hdr once and the frames again and again, numbered on. Continue
// takes them as acquisitions of the file's frames.
func TestLiberTEMSimulatorContinue(t *testing.T) {
	const name = "Single_9_Frame_CounterDepth_12_Rows_256.mib"
	for _, args := range [][]string{nil, {"--continuous"}} {
		t.Run(strings.Join(append([]string{"repeated"}, args...), " "), func(t *testing.T) {
			t.Parallel()
			_, want := fileFrames(t, testfiles.File(t, "mib/"+name), dataset.Options{})
			addr, _ := startSim(t, name, args...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := New(Options{Addr: addr})
			defer r.Close()
			h, err := r.Start(ctx)
			require.NoError(t, err)
			for k := range 3 {
				assert.Equal(t, len(want), h.Frames)
				if k > 0 && args != nil {
					assert.Equal(t, []string{fmt.Sprintf("frames numbered on from %d came without a new acquisition header: an acquisition of the last header's 9 frames", 9*k+1)}, h.Notes)
				} else {
					assert.Empty(t, h.Notes)
				}
				got := map[int][]byte{}
				for len(got) < len(want) {
					var frames []live.Frame
					frames, err = r.Next(ctx, frames)
					require.NoError(t, err, "acquisition %d", k)
					for _, f := range frames {
						dst := make([]byte, h.FrameBytes())
						require.NoError(t, r.Decode(dst, f))
						got[f.Index] = dst
						r.Release(f)
					}
				}
				for i, w := range want {
					require.Equalf(t, w, got[i], "acquisition %d, frame %d", k, i)
				}
				h, err = r.Continue(ctx)
				require.NoError(t, err)
			}
			assert.Zero(t, r.Stats().Missing)
		})
	}
}
