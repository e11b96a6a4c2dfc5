package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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

// continuousInfo is the sidecar's live.continuous section.
type continuousInfo struct {
	Scan     int    `json:"scan"`
	Complete int    `json:"scans_complete"`
	Dropped  int    `json:"scans_dropped"`
	Stopped  string `json:"stopped"`
}

// readContinuous reads the continuous section of result's sidecar; ok false while
// there is none (the sidecar not written yet).
func readContinuous(t *testing.T, result string) (continuousInfo, bool) {
	var side struct {
		Live struct {
			Continuous *continuousInfo `json:"continuous"`
		} `json:"live"`
	}
	b, err := os.ReadFile(strings.TrimSuffix(result, ".npy") + ".json")
	if err != nil || json.Unmarshal(b, &side) != nil || side.Live.Continuous == nil {
		return continuousInfo{}, false
	}
	return *side.Live.Continuous, true
}

// startReplayPorts runs stemdot replay with args until the test ends, and returns the
// addresses of its line "... on data port A, control port B" (or "stream A, SIMPLON
// API B").
func startReplayPorts(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command(stemdotBin, append([]string{"replay", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err, "stemdot replay printed no address")
	go io.Copy(io.Discard, stderr)
	return regexp.MustCompile(`127\.0\.0\.1:\d+`).FindAllString(line, -1)
}

// liveUntil runs stemdot live with args (--out result) until its sidecar says that
// scans scans are complete, checking the result on disk meanwhile with running (the
// NPY and its sidecar are each replaced whole, not both at once), then interrupts it
// (SIGINT) and returns its exit status, stdout and stderr.
func liveUntil(t *testing.T, result string, scans int, running func(), args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(stemdotBin, append(append([]string{"live"}, args...), "--out", result)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if !cmd.ProcessState.Exited() {
			cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.After(2 * time.Minute)
	seen := 0
	for seen < scans {
		select {
		case err := <-exited:
			t.Fatalf("stemdot live ended (%v) before %d scans were complete:\n%s", err, scans, e.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no %d complete scans in 2 minutes:\n%s", scans, e.String())
		case <-time.After(20 * time.Millisecond):
		}
		if c, ok := readContinuous(t, result); ok && c.Complete > seen {
			seen = c.Complete
			running()
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := <-exited
	exited <- err
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, o.String(), e.String()
}

// TestLiveContinuousMerlinActive: stemdot live --continuous starts acquisition after
// acquisition on stemdot replay's Merlin control port; each complete scan, on disk while
// the run goes on and after Ctrl-C, is stemdot apply's result of the file; the scan in
// progress at Ctrl-C is dropped, and the sidecar says so.
func TestLiveContinuousMerlinActive(t *testing.T) {
	dir := t.TempDir()
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	want := filepath.Join(dir, "apply.npy")
	_, stderr, code := run(t, append([]string{"apply", path, "--nav-shape", "3,3", "--out", want, "-q"}, liveMasks...)...)
	require.Equal(t, 0, code, stderr)
	_, w := readResult(t, want)
	ports := startReplayPorts(t, path, "--as", "merlin", "--control", "127.0.0.1:0", "--rate", "300")
	require.Len(t, ports, 2)
	got := filepath.Join(dir, "live.npy")
	check := func(what string) {
		shape, g := readResult(t, got)
		assert.Equal(t, []int{3, 3, 5}, shape, what)
		assert.Equal(t, w, g, "%s: live differs from apply", what)
	}
	running := func() {
		if _, err := os.Stat(got); err == nil {
			check("while running") // the latest complete scan, whole, while the run goes on
		}
	}
	code, stdout, stderr := liveUntil(t, got, 3, running, append([]string{"merlin://" + ports[0], "--control", ports[1], "--nav-shape", "3,3", "--continuous"}, liveMasks...)...)
	require.Equal(t, 0, code, stderr)
	check("after Ctrl-C")
	c, ok := readContinuous(t, got)
	require.True(t, ok)
	assert.GreaterOrEqual(t, c.Complete, 3)
	assert.Equal(t, c.Complete+c.Dropped, c.Scan+map[bool]int{true: 1, false: 0}[strings.Contains(c.Stopped, "in progress")])
	assert.Regexp(t, `^stopped \(cancelled\)(; scan \d+, in progress \(\d of 9 frames received\), is dropped)?$`, c.Stopped)
	assert.Contains(t, stdout, fmt.Sprintf("(scan %d, the last complete one: %d complete", c.Scan, c.Complete))
}

// TestLiveContinuousDECTRIS: an unbounded DECTRIS stream (stemdot replay's series of a
// billion triggers, its 9 frames again and again), cut into scans of 3 positions: scan
// k holds frames 3(k-1) mod 9 on, and its result is stemdot apply's of those frames.
func TestLiveContinuousDECTRIS(t *testing.T) {
	dir := t.TempDir()
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_6_Rows_256.mib")
	ports := startReplayPorts(t, path, "--as", "dectris-v2", "--api", "127.0.0.1:0", "--nav-shape", "9", "--rate", "200")
	require.Len(t, ports, 2)
	got := filepath.Join(dir, "live.npy")
	scans := scansOf(t, path, dir)
	code, _, stderr := liveUntil(t, got, 4, func() { checkScans(t, got, scans, false) }, append([]string{"dectris://" + ports[0], "--dectris-api", ports[1], "--trigger-mode", "exte",
		"--nimages", "1", "--ntrigger", "1000000000", "--nav-shape", "3", "--continuous"}, liveMasks...)...)
	require.Equal(t, 0, code, stderr)
	c := checkScans(t, got, scans, true)
	assert.GreaterOrEqual(t, c.Complete, 4)
	assert.Zero(t, c.Dropped-map[bool]int{true: 1, false: 0}[strings.Contains(c.Stopped, "in progress")], "no scan dropped but the one in progress")
	assert.Contains(t, stderr, "the acquisition's 1000000000 frames are cut into scans of 3")
}

// scansOf returns stemdot apply's results of the scans of 3 frames of the 9-frame MIB
// file at path: frames 0-2, 3-5 and 6-8.
func scansOf(t *testing.T, path, dir string) [3][]float64 {
	var out [3][]float64
	for k := range out {
		want := filepath.Join(dir, fmt.Sprintf("apply%d.npy", k))
		_, stderr, code := run(t, append([]string{"apply", path, "--frames", fmt.Sprintf("%d,3", 3*k), "--out", want, "-q"}, liveMasks...)...)
		require.Equal(t, 0, code, stderr)
		_, out[k] = readResult(t, want)
	}
	return out
}

// checkScans checks that the result on disk is one of the scans of 3 frames (scans);
// after the run (final), the one its sidecar names: scan k holds frames 3(k-1) mod 9
// on. It returns the sidecar's continuous section.
func checkScans(t *testing.T, result string, scans [3][]float64, final bool) continuousInfo {
	t.Helper()
	c, ok := readContinuous(t, result)
	if _, err := os.Stat(result); err != nil || !ok {
		require.False(t, final, "no result after the run")
		return c
	}
	shape, g := readResult(t, result)
	require.Equal(t, []int{3, 5}, shape)
	if final {
		require.Equal(t, scans[(c.Scan-1)%3], g, "scan %d differs from apply's of its frames", c.Scan)
	} else {
		require.Contains(t, scans[:], g, "the result on disk is not a whole scan's")
	}
	return c
}

// TestLiveContinuousLiberTEMSimulator: LiberTEM-live 0.3.0's Merlin simulator with
// --continuous sends its file's .hdr once, then the file's frames again and again,
// numbered on; stemdot live --continuous --nav-shape 3 cuts them into scans of 3
// frames, each stemdot apply's result of its frames of the file.
func TestLiveContinuousLiberTEMSimulator(t *testing.T) {
	py := liveSimPython(t)
	dir := t.TempDir()
	src := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	sdir := t.TempDir()
	require.NoError(t, os.Symlink(src, filepath.Join(sdir, "scan.mib")))
	hdr, err := os.ReadFile(strings.TrimSuffix(src, ".mib") + ".hdr")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "scan.hdr"), hdr, 0o644))
	cmd := exec.Command(filepath.Join(filepath.Dir(py), "libertem-live-mib-sim"), filepath.Join(sdir, "scan.hdr"), "--host", "127.0.0.1",
		"--data-port", "0", "--control-port", "0", "--trigger-port", "0", "--nav-shape", "3", "3", "--continuous", "--dwelltime", "5000")
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
	got := filepath.Join(dir, "live.npy")
	scans := scansOf(t, src, dir)
	code, _, e := liveUntil(t, got, 5, func() { checkScans(t, got, scans, false) }, append([]string{"merlin://" + data, "--passive", "--nav-shape", "3", "--continuous"}, liveMasks...)...)
	require.Equal(t, 0, code, e)
	c := checkScans(t, got, scans, true)
	assert.Zero(t, c.Dropped-map[bool]int{true: 1, false: 0}[strings.Contains(c.Stopped, "in progress")], "no scan dropped but the one in progress")
	assert.Regexp(t, "frames numbered on from [0-9]+ came without a new acquisition header: an acquisition of the last header's 9 frames", e)
	assert.Contains(t, e, "the acquisition's 9 frames are cut into scans of 3")
}

// TestLiveContinuousRefusals: --record with --continuous, and a stream that ends
// before a scan is complete.
func TestLiveContinuousRefusals(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.npy")
	_, stderr, code := run(t, "live", "merlin://127.0.0.1:1", "--continuous", "--record", "x.mib", "--mask", "disk:1,1,1", "--out", out)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--record records one acquisition: leave it out with --continuous")

	// A passive replay sends one acquisition and waits: cut short by its end (killed),
	// no scan is complete.
	path := filepath.Join(t.TempDir(), "scan.npy")
	_, stderr, code = run(t, "synth", "--out", path, "--nav-shape", "16,16", "--sig-shape", "64,64")
	require.Equal(t, 0, code, stderr)
	replay := exec.Command(stemdotBin, "replay", path, "--as", "merlin", "--listen", "127.0.0.1:0", "--rate", "400")
	se, err := replay.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, replay.Start())
	line, err := bufio.NewReader(se).ReadString('\n')
	require.NoError(t, err)
	addr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(line)
	go func() { time.Sleep(300 * time.Millisecond); replay.Process.Kill() }()
	_, stderr, code = run(t, "live", "merlin://"+addr, "--passive", "--continuous", "--mask", "disk:32,32,10", "--out", out)
	replay.Wait()
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "the stream ended before a scan was complete (1 dropped): no result")
	assert.NoFileExists(t, out)
}
