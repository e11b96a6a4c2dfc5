package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// startReplay runs stemdot replay with args (on a free loopback port) until the test
// ends, and returns the address it serves.
func startReplay(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(stemdotBin, append([]string{"replay", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() })
	br := bufio.NewReader(stderr)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "stemdot replay printed no address")
		if m := regexp.MustCompile(`(data port|stream) (127\.0\.0\.1:\d+)`).FindStringSubmatch(line); m != nil {
			go io.Copy(io.Discard, br)
			return m[2]
		}
	}
}

var liveMasks = []string{"--mask", "disk:128,128,40", "--mask", "ring:128,128,50,120", "--mask", "com"}

// TestLiveEqualsApply: a file sent by stemdot replay (Merlin, as stored: single chip,
// quad, raw 1-bit; DECTRIS stream v1 and v2: bitshuffle-LZ4) and received by stemdot
// live gives stemdot apply's result for the file, bit for bit, and so does its record.
func TestLiveEqualsApply(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file, as, scheme, nav string
		extra                 []string
	}{
		{"mib/Single_9_Frame_CounterDepth_12_Rows_256.mib", "merlin", "merlin", "3,3", nil},
		{"mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib", "merlin", "merlin", "3,3", nil},
		{"mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib", "merlin", "merlin", "3,3", nil},
		{"mib/Single_9_Frame_CounterDepth_12_Rows_256.mib", "dectris-v1", "dectris", "3,3", []string{"--stream", "v1"}},
		{"mib/Single_9_Frame_CounterDepth_6_Rows_256.mib", "dectris-v2", "dectris", "3,3", nil},
	} {
		t.Run(c.as+"/"+filepath.Base(c.file), func(t *testing.T) {
			path := testfiles.File(t, c.file)
			want := filepath.Join(dir, "apply.npy")
			_, stderr, code := run(t, append([]string{"apply", path, "--nav-shape", c.nav, "--out", want, "-q"}, liveMasks...)...)
			require.Equal(t, 0, code, stderr)
			replayArgs := []string{path, "--as", c.as}
			if c.as != "merlin" {
				replayArgs = append(replayArgs, "--nav-shape", c.nav)
			}
			addr := startReplay(t, replayArgs...)
			got, rec := filepath.Join(dir, "live.npy"), filepath.Join(dir, "rec.mib")
			if c.scheme == "dectris" {
				rec = filepath.Join(dir, "rec.npy")
			}
			args := append([]string{"live", c.scheme + "://" + addr, "--passive", "--nav-shape", c.nav, "--out", got, "--record", rec}, c.extra...)
			stdout, stderr, code := run(t, append(args, liveMasks...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, stdout, "(9 frames received, 0 missing, 0 late, 0 stalls)")
			wshape, w := readResult(t, want)
			gshape, g := readResult(t, got)
			assert.Equal(t, wshape, gshape)
			assert.Equal(t, w, g, "live differs from apply")

			var side struct {
				Live struct {
					Source   string `json:"source"`
					Partial  bool   `json:"partial"`
					Received int    `json:"received"`
					Record   string `json:"record"`
				} `json:"live"`
			}
			b, err := os.ReadFile(strings.TrimSuffix(got, ".npy") + ".json")
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &side))
			assert.Equal(t, c.scheme+"://"+addr, side.Live.Source)
			assert.False(t, side.Live.Partial)
			assert.Equal(t, 9, side.Live.Received)
			assert.Equal(t, rec, side.Live.Record)

			again := filepath.Join(dir, "again.npy")
			_, stderr, code = run(t, append([]string{"apply", rec, "--nav-shape", c.nav, "--out", again, "-q"}, liveMasks...)...)
			require.Equal(t, 0, code, stderr)
			_, a := readResult(t, again)
			assert.Equal(t, w, a, "apply on the record differs")
		})
	}
}

// TestLivePartial: an acquisition cut off (the replay stopped mid-scan) gives the frames
// received, NaN at the positions without a frame, a sidecar that says so, and exit
// status 2, or 0 with --allow-partial.
func TestLivePartial(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scan.npy")
	_, stderr, code := run(t, "synth", "--out", path, "--nav-shape", "16,16", "--sig-shape", "64,64")
	require.Equal(t, 0, code, stderr)
	for _, allow := range []bool{false, true} {
		cmd := exec.Command(stemdotBin, "replay", path, "--as", "merlin", "--listen", "127.0.0.1:0", "--rate", "400")
		se, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		br := bufio.NewReader(se)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		addr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(line)
		go func() { time.Sleep(300 * time.Millisecond); cmd.Process.Kill() }() // about 120 of 256 frames
		out := filepath.Join(dir, fmt.Sprintf("partial%v.npy", allow))
		args := []string{"live", "merlin://" + addr, "--passive", "--mask", "disk:32,32,10", "--out", out}
		if allow {
			args = append(args, "--allow-partial")
		}
		_, stderr, code := run(t, args...)
		cmd.Wait()
		if allow {
			require.Equal(t, 0, code, stderr)
		} else {
			require.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, "partial result written to "+out)
			assert.Contains(t, stderr, "give --allow-partial")
		}
		assert.Contains(t, stderr, "partial result,")
		shape, vals := readResult(t, out)
		assert.Equal(t, []int{16, 16, 1}, shape)
		nan := 0
		for i, v := range vals {
			if math.IsNaN(v) {
				nan++
			} else if nan > 0 {
				t.Fatalf("position %d has a value after positions without a frame", i)
			}
		}
		assert.Greater(t, nan, 0, "no position without a frame")
		assert.Less(t, nan, 256)
		b, err := os.ReadFile(strings.TrimSuffix(out, ".npy") + ".json")
		require.NoError(t, err)
		assert.Contains(t, string(b), `"partial": true`)
		assert.Contains(t, string(b), fmt.Sprintf(`"positions_without_frame": [
      [
        %d,
        %d
      ]`, 256-nan, nan))
	}
}

// TestLiveErrors: faults that end the run before any result, each with a clear message.
func TestLiveErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.npy")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"live", "merlin://127.0.0.1:1", "--passive", "--mask", "disk:1,1,1", "--out", out}, "cannot connect to the data port 127.0.0.1:1"},
		{[]string{"live", "tpx://127.0.0.1", "--mask", "disk:1,1,1", "--out", out}, `unknown scheme "tpx": want dectris or merlin`},
		{[]string{"live", "merlin://127.0.0.1", "--stream", "v1", "--mask", "disk:1,1,1", "--out", out}, "--stream is not an option of merlin:// sources"},
		{[]string{"live", "dectris://127.0.0.1", "--mask", "disk:auto", "--out", out}, "the auto mask specs need the sum frame"},
		{[]string{"live", "dectris://127.0.0.1", "--mask", "disk:1,1,1"}, "--out RESULT.npy is required"},
		{[]string{"live", "dectris://127.0.0.1", "--mask", "disk:1,1,1", "--out", out}, "active mode configures and arms the detector through its SIMPLON API: give source option dectris_api"},
	} {
		_, stderr, code := run(t, c.args...)
		assert.Equal(t, 1, code, c.args)
		assert.Contains(t, stderr, c.msg, c.args)
		assert.NoFileExists(t, out)
	}
}

// liveSimPython is the repository's python/.venv with LiberTEM-live's simulators
// (libertem-live[sim]), or skips.
func liveSimPython(t *testing.T) string {
	return testfiles.Python(t, "libertem_live.detectors.dectris.sim")
}

// TestLiveAgainstLiberTEMSimulators: stemdot live against the simulators of
// LiberTEM-live 0.3.0, an independent implementation of both protocols. Merlin
// (libertem-live-mib-sim on a real file and its .hdr): the result is stemdot apply's
// on the file, bit for bit. DECTRIS (DectrisSim: SIMPLON REST and stream v1, every pixel
// of frame i equal to i), active mode: a mask of ones gives i·pixels exactly.
func TestLiveAgainstLiberTEMSimulators(t *testing.T) {
	py := liveSimPython(t)
	dir := t.TempDir()
	t.Run("merlin", func(t *testing.T) {
		sim := filepath.Join(filepath.Dir(py), "libertem-live-mib-sim")
		src := testfiles.File(t, "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib")
		sdir := t.TempDir()
		require.NoError(t, os.Symlink(src, filepath.Join(sdir, "scan.mib")))
		hdr, err := os.ReadFile(strings.TrimSuffix(src, ".mib") + ".hdr")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(sdir, "scan.hdr"), hdr, 0o644))
		cmd := exec.Command(sim, filepath.Join(sdir, "scan.hdr"), "--host", "127.0.0.1", "--data-port", "0", "--control-port", "0",
			"--trigger-port", "0", "--nav-shape", "3", "3")
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() })
		sc := bufio.NewScanner(stderr)
		data := ""
		for data == "" && sc.Scan() {
			if m := regexp.MustCompile(`DataSocketServer listening \('127\.0\.0\.1', (\d+)\)`).FindStringSubmatch(sc.Text()); m != nil {
				data = "127.0.0.1:" + m[1]
			}
		}
		require.NotEmpty(t, data, "the simulator did not listen")
		go io.Copy(io.Discard, stderr)
		want, got := filepath.Join(dir, "apply.npy"), filepath.Join(dir, "live.npy")
		_, e, code := run(t, append([]string{"apply", src, "--nav-shape", "3,3", "--out", want, "-q"}, liveMasks...)...)
		require.Equal(t, 0, code, e)
		_, e, code = run(t, append([]string{"live", "merlin://" + data, "--passive", "--nav-shape", "3,3", "--out", got, "-q"}, liveMasks...)...)
		require.Equal(t, 0, code, e)
		_, w := readResult(t, want)
		_, g := readResult(t, got)
		assert.Equal(t, w, g)
	})
	t.Run("dectris", func(t *testing.T) {
		const n = 12
		cmd := exec.Command(py, "-c", `
import sys
from libertem_live.detectors.dectris.sim import DectrisSim
sim = DectrisSim(port=0, zmqport=0, num_mock_frames=int(sys.argv[1]), verbose=False)
sim.start()
sim.wait_for_listen()
print(sim.port, sim.zmqport, flush=True)
sys.stdin.read()
sim.stop()
`, fmt.Sprint(n))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { stdin.Close(); cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err, "the simulator did not start")
		var api, zmq int
		_, err = fmt.Sscan(line, &api, &zmq)
		require.NoError(t, err, line)
		got := filepath.Join(dir, "sim.npy")
		_, e, code := run(t, "live", fmt.Sprintf("dectris://127.0.0.1:%d", zmq), "--stream", "v1", "--dectris-api", fmt.Sprintf("127.0.0.1:%d", api),
			"--trigger-mode", "exte", "--start-timeout", "60", "--nav-shape", fmt.Sprintf("%d", n), "--mask", "rect:0,0,512,512", "--float64", "--out", got, "-q")
		require.Equal(t, 0, code, e)
		shape, g := readResult(t, got)
		assert.Equal(t, []int{n, 1}, shape)
		for i, v := range g {
			assert.Equal(t, float64(i*512*512), v, "frame %d", i)
		}
	})
}
