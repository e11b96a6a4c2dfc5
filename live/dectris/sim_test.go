package dectris

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// simDriver runs LiberTEM-live's DECTRIS simulator (libertem-live[sim] 0.3.0, an
// independent implementation of SIMPLON's REST API and stream v1: mock frames of 512×512
// uint16 whose every pixel is the frame's index, bitshuffle-LZ4 with the 12-byte header
// zeroed, each part a message of its own), prints its API and ZeroMQ ports, and stops
// when its standard input closes.
const simDriver = `
import sys
from libertem_live.detectors.dectris.sim import DectrisSim
sim = DectrisSim(port=0, zmqport=0, num_mock_frames=int(sys.argv[1]), verbose=False)
sim.start()
sim.wait_for_listen()
print(sim.port, sim.zmqport, flush=True)
sys.stdin.read()
sim.stop()
`

// TestLiberTEMSimulator receives a series from LiberTEM-live's simulator in active mode
// (configure, arm, disarm through its REST API): every pixel of frame i must be i.
func TestLiberTEMSimulator(t *testing.T) {
	py := testfiles.Python(t, "libertem_live.detectors.dectris.sim")
	const n = 24
	cmd := exec.Command(py, "-c", simDriver, fmt.Sprint(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the simulator did not start")
	var apiPort, zmqPort int
	_, err = fmt.Sscan(strings.TrimSpace(line), &apiPort, &zmqPort)
	require.NoError(t, err, line)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r, err := New(Options{Stream: fmt.Sprintf("127.0.0.1:%d", zmqPort), Protocol: V1, API: fmt.Sprintf("localhost:%d", apiPort),
		Active: true, NTrigger: n, NImages: 1, TriggerMode: "exte", StartTimeout: 60 * time.Second})
	require.NoError(t, err)
	defer r.Close()
	h, got, err := receiveAll(t, ctx, r)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, n, h.Frames)
	assert.Equal(t, [2]int{512, 512}, h.SigShape)
	assert.Equal(t, dataset.Uint16, h.DType)
	require.Len(t, got, n)
	for i := range n {
		for p := 0; p < len(got[i]); p += 2 {
			if v := binary.LittleEndian.Uint16(got[i][p:]); v != uint16(i) {
				t.Fatalf("frame %d pixel %d is %d, want %d", i, p/2, v, i)
			}
		}
	}
	require.NoError(t, r.Close())
}
