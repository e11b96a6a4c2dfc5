package merlin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// The real MIB files of shared/data/mib, and the scan shape their .hdr gives (Frames
// in Acquisition / Frames per Trigger, Frames per Trigger; none where Frames per
// Trigger is 1).
var realMIB = []struct {
	name string
	nav  []int
}{
	{"001_4x2_6bit.mib", nil},
	{"002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", []int{2, 4}},
	{"Single_9_Frame_CounterDepth_1_Rows_256.mib", []int{1, 9}},
	{"Single_9_Frame_CounterDepth_1_Rows_256RAW.mib", []int{1, 9}},
	{"Single_9_Frame_CounterDepth_6_Rows_256.mib", []int{1, 9}},
	{"Single_9_Frame_CounterDepth_12_Rows_256.mib", []int{1, 9}},
	{"Single_9_Frame_CounterDepth_24_Rows_256.mib", nil},
	{"Quad_9_Frame_CounterDepth_6_Rows_256.mib", nil},
	{"Quad_9_Frame_CounterDepth_12_Rows_256.mib", nil},
}

// checkFrames checks that got holds every frame of want, bit for bit, in order.
func checkFrames(t *testing.T, got *received, want [][]byte) {
	t.Helper()
	require.Equal(t, io.EOF, got.err)
	require.Len(t, got.frames, len(want))
	for i, w := range want {
		require.Equalf(t, w, got.frames[i], "frame %d", i)
		require.Equal(t, i, got.order[i])
	}
	assert.Equal(t, len(want), got.stats.Received)
	assert.Zero(t, got.stats.Missing)
	assert.Zero(t, got.stats.Late)
}

// The receiver decodes each frame of a real MIB file, replayed as stored (R64 raw
// frames and quads included), as dataset/mib reads it from the file.
func TestReplayRealMIB(t *testing.T) {
	for _, c := range realMIB {
		t.Run(c.name, func(t *testing.T) {
			path := testfiles.File(t, "mib/"+c.name)
			ds, want := fileFrames(t, path, dataset.Options{})
			src, err := FromMIB(path, nil)
			require.NoError(t, err)
			defer src.Close()
			got, err := receive(t, Options{Addr: serve(t, src, ServeOptions{})})
			require.NoError(t, err)
			checkFrames(t, got, want)
			h := got.header
			assert.Regexp(t, `^merlin \((U08|U16|U32|R64) (1|6|12|24)-bit (1x1|2x2)\)$`, h.Detector)
			assert.Equal(t, ds.SigShape(), h.SigShape)
			assert.Equal(t, ds.DType(), h.DType)
			assert.Equal(t, len(want), h.Frames)
			assert.Equal(t, c.nav, h.NavShape)
			hdr, err := os.ReadFile(strings.TrimSuffix(path, ".mib") + ".hdr")
			require.NoError(t, err)
			assert.Equal(t, string(hdr), string(got.acqHdr), "the acquisition header is the file's .hdr")
			record := ds.FrameBytes() + 384
			switch {
			case ds.SigShape() == [2]int{512, 512}:
				record = ds.FrameBytes() + 768
			case strings.Contains(c.name, "RAW"):
				record = 256*256/8 + 384
			}
			assert.Equal(t, int64(15+len(hdr)+len(want)*(15+record)), got.stats.Bytes)
		})
	}
}

// A dataset of any format is sent as U08/U16/U32 frames with its scan shape.
func TestReplayDataset(t *testing.T) {
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32} {
		t.Run(dt.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.npy")
			w, err := dataset.Create(path, "npy", []int{3, 5}, [2]int{24, 40}, dt)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, uint64(dt)))
			data := make([]byte, 15*24*40*dt.Size())
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			require.NoError(t, w.WriteFrames(data))
			require.NoError(t, w.Close())
			ds, want := fileFrames(t, path, dataset.Options{})
			src, err := FromDataset(ds)
			require.NoError(t, err)
			got, err := receive(t, Options{Addr: serve(t, src, ServeOptions{})})
			require.NoError(t, err)
			checkFrames(t, got, want)
			assert.Equal(t, []int{3, 5}, got.header.NavShape)
			assert.Equal(t, 15, got.header.Frames)
			assert.Equal(t, dt, got.header.DType)
		})
	}
	path := filepath.Join(t.TempDir(), "f.npy")
	w, err := dataset.Create(path, "npy", []int{2}, [2]int{4, 4}, dataset.Float32)
	require.NoError(t, err)
	require.NoError(t, w.WriteFrames(make([]byte, 2*4*4*4)))
	require.NoError(t, w.Close())
	ds, _ := fileFrames(t, path, dataset.Options{})
	_, err = FromDataset(ds)
	assert.EqualError(t, err, fmt.Sprintf("merlin: %s holds float32 pixels: a Merlin stream sends uint8, uint16 or uint32 counts (U08, U16, U32); convert the data to one of them first", path))
	assert.Equal(t, errs.DType, errs.KindOf(err))
}

// writeR64 writes a MIB file of n raw-packed frames with header fields
// chips, width, height, layout and counter depth, and random pixels.
func writeR64(t testing.TB, n, headerBytes int, fields string, pixelBytes int) string {
	rng := rand.New(rand.NewPCG(7, uint64(pixelBytes)))
	var file []byte
	for i := range n {
		h := fmt.Appendf(nil, "MQ1,%06d,%05d,%s,", i+1, headerBytes, fields)
		file = append(file, h...)
		file = append(file, make([]byte, headerBytes-len(h))...)
		for range pixelBytes {
			file = append(file, byte(rng.Uint32()))
		}
	}
	path := filepath.Join(t.TempDir(), "r64.mib")
	require.NoError(t, os.WriteFile(path, file, 0o644))
	return path
}

// Raw-packed frames of every counter depth, single chip and quad, decode as
// dataset/mib decodes them from the file.
func TestReplayR64(t *testing.T) {
	for _, c := range []struct {
		name        string
		headerBytes int
		fields      string
		pixelBytes  int
		sig         [2]int
		dt          dataset.DType
	}{
		{"single 12-bit", 384, "01,0256,0256,R64,   1x1,01,x,12", 256 * 256 * 2, [2]int{256, 256}, dataset.Uint16},
		{"single 6-bit", 384, "01,0256,0256,R64,   1x1,01,x,6", 256 * 256, [2]int{256, 256}, dataset.Uint8},
		{"single 24-bit", 384, "01,0256,0256,R64,   1x1,01,x,24", 256 * 256 * 4, [2]int{256, 256}, dataset.Uint32},
		{"single 24-bit, header width doubled", 384, "01,0512,0256,R64,   1x1,01,x,24", 256 * 256 * 4, [2]int{256, 256}, dataset.Uint32},
		{"quad 1-bit", 768, "04,1024,0256,R64,   2x2,0F,x,1", 512 * 512 / 8, [2]int{512, 512}, dataset.Uint8},
		{"quad 12-bit", 768, "04,1024,0256,R64,   2x2G,0F,x,12", 512 * 512 * 2, [2]int{512, 512}, dataset.Uint16},
		{"quad 24-bit", 768, "04,1024,0256,R64,   2x2,0F,x,24", 512 * 512 * 4, [2]int{512, 512}, dataset.Uint32},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeR64(t, 3, c.headerBytes, c.fields, c.pixelBytes)
			_, want := fileFrames(t, path, dataset.Options{})
			src, err := FromMIB(path, nil)
			require.NoError(t, err)
			defer src.Close()
			got, err := receive(t, Options{Addr: serve(t, src, ServeOptions{})})
			require.NoError(t, err)
			checkFrames(t, got, want)
			assert.Equal(t, c.sig, got.header.SigShape)
			assert.Equal(t, c.dt, got.header.DType)
			assert.Equal(t, 3, got.header.Frames, "the frame count of a file without .hdr")
			f := strings.Split(c.fields, ",")
			assert.Equal(t, "merlin (R64 "+f[7]+"-bit "+strings.TrimSpace(f[4])+")", got.header.Detector)
			assert.Nil(t, got.header.NavShape)
		})
	}
}

// Active mode: the receiver sets the frame count and starts the acquisition on the
// control port; Serve repeats the file's frames as needed.
func TestActive(t *testing.T) {
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	_, want := fileFrames(t, path, dataset.Options{})
	src, err := FromMIB(path, []int{4, 5})
	require.NoError(t, err)
	defer src.Close()
	ctrl := listen(t)
	addr := serve(t, src, ServeOptions{Control: ctrl})
	got, err := receive(t, Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 20})
	require.NoError(t, err)
	require.Equal(t, io.EOF, got.err)
	assert.Equal(t, 20, got.header.Frames)
	assert.Equal(t, []int{4, 5}, got.header.NavShape)
	require.Len(t, got.frames, 20)
	for i := range 20 {
		require.Equalf(t, want[i%9], got.frames[i], "frame %d", i)
	}
	// A second acquisition on the same server.
	got, err = receive(t, Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 3})
	require.NoError(t, err)
	assert.Equal(t, io.EOF, got.err)
	assert.Len(t, got.frames, 3)
}

// A rate limit paces the frames: 20 frames at 200 Hz take at least 95 ms (a lower
// bound only: a slower machine takes longer).
func TestServeRate(t *testing.T) {
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_6_Rows_256.mib")
	src, err := FromMIB(path, nil)
	require.NoError(t, err)
	defer src.Close()
	ctrl := listen(t)
	addr := serve(t, src, ServeOptions{Control: ctrl, Rate: 200})
	t0 := time.Now()
	got, err := receive(t, Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 20})
	require.NoError(t, err)
	assert.Equal(t, io.EOF, got.err)
	assert.Len(t, got.frames, 20)
	assert.GreaterOrEqual(t, time.Since(t0), 95*time.Millisecond)
}

// CMD,STOPACQUISITION (sent by Close while the acquisition runs) stops the replay's
// acquisition; the next one starts afresh.
func TestServeStop(t *testing.T) {
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_6_Rows_256.mib")
	_, want := fileFrames(t, path, dataset.Options{})
	src, err := FromMIB(path, nil)
	require.NoError(t, err)
	defer src.Close()
	ctrl := listen(t)
	addr := serve(t, src, ServeOptions{Control: ctrl, Rate: 1000})
	r := New(Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 1 << 20})
	_, err = r.Start(context.Background())
	require.NoError(t, err)
	_, err = r.Next(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	got, err := receive(t, Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 3})
	require.NoError(t, err)
	checkFrames(t, got, want[:3])
}

// CMD,STOPACQUISITION stops the frames on the data connection, which stays open, as
// Merlin's does: nothing more comes after the answer.
func TestServeStopQuiet(t *testing.T) {
	src, err := FromMIB(testfiles.File(t, "mib/Single_9_Frame_CounterDepth_6_Rows_256.mib"), nil)
	require.NoError(t, err)
	defer src.Close()
	ctrl := listen(t)
	addr := serve(t, src, ServeOptions{Control: ctrl, Rate: 200})
	data, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer data.Close()
	c, err := dialControl(context.Background(), ctrl.Addr().String(), 10*time.Second)
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()
	_, err = c.do(ctx, "SET", "NUMFRAMESTOACQUIRE", "100000")
	require.NoError(t, err)
	_, err = c.do(ctx, "CMD", "STARTACQUISITION", "")
	require.NoError(t, err)
	br := bufio.NewReader(data)
	readMsg := func() ([]byte, error) {
		var p [prefixBytes]byte
		if _, err := io.ReadFull(br, p[:]); err != nil {
			return nil, err
		}
		n, err := parsePrefix(p[:])
		require.NoError(t, err)
		msg := make([]byte, n)
		_, err = io.ReadFull(br, msg)
		return msg, err
	}
	msg, err := readMsg()
	require.NoError(t, err)
	require.Contains(t, string(msg), "Frames in Acquisition (Number):\t100000\r\n")
	for i := range 3 {
		msg, err = readMsg()
		require.NoError(t, err)
		require.Equal(t, i+1, frameNumber(msg))
	}
	_, err = c.do(ctx, "CMD", "STOPACQUISITION", "")
	require.NoError(t, err)
	v, err := c.do(ctx, "GET", "NUMFRAMESTOACQUIRE", "")
	require.NoError(t, err)
	assert.Equal(t, "100000", v)
	_, err = c.do(ctx, "GET", "NOSUCHTHING", "")
	assert.ErrorContains(t, err, `GET,NOSUCHTHING: the detector answered code "2" (unrecognised command)`)
	// What was written before the answer, then nothing.
	data.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		if _, err = readMsg(); err != nil {
			break
		}
	}
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "the connection stays open and quiet")
}

// Before any SET, the control port answers IMAGEX, IMAGEY and COUNTERDEPTH as the
// frames give them (a Merlin's do; LiberTEM-live's active acquisition reads them): a raw
// quad's decoded 512×512, a single chip's 256×256, and the file's counter depth; and a
// dataset sent as U16 frames, whose headers say 12 bits as Merlin's do.
func TestServeControlParams(t *testing.T) {
	u16, err := dataset.Open(testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib"), dataset.Options{NavShape: []int{3, 3}})
	require.NoError(t, err)
	defer u16.Close()
	for _, c := range []struct {
		name string
		src  func() (*Source, error)
		want [3]string
	}{
		{"raw quad 6-bit", func() (*Source, error) {
			return FromMIB(testfiles.File(t, "mib/Quad_9_Frame_CounterDepth_6_Rows_256.mib"), nil)
		}, [3]string{"512", "512", "6"}},
		{"raw single 12-bit", func() (*Source, error) {
			return FromMIB(writeR64(t, 2, 384, "01,0256,0256,R64,   1x1,01,x,12", 256*256*2), nil)
		}, [3]string{"256", "256", "12"}},
		{"dataset", func() (*Source, error) { return FromDataset(u16) }, [3]string{"256", "256", "12"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := c.src()
			require.NoError(t, err)
			defer src.Close()
			ctrl := listen(t)
			serve(t, src, ServeOptions{Control: ctrl})
			cc, err := dialControl(context.Background(), ctrl.Addr().String(), 10*time.Second)
			require.NoError(t, err)
			defer cc.close()
			for i, name := range []string{"IMAGEX", "IMAGEY", "COUNTERDEPTH"} {
				v, err := cc.do(context.Background(), "GET", name, "")
				require.NoError(t, err)
				assert.Equal(t, c.want[i], v, name)
			}
		})
	}
}
