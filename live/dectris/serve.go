package dectris

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/zmtp"
)

// ServeOptions configure the replay server.
type ServeOptions struct {
	// Protocol is V1 or V2 (0: V2).
	Protocol Protocol
	// Stream is the address the ZeroMQ PUSH socket binds, "host:port" ("": all
	// interfaces on the protocol's port; port 0 picks a free one).
	Stream string
	// API is the address the SIMPLON REST API binds ("": no API: one series is sent as
	// soon as a receiver connects, and Serve returns).
	API string
	// Rate is the frames a second sent (0: as fast as the receivers take them).
	Rate float64
	// HeaderDetail is the header_detail at start ("": "all", which sends the pixel mask).
	HeaderDetail string
	// PixelMask (sig_y·sig_x values, non-zero: flagged) is the pixel mask the header
	// sends with header_detail all (nil: none flagged). The frames are sent as the
	// dataset reads them: those of a DECTRIS master with its own pixel mask applied.
	PixelMask []uint32
	// Ready, if not nil, is called once the sockets listen, with their addresses
	// ("host:port"; api "" without one).
	Ready func(stream, api string)
}

// Serve replays ds as a DECTRIS detector: a SIMPLON REST API (the part of it that
// Receiver and LiberTEM-live's DEigerClient use: GET and PUT of /detector/api/1.8.0/
// config/<param> and /stream/api/1.8.0/config/<param>, PUT /detector/api/1.8.0/command/
// arm (answering {"sequence id": N}), trigger, disarm, abort) and the stream, v1 or v2,
// on a ZeroMQ PUSH socket that deals messages out in turn to the PULL sockets connected.
// Each arm starts a series of nimages·ntrigger frames (ntrigger with trigger modes exte
// and inte; at first nimages 1, ntrigger the dataset's frames, exte), the dataset's
// frames in order, repeated as needed (frame i of the series is frame i mod n of a
// dataset of n frames: a very large ntrigger gives a stream without end, as LiberTEM-live
// emulates continuous acquisition), each compressed bitshuffle-LZ4 (v1 "bs<bits>-lz4<"
// with the blob's MD5 as dimage-1.0's "hash", as DECTRIS's stream v1 documentation gives
// it and LiberTEM-live's receiver requires; v2 "bslz4"): with
// exte and exts they are sent at once, with ints each trigger sends nimages of them,
// with inte each trigger one. A disarm or abort ends the series early; its end message
// is sent either way. Serve returns when ctx ends (nil), or without an API after one
// series. Datasets of uint8, uint16 and uint32 frames are served; others are refused
// (errs.DType).
func Serve(ctx context.Context, opt ServeOptions, ds dataset.Dataset) error {
	dt := ds.DType()
	if dt != dataset.Uint8 && dt != dataset.Uint16 && dt != dataset.Uint32 {
		return errs.New(errs.DType, "dectris: a DECTRIS stream sends uint8, uint16 or uint32 frames, %s holds %s", ds.Path(), dt)
	}
	if opt.Protocol == 0 {
		opt.Protocol = V2
	}
	if opt.Protocol != V1 && opt.Protocol != V2 {
		return errs.New(errs.Argument, "dectris: protocol %d: want 1 (stream v1) or 2 (stream v2)", opt.Protocol)
	}
	sig := ds.SigShape()
	if opt.PixelMask != nil && len(opt.PixelMask) != sig[0]*sig[1] {
		return errs.New(errs.Shape, "dectris: a pixel mask of %d values for frames of %d×%d", len(opt.PixelMask), sig[0], sig[1])
	}
	if opt.HeaderDetail == "" {
		opt.HeaderDetail = "all"
	}
	if opt.Stream == "" {
		opt.Stream = ":" + strconv.Itoa(opt.Protocol.Port())
	}
	push, err := zmtp.Listen(opt.Stream)
	if err != nil {
		return errs.New(errs.IO, "dectris: replay stream: %w", err)
	}
	defer push.Close()
	s := &server{opt: opt, ds: ds, push: push, arms: make(chan uint64), stop: make(chan struct{}, 1), triggers: make(chan struct{}, 1<<16)}
	s.config = map[string]any{
		"nimages": 1.0, "ntrigger": float64(ds.NumFrames()), "trigger_mode": "exte",
		"x_pixels_in_detector": float64(sig[1]), "y_pixels_in_detector": float64(sig[0]),
		"bit_depth_image": float64(8 * dt.Size()), "bit_depth_readout": float64(8 * dt.Size()),
		"compression": "bslz4", "count_time": 0.001, "frame_time": 0.001,
		"description": "stemdot replay of " + ds.Path(), "detector_number": "stemdot-replay",
	}
	format := "legacy"
	if opt.Protocol == V2 {
		format = "cbor"
	}
	s.stream = map[string]any{"mode": "enabled", "format": format, "header_detail": opt.HeaderDetail}
	apiAddr := ""
	if opt.API != "" {
		ln, err := net.Listen("tcp", opt.API)
		if err != nil {
			return errs.New(errs.IO, "dectris: replay API: %w", err)
		}
		apiAddr = ln.Addr().String()
		srv := &http.Server{Handler: s.routes()}
		go srv.Serve(ln)
		defer srv.Close()
	}
	if opt.Ready != nil {
		opt.Ready(push.Addr(), apiAddr)
	}
	if opt.API == "" {
		if err := push.WaitPeers(ctx, 1); err != nil {
			return nil
		}
		return s.series(ctx, 1)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case id := <-s.arms:
			if err := s.series(ctx, id); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

type server struct {
	opt      ServeOptions
	ds       dataset.Dataset
	push     *zmtp.Push
	mu       sync.Mutex
	config   map[string]any
	stream   map[string]any
	seq      uint64
	armed    bool
	arms     chan uint64
	stop     chan struct{}
	triggers chan struct{}
	// blobs are the dataset's frames compressed by an earlier series (and their MD5,
	// stream v1's hash), kept within blobBudget bytes: a detector compresses on its own
	// hardware, so a replay that is the load generator of a benchmark compresses each
	// frame once, not at every series.
	blobs     []blob
	blobBytes int64
}

// blobBudget bounds the compressed frames a replay keeps.
const blobBudget = 2 << 30

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	get := func(m map[string]any) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			s.mu.Lock()
			v, ok := m[req.PathValue("param")]
			s.mu.Unlock()
			if !ok {
				http.Error(w, fmt.Sprintf("parameter %q is not served by the replay", req.PathValue("param")), http.StatusNotFound)
				return
			}
			answer(w, map[string]any{"value": v})
		}
	}
	put := func(m map[string]any, check func(param string, v any) error) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			var body struct{ Value any }
			if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<16)).Decode(&body); err != nil {
				http.Error(w, "want {\"value\": ...}: "+err.Error(), http.StatusBadRequest)
				return
			}
			param := req.PathValue("param")
			s.mu.Lock()
			defer s.mu.Unlock()
			if _, ok := m[param]; !ok {
				http.Error(w, fmt.Sprintf("parameter %q is not served by the replay", param), http.StatusNotFound)
				return
			}
			if err := check(param, body.Value); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			m[param] = body.Value
			answer(w, []string{param})
		}
	}
	mux.HandleFunc("GET /detector/api/version/", func(w http.ResponseWriter, _ *http.Request) { answer(w, map[string]any{"value": APIVersion}) })
	mux.HandleFunc("GET /detector/api/"+APIVersion+"/config/{param}", get(s.config))
	mux.HandleFunc("PUT /detector/api/"+APIVersion+"/config/{param}", put(s.config, s.checkConfig))
	mux.HandleFunc("GET /stream/api/"+APIVersion+"/config/{param}", get(s.stream))
	mux.HandleFunc("PUT /stream/api/"+APIVersion+"/config/{param}", put(s.stream, s.checkStream))
	mux.HandleFunc("PUT /detector/api/"+APIVersion+"/command/{cmd}", s.command)
	return mux
}

func (s *server) checkConfig(param string, v any) error {
	switch param {
	case "nimages", "ntrigger":
		if f, ok := v.(float64); !ok || f < 1 || f != math.Trunc(f) || f > math.MaxInt32 {
			return fmt.Errorf("%s %v: want a count ≥ 1", param, v)
		}
	case "trigger_mode":
		if m, _ := v.(string); m != "ints" && m != "inte" && m != "exts" && m != "exte" {
			return fmt.Errorf("trigger_mode %v: want ints, inte, exts or exte", v)
		}
	default:
		if s.config[param] != v {
			return fmt.Errorf("%s is %v in this replay and cannot be changed", param, s.config[param])
		}
	}
	return nil
}

func (s *server) checkStream(param string, v any) error {
	switch param {
	case "mode":
		if v != "enabled" {
			return fmt.Errorf("the replay's stream is always enabled")
		}
	case "header_detail":
		if v != "all" && v != "basic" && v != "none" {
			return fmt.Errorf("header_detail %v: want all, basic or none", v)
		}
	default:
		if s.stream[param] != v {
			return fmt.Errorf("stream %s is %v in this replay (stemdot replay --as) and cannot be changed", param, s.stream[param])
		}
	}
	return nil
}

// frames is the number of frames the configuration asks for.
func (s *server) frames() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ni, _ := s.config["nimages"].(float64)
	nt, _ := s.config["ntrigger"].(float64)
	mode, _ := s.config["trigger_mode"].(string)
	n, ok := imagesAsked(uint64(ni), uint64(nt), mode)
	if !ok || n > math.MaxInt32 {
		return 0, fmt.Errorf("the configuration asks for %v images (nimages %v, ntrigger %v, %s): the replay sends at most %d a series", n, ni, nt, mode, math.MaxInt32)
	}
	return int(n), nil
}

func (s *server) command(w http.ResponseWriter, req *http.Request) {
	answer := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	switch cmd := req.PathValue("cmd"); cmd {
	case "arm":
		if _, err := s.frames(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if s.armed {
			s.mu.Unlock()
			http.Error(w, "already armed: disarm first", http.StatusConflict)
			return
		}
		s.seq++
		id := s.seq
		s.armed = true
		s.mu.Unlock()
		select {
		case s.arms <- id:
		case <-req.Context().Done():
			return
		}
		answer(map[string]any{"sequence id": id})
	case "trigger":
		select {
		case s.triggers <- struct{}{}:
		default:
		}
		answer(map[string]any{})
	case "disarm", "abort", "cancel":
		s.mu.Lock() // with the series' end, which drains s.stop: no stop is left for the next
		armed, id := s.armed, s.seq
		if armed {
			select {
			case s.stop <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
		answer(map[string]any{"sequence id": id})
	default:
		http.Error(w, fmt.Sprintf("command %q is not served by the replay", cmd), http.StatusNotFound)
	}
}

// series sends series id: its header, its frames and its end.
func (s *server) series(ctx context.Context, id uint64) error {
	// The detector is idle again before the series' end is sent, as a detector is once
	// its last image is taken: a receiver that arms on the end must not find it armed.
	idle := false
	disarm := func() {
		if idle {
			return
		}
		idle = true
		s.mu.Lock()
		defer s.mu.Unlock()
		s.armed = false
		for { // triggers and stops of this series are spent
			select {
			case <-s.stop:
			case <-s.triggers:
			default:
				return
			}
		}
	}
	defer disarm()
	end := func(enc *encoder) error {
		disarm()
		if err := s.push.Send(ctx, enc.end()...); err != nil {
			return err
		}
		return s.push.Flush(ctx)
	}
	n := s.ds.NumFrames()
	mode := "exte"
	perTrigger := 0
	if s.opt.API != "" {
		var err error
		if n, err = s.frames(); err != nil {
			return err
		}
		s.mu.Lock()
		mode, _ = s.config["trigger_mode"].(string)
		ni, _ := s.config["nimages"].(float64)
		detail, _ := s.stream["header_detail"].(string)
		s.opt.HeaderDetail = detail
		s.mu.Unlock()
		switch mode {
		case "ints":
			perTrigger = int(ni)
		case "inte":
			perTrigger = 1
		}
	}
	enc := newEncoder(s.opt, s.ds, id, n, mode)
	enc.cache = s
	if err := s.push.Send(ctx, enc.header()...); err != nil {
		return err
	}
	if err := s.push.Flush(ctx); err != nil {
		return err
	}
	fb, frames := s.ds.FrameBytes(), s.ds.NumFrames()
	const batch = 64
	buf := make([]byte, batch*fb)
	start := time.Now()
	released := n
	if perTrigger > 0 {
		released = 0
	}
	sent := 0
	for sent < n {
		for released <= sent {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.stop:
				return end(enc)
			case <-s.triggers:
				released += perTrigger
			}
		}
		first := sent % frames // the dataset's frames, repeated
		m := min(batch, n-sent, released-sent, frames-first)
		if !s.cached(first, first+m) {
			if err := s.ds.ReadFrames(first, first+m, buf[:m*fb]); err != nil {
				return err
			}
		}
		for i := range m {
			if s.opt.Rate > 0 {
				wait := time.Until(start.Add(time.Duration(float64(sent+i) / s.opt.Rate * float64(time.Second))))
				if wait > 0 {
					s.push.Flush(ctx)
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-s.stop:
						return end(enc)
					case <-time.After(wait):
					}
				}
			}
			if err := s.push.Send(ctx, enc.image(sent+i, first+i, buf[i*fb:(i+1)*fb])...); err != nil {
				return err
			}
		}
		sent += m
		select {
		case <-s.stop:
			return end(enc)
		default:
		}
		if err := s.push.Flush(ctx); err != nil {
			return err
		}
	}
	return end(enc)
}

// blob is a frame compressed, with its MD5 in hex.
type blob struct {
	data []byte
	hash string
}

// cached says whether the dataset's frames [start, end) are compressed already.
func (s *server) cached(start, end int) bool {
	if end > len(s.blobs) {
		return false
	}
	for _, b := range s.blobs[start:end] {
		if b.data == nil {
			return false
		}
	}
	return true
}

// kept is the dataset's frame i compressed by an earlier series, or a blob of nil data
// (also for a nil server).
func (s *server) kept(i int) blob {
	if s == nil || i >= len(s.blobs) {
		return blob{}
	}
	return s.blobs[i]
}

// keep keeps a copy of the dataset's frame i compressed, while the budget allows.
func (s *server) keep(i int, b blob) {
	if s == nil || s.blobBytes+int64(len(b.data)) > blobBudget {
		return
	}
	if i >= len(s.blobs) {
		s.blobs = append(s.blobs, make([]blob, i+1-len(s.blobs))...)
	}
	s.blobs[i] = blob{append([]byte(nil), b.data...), b.hash}
	s.blobBytes += int64(len(b.data))
}

// encoder builds the messages of one series.
type encoder struct {
	opt     ServeOptions
	id      uint64
	n       int
	mode    string
	sig     [2]int
	dt      dataset.DType
	desc    string
	uid     string
	blob    blob // the frame compressed (scratch's, or kept by cache)
	scratch []byte
	dimage  []byte
	cache   *server
}

func newEncoder(opt ServeOptions, ds dataset.Dataset, id uint64, n int, mode string) *encoder {
	return &encoder{opt: opt, id: id, n: n, mode: mode, sig: ds.SigShape(), dt: ds.DType(),
		desc: "stemdot replay of " + ds.Path(), uid: fmt.Sprintf("stemdot-replay-%d-%d", time.Now().UnixNano(), id)}
}

func (e *encoder) maskBytes() []byte {
	b := make([]byte, 4*e.sig[0]*e.sig[1])
	for i, v := range e.opt.PixelMask {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

func (e *encoder) header() [][]byte {
	if e.opt.Protocol == V1 {
		x, y := e.sig[1], e.sig[0]
		parts := [][]byte{fmt.Appendf(nil, `{"htype":"dheader-1.0","series":%d,"header_detail":%q}`, e.id, e.opt.HeaderDetail)}
		if e.opt.HeaderDetail == "none" {
			return parts
		}
		nimages, ntrigger := 1, e.n
		if e.mode == "exts" || e.mode == "ints" {
			nimages, ntrigger = e.n, 1
		}
		cfg, _ := json.Marshal(map[string]any{
			"x_pixels_in_detector": x, "y_pixels_in_detector": y, "bit_depth_image": 8 * e.dt.Size(),
			"nimages": nimages, "ntrigger": ntrigger, "trigger_mode": e.mode, "description": e.desc, "compression": "bslz4",
		})
		parts = append(parts, cfg)
		if e.opt.HeaderDetail == "all" {
			ones := make([]byte, 4*x*y)
			for i := 0; i < len(ones); i += 4 {
				binary.LittleEndian.PutUint32(ones[i:], math.Float32bits(1))
			}
			parts = append(parts,
				fmt.Appendf(nil, `{"htype":"dflatfield-1.0","shape":[%d,%d],"type":"float32"}`, x, y), ones,
				fmt.Appendf(nil, `{"htype":"dpixelmask-1.0","shape":[%d,%d],"type":"uint32"}`, x, y), e.maskBytes(),
				[]byte(`{"htype":"dcountrate_table-1.0","shape":[2,1],"type":"float32"}`), make([]byte, 8))
		}
		return parts
	}
	m := map[string]any{
		"type": "start", "series_id": e.id, "series_unique_id": e.uid,
		"arm_date": cbor.Tag{Number: 0, Content: time.Now().UTC().Format(time.RFC3339Nano)},
		"channels": []string{"threshold_1"}, "image_dtype": e.dt.String(),
		"image_size_x": e.sig[1], "image_size_y": e.sig[0], "number_of_images": e.n,
		"detector_description": e.desc, "count_time": 0.001, "frame_time": 0.001,
		"saturation_value": uint64(1)<<(8*e.dt.Size()) - 2, "pixel_mask_enabled": e.opt.HeaderDetail == "all",
	}
	if e.opt.HeaderDetail == "all" {
		m["pixel_mask"] = map[string]any{"threshold_1": cbor.Tag{Number: 40, Content: []any{[]int{e.sig[0], e.sig[1]}, cbor.Tag{Number: 70, Content: e.maskBytes()}}}}
	}
	b, _ := v2Enc.Marshal(m)
	return [][]byte{b}
}

// v2Enc writes map keys in length-first order (RFC 7049's canonical order, "type" among
// the first) as cbor2's canonical mode does.
var v2Enc, _ = cbor.EncOptions{Sort: cbor.SortLengthFirst}.EncMode()

// v2Image is a stream v2 image message, "type" first.
type v2Image struct {
	Type      string              `cbor:"type"`
	SeriesID  uint64              `cbor:"series_id"`
	UID       string              `cbor:"series_unique_id"`
	ImageID   uint64              `cbor:"image_id"`
	RealTime  [2]uint64           `cbor:"real_time"`
	StartTime [2]uint64           `cbor:"start_time"`
	StopTime  [2]uint64           `cbor:"stop_time"`
	Data      map[string]cbor.Tag `cbor:"data"`
}

// image builds the message of frame i of the series, the dataset's frame j of pixels
// px (host byte order).
func (e *encoder) image(i, j int, px []byte) [][]byte {
	size := e.dt.Size()
	if e.blob = e.cache.kept(j); e.blob.data == nil {
		e.scratch = h5filter.EncodeBSLZ4(e.scratch[:0], px, size)
		sum := md5.Sum(e.scratch)
		e.blob = blob{e.scratch, hex.EncodeToString(sum[:])}
		e.cache.keep(j, e.blob)
	}
	if e.opt.Protocol == V1 {
		e.dimage = fmt.Appendf(e.dimage[:0], `{"htype":"dimage-1.0","series":%d,"frame":%d,"hash":%q}`, e.id, i, e.blob.hash)
		return [][]byte{e.dimage,
			fmt.Appendf(nil, `{"htype":"dimage_d-1.0","shape":[%d,%d],"type":%q,"encoding":"bs%d-lz4<","size":%d}`, e.sig[1], e.sig[0], e.dt, 8*size, len(e.blob.data)),
			e.blob.data,
			fmt.Appendf(nil, `{"htype":"dconfig-1.0","start_time":%d,"stop_time":%d,"real_time":%d}`, i*1000000, i*1000000+999000, 999000)}
	}
	tag := map[int]uint64{1: 64, 2: 69, 4: 70}[size]
	t := uint64(i) * 1000
	b, _ := cbor.Marshal(v2Image{Type: "image", SeriesID: e.id, UID: e.uid, ImageID: uint64(i),
		RealTime: [2]uint64{999, 1000000}, StartTime: [2]uint64{t, 1000000}, StopTime: [2]uint64{t + 999, 1000000},
		Data: map[string]cbor.Tag{"threshold_1": {Number: 40, Content: []any{[]int{e.sig[0], e.sig[1]},
			cbor.Tag{Number: tag, Content: cbor.Tag{Number: 56500, Content: []any{"bslz4", size, e.blob.data}}}}}}})
	return [][]byte{b}
}

func (e *encoder) end() [][]byte {
	if e.opt.Protocol == V1 {
		return [][]byte{fmt.Appendf(nil, `{"htype":"dseries_end-1.0","series":%d}`, e.id)}
	}
	b, _ := v2Enc.Marshal(map[string]any{"type": "end", "series_id": e.id, "series_unique_id": e.uid})
	return [][]byte{b}
}
