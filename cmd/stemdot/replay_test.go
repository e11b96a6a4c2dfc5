package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/live/merlin"
)

// replayFrames runs stemdot replay with args, receives one acquisition from it, stops
// it with SIGINT (exit status 0) and returns the header, the decoded frames and what
// stemdot printed first.
func replayFrames(t *testing.T, args ...string) (live.Header, [][]byte, string) {
	cmd := exec.Command(stemdotBin, append([]string{"replay", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	br := bufio.NewReader(stderr)
	var line string
	var m []string
	for m == nil {
		line, err = br.ReadString('\n')
		require.NoError(t, err, "stemdot replay printed no data port")
		m = regexp.MustCompile(`data port (127\.0\.0\.1:\d+)`).FindStringSubmatch(line)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := merlin.New(merlin.Options{Addr: m[1]})
	h, err := r.Start(ctx)
	require.NoError(t, err)
	frames := make([][]byte, h.Frames)
	var batch []live.Frame
	for {
		batch, err = r.Next(ctx, batch[:0])
		if err != nil {
			break
		}
		for _, f := range batch {
			frames[f.Index] = make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(frames[f.Index], f))
			r.Release(f)
		}
	}
	require.Equal(t, io.EOF, err)
	require.NoError(t, r.Close())
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	io.Copy(io.Discard, br) // until stemdot exits
	require.NoError(t, cmd.Wait(), "stemdot replay ends with status 0 at Ctrl-C")
	return h, frames, line
}

func TestReplay(t *testing.T) {
	path := testfiles.File(t, "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib")
	want, _, _ := mibFrames(t, path)
	h, frames, line := replayFrames(t, path, "--as", "merlin")
	assert.Contains(t, line, "(9 frames as stored) as a Merlin on data port 127.0.0.1:")
	require.Len(t, frames, len(want))
	for i := range want {
		for p, v := range want[i] {
			require.Equalf(t, v, float64(binary.NativeEndian.Uint16(frames[i][2*p:])), "frame %d pixel %d", i, p)
		}
	}
	assert.Equal(t, dataset.Uint16, h.DType)
	assert.Equal(t, [2]int{512, 512}, h.SigShape)

	// Another format: sent as U16 frames with its nav shape.
	npy := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", npy, "--nav-shape", "3,4", "--sig-shape", "16,32", "--dtype", "uint16")
	require.Zero(t, code, stderr)
	ds, err := dataset.Open(npy, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	h, frames, line = replayFrames(t, npy, "--as", "merlin", "--rate", "1000")
	assert.Contains(t, line, "(12 frames as U16 frames)")
	assert.Equal(t, []int{3, 4}, h.NavShape)
	for i, f := range frames {
		want := make([]byte, ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(i, i+1, want))
		require.Equalf(t, want, f, "frame %d", i)
	}

	_, stderr, code = run(t, "replay", path, "--as", "dectris")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `--as "dectris": the protocol to speak is merlin`)
}
