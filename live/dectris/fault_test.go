package dectris

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/zmtp"
	"github.com/stemdot/stemdot/live"
)

// A misbehaving sender: a PUSH socket that the test writes messages to by hand.

const fx, fy = 8, 6 // the test frames: 6 rows of 8 uint16 pixels

func testFrame(i int) []byte {
	b := make([]byte, 2*fx*fy)
	for p := range fx * fy {
		binary.LittleEndian.PutUint16(b[2*p:], uint16(100*i+p))
	}
	return b
}

func v1Header(series, frames int, detail string) [][]byte {
	parts := [][]byte{fmt.Appendf(nil, `{"htype":"dheader-1.0","series":%d,"header_detail":%q}`, series, detail)}
	if detail != "none" {
		parts = append(parts, fmt.Appendf(nil, `{"x_pixels_in_detector":%d,"y_pixels_in_detector":%d,"bit_depth_image":16,"nimages":1,"ntrigger":%d,"trigger_mode":"exte","description":"test"}`, fx, fy, frames))
	}
	return parts
}

func v1Image(series, i int, enc string, blob []byte) [][]byte {
	return [][]byte{
		fmt.Appendf(nil, `{"htype":"dimage-1.0","series":%d,"frame":%d,"hash":""}`, series, i),
		fmt.Appendf(nil, `{"htype":"dimage_d-1.0","shape":[%d,%d],"type":"uint16","encoding":%q,"size":%d}`, fx, fy, enc, len(blob)),
		blob,
		[]byte(`{"htype":"dconfig-1.0","start_time":0,"stop_time":1,"real_time":1}`),
	}
}

func v1End(series int) [][]byte {
	return [][]byte{fmt.Appendf(nil, `{"htype":"dseries_end-1.0","series":%d}`, series)}
}

func bslz4(i int) []byte { return h5filter.EncodeBSLZ4(nil, testFrame(i), 2) }

// sender is a PUSH socket on loopback and a receiver connected to it.
type sender struct {
	t    *testing.T
	push *zmtp.Push
	r    *Receiver
	ctx  context.Context
}

func newSender(t *testing.T, opt Options) *sender {
	push, err := zmtp.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { push.Close() })
	opt.Stream = push.Addr()
	if opt.Protocol == 0 {
		opt.Protocol = V1
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = 10 * time.Second
	}
	r, err := New(opt)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &sender{t: t, push: push, r: r, ctx: ctx}
}

func (s *sender) send(msgs ...[][]byte) {
	for _, m := range msgs {
		require.NoError(s.t, s.push.Send(s.ctx, m...))
	}
	require.NoError(s.t, s.push.Flush(s.ctx))
}

// sendParts sends every part of msgs as a message of its own (LiberTEM-live's
// simulator's way).
func (s *sender) sendParts(msgs ...[][]byte) {
	for _, m := range msgs {
		for _, p := range m {
			require.NoError(s.t, s.push.Send(s.ctx, p))
		}
	}
	require.NoError(s.t, s.push.Flush(s.ctx))
}

// start sends the header msgs once the receiver is connected and starts it.
func (s *sender) start(msgs ...[][]byte) (live.Header, error) {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if s.push.WaitPeers(s.ctx, 1) == nil {
			for _, m := range msgs {
				s.push.Send(s.ctx, m...)
			}
			s.push.Flush(s.ctx)
		}
	}()
	h, err := s.r.Start(s.ctx)
	if err == nil {
		<-sent
	}
	return h, err
}

// drain runs Next to the end and returns the frames' indices, decoded frames and the
// last error.
func (s *sender) drain() ([]int, map[int][]byte, error) {
	var idx []int
	got := map[int][]byte{}
	var frames []live.Frame
	var err error
	for {
		frames, err = s.r.Next(s.ctx, frames[:0])
		for _, f := range frames {
			idx = append(idx, f.Index)
			b := make([]byte, s.r.hdr.FrameBytes())
			if derr := s.r.Decode(b, f); derr != nil {
				return idx, got, derr
			}
			got[f.Index] = b
		}
		if err != nil {
			return idx, got, err
		}
	}
}

func TestConnectRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r, err := New(Options{Stream: addr, Protocol: V2, StartTimeout: 400 * time.Millisecond})
	require.NoError(t, err)
	defer r.Close()
	t0 := time.Now()
	_, err = r.Start(context.Background())
	require.ErrorIs(t, err, errs.IO)
	assert.ErrorContains(t, err, "could not connect to the stream at tcp://"+addr+" within 400ms")
	assert.ErrorContains(t, err, "connection refused")
	assert.Less(t, time.Since(t0), 5*time.Second)
}

func TestNoHeader(t *testing.T) {
	s := newSender(t, Options{StartTimeout: 500 * time.Millisecond})
	_, err := s.start()
	require.ErrorIs(t, err, errs.IO)
	assert.ErrorContains(t, err, "but the series' header did not come within 500ms")
}

func TestBadAddress(t *testing.T) {
	for _, a := range []string{"", "http://x:1", "host:99999", "tcp://:5"} {
		_, err := New(Options{Stream: a})
		assert.ErrorIs(t, err, errs.Argument, a)
	}
	_, err := New(Options{Stream: "h", Active: true})
	assert.ErrorContains(t, err, "active mode needs the SIMPLON API's address")
}

// TestV1Stream: a whole series in multipart messages, and in single-part messages (a
// bitshuffle header zeroed, as LiberTEM-live's simulator sends), uncompressed, LZ4 and
// bitshuffle-LZ4 frames; messages of an earlier series before the header are skipped.
func TestV1Stream(t *testing.T) {
	lz4b := append([]byte{0xF0, 96 - 15}, testFrame(2)...) // one LZ4 sequence of 96 literals
	zeroed := bslz4(3)
	clear(zeroed[:12])
	msgs := [][][]byte{v1Image(6, 9, "<", testFrame(0)), v1End(6), // the last series' tail
		v1Header(7, 4, "basic"), v1Image(7, 0, "bs16-lz4<", bslz4(0)), v1Image(7, 1, "<", testFrame(1)),
		v1Image(7, 2, "lz4<", lz4b), v1Image(7, 3, "bs16-lz4<", zeroed), v1End(7)}
	for _, single := range []bool{false, true} {
		s := newSender(t, Options{})
		go func() {
			s.push.WaitPeers(s.ctx, 1)
			if single {
				s.sendParts(msgs...)
			} else {
				s.send(msgs...)
			}
		}()
		h, err := s.r.Start(s.ctx)
		require.NoError(t, err)
		assert.Equal(t, live.Header{Detector: "dectris stream v1 (test)", Frames: 4, SigShape: [2]int{fy, fx}, DType: dataset.Uint16,
			Notes: []string{"the stream's header holds no pixel mask (header_detail all sends it): no pixel is masked"}}, h)
		idx, got, err := s.drain()
		require.ErrorIs(t, err, io.EOF)
		assert.Equal(t, []int{0, 1, 2, 3}, idx)
		for i := range 4 {
			assert.Equal(t, testFrame(i), got[i], "frame %d single %v", i, single)
		}
	}
}

// TestV1HeaderNone: header_detail none gives no shape: Start takes it from the first
// image.
func TestV1HeaderNone(t *testing.T) {
	s := newSender(t, Options{})
	h, err := s.start(v1Header(3, 0, "none"), v1Image(3, 0, "<", testFrame(0)), v1Image(3, 1, "<", testFrame(1)), v1End(3))
	require.NoError(t, err)
	assert.Equal(t, [2]int{fy, fx}, h.SigShape)
	assert.Equal(t, 0, h.Frames)
	idx, _, err := s.drain()
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []int{0, 1}, idx)
}

// TestPixelMask: with header_detail all, the flagged pixels read as 0; an unflagged
// pixel at 65535 is saturated and keeps its value; KeepMaskedPixels keeps both.
func TestPixelMask(t *testing.T) {
	mask := make([]byte, 4*fx*fy)
	binary.LittleEndian.PutUint32(mask[4*5:], 1)
	binary.LittleEndian.PutUint32(mask[4*11:], 8)
	hdr := append(v1Header(1, 1, "all"),
		fmt.Appendf(nil, `{"htype":"dflatfield-1.0","shape":[%d,%d],"type":"float32"}`, fx, fy), make([]byte, 4*fx*fy),
		fmt.Appendf(nil, `{"htype":"dpixelmask-1.0","shape":[%d,%d],"type":"uint32"}`, fx, fy), mask,
		[]byte(`{"htype":"dcountrate_table-1.0","shape":[2,1],"type":"float32"}`), make([]byte, 8))
	frame := testFrame(0)
	binary.LittleEndian.PutUint16(frame[2*5:], 65535)
	binary.LittleEndian.PutUint16(frame[2*7:], 65535)
	for _, keep := range []bool{false, true} {
		s := newSender(t, Options{KeepMaskedPixels: keep})
		h, err := s.start(hdr, v1Image(1, 0, "bs16-lz4<", h5filter.EncodeBSLZ4(nil, frame, 2)), v1End(1))
		require.NoError(t, err)
		_, got, err := s.drain()
		require.ErrorIs(t, err, io.EOF)
		want := append([]byte(nil), frame...)
		if !keep {
			want[10], want[11], want[22], want[23] = 0, 0, 0, 0
			assert.Contains(t, h.Notes, "pixel mask applied: the 2 of 48 pixels it flags read as 0 (option pixel_mask=false keeps their values)")
		}
		assert.Equal(t, want, got[0], "keep %v", keep)
		assert.Equal(t, uint16(65535), binary.LittleEndian.Uint16(got[0][2*7:]))
	}
}

// TestV1Faults: each malformed or misbehaving stream ends the series with an error
// that wraps live.ErrEnded and names the fault, after the frames that came before.
func TestV1Faults(t *testing.T) {
	img := func(i int) [][]byte { return v1Image(1, i, "bs16-lz4<", bslz4(i)) }
	wrongSize := h5filter.EncodeBSLZ4(nil, append(testFrame(1), 0, 0), 2)
	cut := bslz4(1)
	clear(cut[:12])
	for _, c := range []struct {
		name    string
		msgs    [][][]byte
		frames  []int
		want    string
		missing int
		late    int
	}{
		{"three parts", [][][]byte{img(0), img(1)[:3]}, []int{0}, "a stream v1 dimage-1.0 message of 3 parts, want 4", 0, 0},
		{"bad json", [][][]byte{img(0), {[]byte(`{"htype":"dimage-1.0","frame":`), {}, {}, {}}}, []int{0}, "stream v1 part", 0, 0},
		{"unknown type", [][][]byte{{[]byte(`{"htype":"dimage-2.0"}`), {}}}, nil, `message type "dimage-2.0"`, 0, 0},
		{"unknown encoding", [][][]byte{img(0), v1Image(1, 1, "bs16-zstd<", bslz4(1))}, []int{0}, `encoding "bs16-zstd<"`, 0, 0},
		{"other shape", [][][]byte{img(0), {img(1)[0], []byte(`{"htype":"dimage_d-1.0","shape":[8,7],"type":"uint16","encoding":"<"}`), make([]byte, 112), img(1)[3]}}, []int{0}, "a frame of 7×8 uint16, its header 6×8 uint16", 0, 0},
		{"no dconfig", [][][]byte{{img(0)[0], img(0)[1], img(0)[2], []byte(`{"htype":"x"}`)}}, nil, "not dconfig-1.0", 0, 0},
		{"raw size", [][][]byte{img(0), v1Image(1, 1, "<", testFrame(1)[:90])}, []int{0}, "frame 1 of series 1: 90 bytes sent, an uncompressed frame has 96", 0, 0},
		{"blob size", [][][]byte{img(0), v1Image(1, 1, "bs16-lz4<", wrongSize)}, []int{0}, "its bitshuffle-LZ4 blob decodes to 98 bytes, a frame has 96", 0, 0},
		{"series change", [][][]byte{img(0), v1Image(2, 1, "<", testFrame(1))}, []int{0}, "frame 1 of series 2 came during series 1", 0, 0},
		{"new header", [][][]byte{img(0), v1Header(2, 3, "basic")}, []int{0}, "series 2 started before series 1 ended", 0, 0},
		{"end of another series", [][][]byte{img(0), v1End(5)}, []int{0}, "the end of series 5 came during series 1", 0, 0},
		{"fewer frames", [][][]byte{img(0), img(1), v1End(1)}, []int{0, 1}, "series 1 ended after 2 of its 4 frames: 2 never came", 2, 0},
		{"more frames", [][][]byte{img(0), img(4)}, []int{0}, "sent frame 4, more than the 4 frames its header announced", 0, 0},
		{"twice", [][][]byte{img(0), img(1), img(1)}, []int{0, 1}, "sent frame 1 twice", 0, 0},
		{"out of order", [][][]byte{img(0), img(2), img(1), v1End(1)}, []int{0, 2, 1}, "ended after 3 of its 4 frames: 1 never came", 2, 1},
		{"gap", [][][]byte{img(0), img(3), v1End(1)}, []int{0, 3}, "ended after 2 of its 4 frames: 2 never came", 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSender(t, Options{})
			_, err := s.start(v1Header(1, 4, "basic"))
			require.NoError(t, err)
			s.send(c.msgs...)
			idx, _, err := s.drain()
			require.ErrorIs(t, err, live.ErrEnded)
			assert.ErrorContains(t, err, c.want)
			assert.Equal(t, c.frames, idx)
			st := s.r.Stats()
			assert.Equal(t, c.missing, st.Missing, "missing")
			assert.Equal(t, c.late, st.Late, "late")
			assert.Equal(t, len(c.frames), st.Received)
			// Next after the end gives the same error again, no hang
			_, err2 := s.r.Next(s.ctx, nil)
			assert.Equal(t, err, err2)
		})
	}
	t.Run("decode wrong size", func(t *testing.T) {
		s := newSender(t, Options{})
		_, err := s.start(v1Header(1, 1, "basic"))
		require.NoError(t, err)
		s.send(v1Image(1, 0, "bs16-lz4<", cut[:len(cut)-20]), v1End(1))
		_, _, err = s.drain()
		require.ErrorIs(t, err, errs.Format)
		assert.ErrorContains(t, err, "frame 0 of series 1 (bitshuffle-LZ4)")
	})
}

// TestShared: a receiver sharing the stream gets frames with gaps; it keeps their
// numbers and counts no frame missing.
func TestShared(t *testing.T) {
	s := newSender(t, Options{Shared: true})
	_, err := s.start(v1Header(1, 6, "basic"))
	require.NoError(t, err)
	s.send(v1Image(1, 1, "<", testFrame(1)), v1Image(1, 4, "<", testFrame(4)), v1Image(1, 2, "<", testFrame(2)), v1End(1))
	idx, got, err := s.drain()
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []int{1, 4, 2}, idx)
	assert.Equal(t, testFrame(4), got[4])
	assert.Equal(t, live.Stats{Received: 3, Bytes: s.r.Stats().Bytes}, s.r.Stats())
}

// TestStalledSender: a sender that stops sending holds Next until ctx ends, which ends
// the wait at once; a sender that goes ends the series.
func TestStalledSender(t *testing.T) {
	s := newSender(t, Options{})
	_, err := s.start(v1Header(1, 4, "basic"), v1Image(1, 0, "<", testFrame(0)))
	require.NoError(t, err)
	frames, err := s.r.Next(s.ctx, nil)
	require.NoError(t, err)
	require.Len(t, frames, 1)
	ctx, cancel := context.WithCancel(s.ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	t0 := time.Now()
	_, err = s.r.Next(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, errs.Cancelled)
	assert.Less(t, time.Since(t0), 2*time.Second)

	s.push.Close() // the sender goes
	_, err = s.r.Next(s.ctx, nil)
	require.ErrorIs(t, err, live.ErrEnded)
	assert.ErrorContains(t, err, "failed after 1 frames of series 1")
}

// TestV2Faults: malformed stream v2 messages end the series naming the fault.
func TestV2Faults(t *testing.T) {
	start, _ := cbor.Marshal(map[string]any{"type": "start", "series_id": 4, "image_dtype": "uint16", "image_size_x": fx, "image_size_y": fy, "number_of_images": 3, "channels": []string{"a", "b"}})
	image := func(i int, ch string, dims []int, tag uint64, content any) []byte {
		b, _ := cbor.Marshal(map[string]any{"type": "image", "series_id": 4, "image_id": i,
			"data": map[string]any{ch: cbor.Tag{Number: 40, Content: []any{dims, cbor.Tag{Number: tag, Content: content}}}}})
		return b
	}
	comp := func(alg string, elem int, b []byte) cbor.Tag {
		return cbor.Tag{Number: 56500, Content: []any{alg, elem, b}}
	}
	good := image(0, "a", []int{fy, fx}, 69, comp("bslz4", 2, bslz4(0)))
	for _, c := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"not cbor", []byte{0xff, 0x00}, "not a CBOR map"},
		{"two parts", nil, "a stream v2 message of 2 parts"},
		{"no channel", image(1, "c", []int{fy, fx}, 69, testFrame(1)), `image 1 of series 4 has no channel "a" (it has ["c"]`},
		{"dims", image(1, "a", []int{fx, fy}, 69, testFrame(1)), "image 1 of series 4 is 8×6 uint16, its start message says 6×8 uint16"},
		{"dtype", image(1, "a", []int{fy, fx}, 70, testFrame(1)), "is 6×8 uint32"},
		{"float", image(1, "a", []int{fy, fx}, 85, testFrame(1)), "typed array tag 85"},
		{"algorithm", image(1, "a", []int{fy, fx}, 69, comp("zstd", 2, bslz4(1))), `DECTRIS compression "zstd"`},
		{"element size", image(1, "a", []int{fy, fx}, 69, comp("bslz4", 3, bslz4(1))), "bslz4 of 3-byte elements"},
		{"not multidim", func() []byte {
			b, _ := cbor.Marshal(map[string]any{"type": "image", "series_id": 4, "image_id": 1, "data": map[string]any{"a": cbor.Tag{Number: 41, Content: 1}}})
			return b
		}(), "tag 41 where a multi-dimensional array (tag 40) was expected"},
		{"series", func() []byte {
			b, _ := cbor.Marshal(map[string]any{"type": "image", "series_id": 5, "image_id": 1})
			return b
		}(), "image 1 of series 5 came during series 4"},
		{"type", func() []byte { b, _ := cbor.Marshal(map[string]any{"type": "bogus", "series_id": 4}); return b }(), `stream v2 message type "bogus"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSender(t, Options{Protocol: V2})
			h, err := s.start([][]byte{start})
			require.NoError(t, err)
			assert.Equal(t, 3, h.Frames)
			if c.msg == nil {
				s.send([][]byte{good}, [][]byte{good, good})
			} else {
				s.send([][]byte{good}, [][]byte{c.msg})
			}
			idx, got, err := s.drain()
			require.ErrorIs(t, err, live.ErrEnded)
			assert.ErrorContains(t, err, c.want)
			assert.Equal(t, []int{0}, idx)
			assert.Equal(t, testFrame(0), got[0])
		})
	}
}

// TestRecord: the frames of a series recorded and reopened (format npy) are the
// frames decoded, bit for bit; a series missing frames is recorded under
// PartialPath and Close says so; a record that fails leaves no file.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	h := live.Header{Frames: 3, SigShape: [2]int{fy, fx}, DType: dataset.Uint16}
	dec := func(dst []byte, f live.Frame) error { copy(dst, f.Payload); return nil }
	path := filepath.Join(dir, "scan.npy")
	rec, err := NewRecorder(path, h, dec)
	require.NoError(t, err)
	for _, i := range []int{2, 0, 1} { // in any order
		require.NoError(t, rec.Write(live.Frame{Index: i, Payload: testFrame(i)}))
	}
	require.ErrorIs(t, rec.Write(live.Frame{Index: 1, Payload: testFrame(1)}), errs.Argument)
	require.ErrorIs(t, rec.Write(live.Frame{Index: 3, Payload: testFrame(3)}), errs.Argument)
	require.NoError(t, rec.Close(nil))
	assert.Equal(t, path, rec.Path())
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, 3, ds.NumFrames())
	got := make([]byte, 3*2*fx*fy)
	require.NoError(t, ds.ReadFrames(0, 3, got))
	assert.Equal(t, append(append(testFrame(0), testFrame(1)...), testFrame(2)...), got)

	// unknown length, frame 1 never came
	h.Frames = 0
	path = filepath.Join(dir, "part.npy")
	rec, err = NewRecorder(path, h, dec)
	require.NoError(t, err)
	require.NoError(t, rec.Write(live.Frame{Index: 0, Payload: testFrame(0)}))
	require.NoError(t, rec.Write(live.Frame{Index: 2, Payload: testFrame(2)}))
	require.NoError(t, rec.Close(nil))
	assert.Equal(t, PartialPath(path), rec.Path())
	assert.NoFileExists(t, path)
	ds, err = dataset.Open(PartialPath(path), dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.NoError(t, ds.ReadFrames(0, 3, got))
	assert.Equal(t, append(append(testFrame(0), make([]byte, 2*fx*fy)...), testFrame(2)...), got)
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 2, "no temporary file left")
}
