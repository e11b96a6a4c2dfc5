package dectris

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// Stream v1 (SIMPLON API manual, "stream interface"; LiberTEM-rs libertem_dectris
// common.rs): a series is
//   - a header message: {"htype":"dheader-1.0","series":N,"header_detail":D}, then with
//     D basic or all the detector's configuration as one JSON object, then with all
//     three pairs of a JSON part {"htype":"dflatfield-1.0" | "dpixelmask-1.0" |
//     "dcountrate_table-1.0","shape":[x,y],"type":T} and the array's bytes (little-
//     endian, y rows of x), then optionally the header_appendix;
//   - per image a message {"htype":"dimage-1.0","series":N,"frame":I,"hash":...},
//     {"htype":"dimage_d-1.0","shape":[x,y],"type":"uint16","encoding":E,"size":S}, the
//     data blob, {"htype":"dconfig-1.0","start_time":..,"stop_time":..,"real_time":..},
//     then optionally the image_appendix; E is "<" (little-endian pixels as they are),
//     "lz4<" (one LZ4 block) or "bs<bits>-lz4<" (bitshuffle-LZ4 of <bits>/8-byte
//     elements, the HDF5 filter's framing);
//   - an end message {"htype":"dseries_end-1.0","series":N}.
//
// A detector sends each message as one multipart ZeroMQ message; LiberTEM-live's
// simulator sends each part as a message of its own: a receiver takes the parts in
// order either way (as LiberTEM's receiver does), checking the count where a multipart
// message shows it.

// v1Head is the first part of every v1 message.
type v1Head struct {
	HType        string `json:"htype"`
	Series       uint64 `json:"series"`
	Frame        uint64 `json:"frame"`
	HeaderDetail string `json:"header_detail"`
}

// v1Config is what the receiver reads of the detector's configuration part.
type v1Config struct {
	XPixels     int    `json:"x_pixels_in_detector"`
	YPixels     int    `json:"y_pixels_in_detector"`
	BitDepth    int    `json:"bit_depth_image"`
	NImages     uint64 `json:"nimages"`
	NTrigger    uint64 `json:"ntrigger"`
	TriggerMode string `json:"trigger_mode"`
	Description string `json:"description"`
	ROIMode     string `json:"roi_mode"`
}

// v1Array is the JSON part before one of the header's arrays, and dimage_d.
type v1Array struct {
	HType    string `json:"htype"`
	Shape    []int  `json:"shape"`
	Type     string `json:"type"`
	Encoding string `json:"encoding"`
}

func parseHead(part []byte) (v1Head, error) {
	var h v1Head
	if len(part) == 0 || part[0] != '{' {
		return h, errs.New(errs.Format, "dectris: a stream v1 part %q is not the JSON that starts a message", truncate(part))
	}
	if h, ok := parseHeadFast(part); ok {
		return h, nil
	}
	if err := json.Unmarshal(part, &h); err != nil {
		return h, errs.New(errs.Format, "dectris: stream v1 part %q: %w", truncate(part), err)
	}
	return h, nil
}

// parseHeadFast reads a first part as json.Unmarshal would into v1Head, where it is a
// flat object without white space of ASCII strings without escapes and unsigned
// integers, each key v1Head's own or none that matches one case-insensitively — as a
// detector writes every image's dimage-1.0 part — without reflection: in perf,
// json.Unmarshal of that part took 11% of stemdot live's CPU on 192×192 bslz4 frames.
// ok is false for anything else, which json.Unmarshal reads.
func parseHeadFast(b []byte) (h v1Head, ok bool) {
	str := func(i int) (int, bool) { // b[i] is '"': the index after the closing quote
		for j := i + 1; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				return j + 1, true
			case c < 0x20 || c >= 0x80 || c == '\\':
				return 0, false
			}
		}
		return 0, false
	}
	if len(b) < 2 || b[0] != '{' {
		return h, false
	}
	i := 1
	for i < len(b) && b[i] != '}' {
		if b[i] != '"' {
			return h, false
		}
		end, ok := str(i)
		if !ok || end >= len(b) || b[end] != ':' {
			return h, false
		}
		key := string(b[i+1 : end-1])
		i = end + 1
		var s string
		var n uint64
		switch {
		case i < len(b) && b[i] == '"':
			if end, ok = str(i); !ok {
				return h, false
			}
			s, i = string(b[i+1:end-1]), end
		case i < len(b) && b[i] >= '1' && b[i] <= '9', i+1 < len(b) && b[i] == '0' && (b[i+1] == ',' || b[i+1] == '}'):
			j := i
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				if n > (math.MaxUint64-uint64(b[j]-'0'))/10 {
					return h, false
				}
				n = 10*n + uint64(b[j]-'0')
			}
			s, i = "", j
		default:
			return h, false
		}
		isStr := b[i-1] == '"'
		switch key {
		case "htype", "header_detail":
			if !isStr {
				return h, false
			}
			if key == "htype" {
				h.HType = s
			} else {
				h.HeaderDetail = s
			}
		case "series", "frame":
			if isStr {
				return h, false
			}
			if key == "series" {
				h.Series = n
			} else {
				h.Frame = n
			}
		default:
			for _, k := range [...]string{"htype", "series", "frame", "header_detail"} {
				if strings.EqualFold(key, k) {
					return h, false
				}
			}
		}
		if i < len(b) && b[i] == ',' && i+1 < len(b) && b[i+1] == '"' {
			i++
		} else if i >= len(b) || b[i] != '}' {
			return h, false
		}
	}
	return h, i == len(b)-1
}

// partsOf is the number of parts of the v1 message whose first part is h (without
// the optional appendix).
func partsOf(h v1Head) (int, error) {
	switch h.HType {
	case "dheader-1.0":
		switch h.HeaderDetail {
		case "none":
			return 1, nil
		case "basic":
			return 2, nil
		case "all":
			return 8, nil
		}
		return 0, errs.New(errs.Format, "dectris: stream v1 header_detail %q: want all, basic or none", h.HeaderDetail)
	case "dimage-1.0":
		return 4, nil
	case "dseries_end-1.0", "deseries_end-1.0": // the latter LiberTEM-live's simulator's spelling
		return 1, nil
	}
	return 0, errs.New(errs.Format, "dectris: stream v1 message type %q: want dheader-1.0, dimage-1.0 or dseries_end-1.0", h.HType)
}

// handleV1 takes a v1 message: a whole multipart message, or one part of a stream
// whose messages have one part each.
func (r *Receiver) handleV1(parts [][]byte, dst *[]live.Frame) error {
	if len(parts) > 1 {
		h, err := parseHead(parts[0])
		if err != nil {
			return r.malformed(err)
		}
		n, err := partsOf(h)
		if err != nil {
			return r.malformed(err)
		}
		if len(parts) != n && len(parts) != n+1 {
			return r.malformed(errs.New(errs.Format, "dectris: a stream v1 %s message of %d parts, want %d (or %d with its appendix)", h.HType, len(parts), n, n+1))
		}
		return r.unitV1(h, parts, dst)
	}
	r.single = append(r.single, parts...)
	for len(r.single) > 0 && r.done == nil { // what follows a series' end is the next one's
		h, err := parseHead(r.single[0])
		var n int
		if err == nil {
			n, err = partsOf(h)
		}
		if err != nil {
			if !r.started { // a part of a message before the series': skip it
				r.single = r.single[1:]
				continue
			}
			return r.malformed(err)
		}
		if len(r.single) < n {
			break
		}
		if err := r.unitV1(h, r.single[:n], dst); err != nil {
			return err
		}
		r.single = r.single[n:]
	}
	if len(r.single) == 0 {
		r.single = nil
	}
	return nil
}

// malformed is the error of a malformed message: before the header, err; after it, an
// end of the series.
func (r *Receiver) malformed(err error) error {
	if !r.started {
		return err
	}
	return fmt.Errorf("%w: %w", live.ErrEnded, err)
}

// unitV1 takes one whole v1 message whose first part is h.
func (r *Receiver) unitV1(h v1Head, parts [][]byte, dst *[]live.Frame) error {
	switch h.HType {
	case "dheader-1.0":
		if r.started {
			return r.malformed(errs.New(errs.Format, "dectris: series %d started before series %d ended (%d frames received)", h.Series, r.series, r.received))
		}
		if r.haveSer && h.Series != r.series {
			return nil // a header of another series than the one armed
		}
		r.series, r.haveSer, r.detail = h.Series, true, h.HeaderDetail
		r.keepHeader(parts)
		return r.headerV1(parts)
	case "dimage-1.0":
		if !r.started {
			return r.earlyV1(h, parts)
		}
		if h.Series != r.series {
			return r.malformed(errs.New(errs.Format, "dectris: frame %d of series %d came during series %d", h.Frame, h.Series, r.series))
		}
		enc, err := r.imageD(parts[1])
		if err != nil {
			return r.malformed(err)
		}
		if !bytes.Contains(parts[3], []byte(`"dconfig-1.0"`)) {
			return r.malformed(errs.New(errs.Format, "dectris: the 4th part of frame %d of series %d is %q, not dconfig-1.0", h.Frame, r.series, truncate(parts[3])))
		}
		if err := r.checkBlob(h.Frame, parts[2], enc); err != nil {
			return err
		}
		return r.frame(h.Frame, parts[2], enc, dst)
	default: // dseries_end-1.0
		if !r.started {
			return r.earlyV1(h, parts)
		}
		if h.Series != r.series {
			return r.malformed(errs.New(errs.Format, "dectris: the end of series %d came during series %d", h.Series, r.series))
		}
		r.seriesEnd()
		return nil
	}
}

// headerV1 reads the header's configuration and pixel mask.
func (r *Receiver) headerV1(parts [][]byte) error {
	detector := "dectris " + V1.String()
	var sig [2]int
	var dt dataset.DType
	frames := r.asked
	var mask []uint32
	var maskShape [2]int
	if len(parts) >= 2 && r.detail != "none" {
		var c v1Config
		if err := json.Unmarshal(parts[1], &c); err != nil {
			return errs.New(errs.Format, "dectris: the detector configuration of series %d (%q): %w", r.series, truncate(parts[1]), err)
		}
		var raw map[string]json.RawMessage
		json.Unmarshal(parts[1], &raw)
		if c.Description != "" {
			detector += " (" + c.Description + ")"
		}
		if _, ok := raw["nimages"]; ok {
			if _, ok := raw["ntrigger"]; ok {
				n, ok := imagesAsked(c.NImages, c.NTrigger, c.TriggerMode)
				if !ok {
					return errs.New(errs.Format, "dectris: series %d: nimages %d × ntrigger %d is more than 2^64 frames", r.series, c.NImages, c.NTrigger)
				}
				frames = n
			}
		}
		if roi := strings.ToLower(c.ROIMode); c.XPixels > 0 && c.YPixels > 0 && (roi == "" || roi == "disabled") {
			sig = [2]int{c.YPixels, c.XPixels}
			if dt = depthDType(c.BitDepth); dt == dataset.Invalid {
				return errs.New(errs.DType, "dectris: series %d: bit_depth_image %d: want 8, 16 or 32", r.series, c.BitDepth)
			}
		}
	}
	for i := 2; i+1 < len(parts) && i < 8; i += 2 {
		var a v1Array
		if err := json.Unmarshal(parts[i], &a); err != nil {
			return errs.New(errs.Format, "dectris: part %d of the header of series %d (%q): %w", i+1, r.series, truncate(parts[i]), err)
		}
		if a.HType != "dpixelmask-1.0" {
			continue
		}
		if len(a.Shape) != 2 || a.Type != "uint32" || a.Shape[0] <= 0 || a.Shape[1] <= 0 || len(parts[i+1]) != 4*a.Shape[0]*a.Shape[1] {
			return errs.New(errs.Format, "dectris: the pixel mask of series %d: shape %v, type %q, %d bytes: want [x, y] uint32 of 4·x·y bytes", r.series, a.Shape, a.Type, len(parts[i+1]))
		}
		maskShape = [2]int{a.Shape[1], a.Shape[0]}
		mask = make([]uint32, a.Shape[0]*a.Shape[1])
		for j := range mask {
			mask[j] = binary.LittleEndian.Uint32(parts[i+1][4*j:])
		}
	}
	return r.setHeader(detector, frames, sig, dt, mask, maskShape)
}

// depthDType is the dtype of frames of bit_depth_image bits.
func depthDType(bits int) dataset.DType {
	switch bits {
	case 8:
		return dataset.Uint8
	case 16:
		return dataset.Uint16
	case 32:
		return dataset.Uint32
	}
	return dataset.Invalid
}

// imageD reads a dimage_d part (the same bytes as the last one's but for the value of
// "size", which v1Array ignores: its result again, without json.Unmarshal, 8% of
// stemdot live's CPU in perf on 192×192 bslz4 frames): the frame's encoding, checked
// against the header's shape and dtype (which it sets where the header gave none).
func (r *Receiver) imageD(part []byte) (int, error) {
	if r.lastD != nil && sameButSize(part, r.lastD) {
		return r.lastEnc, nil
	}
	var a v1Array
	if err := json.Unmarshal(part, &a); err != nil || a.HType != "dimage_d-1.0" {
		return 0, errs.New(errs.Format, "dectris: the 2nd part of a stream v1 image of series %d is %q, not dimage_d-1.0", r.series, truncate(part))
	}
	dt, _ := dataset.ParseDType(a.Type)
	if dt != dataset.Uint8 && dt != dataset.Uint16 && dt != dataset.Uint32 {
		return 0, errs.New(errs.DType, "dectris: series %d sends frames of type %q: want uint8, uint16 or uint32", r.series, a.Type)
	}
	if len(a.Shape) != 2 || a.Shape[0] <= 0 || a.Shape[1] <= 0 || a.Shape[0] > 1<<16 || a.Shape[1] > 1<<16 {
		return 0, errs.New(errs.Format, "dectris: series %d sends frames of shape %v: want [x, y]", r.series, a.Shape)
	}
	sig := [2]int{a.Shape[1], a.Shape[0]}
	if r.hdr.SigShape == [2]int{} {
		r.hdr.SigShape, r.hdr.DType = sig, dt
	}
	if sig != r.hdr.SigShape || dt != r.hdr.DType {
		return 0, errs.New(errs.Format, "dectris: series %d sends a frame of %d×%d %s, its header %d×%d %s", r.series, sig[0], sig[1], dt, r.hdr.SigShape[0], r.hdr.SigShape[1], r.hdr.DType)
	}
	enc, err := v1Encoding(a.Encoding)
	if err != nil {
		return 0, err
	}
	r.lastD, r.lastEnc = bytes.Clone(part), enc
	return enc, nil
}

// sameButSize says whether JSON text a is b's bytes but for the digits after the first
// `"size":` in both, each a JSON integer. Then a decodes into v1Array as b does, where b
// decodes: in JSON text those digits are the value of a member whose key ends in
// "size", which matches no field of v1Array, whose decoder ignores it.
func sameButSize(a, b []byte) bool {
	key := []byte(`"size":`)
	i := bytes.Index(a, key)
	if i < 0 || !bytes.HasPrefix(b, a[:i+len(key)]) {
		return bytes.Equal(a, b)
	}
	digits := func(s []byte) int {
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 0 || n > 1 && s[0] == '0' {
			return -1
		}
		return n
	}
	a, b = a[i+len(key):], b[i+len(key):]
	da, db := digits(a), digits(b)
	return da > 0 && db > 0 && bytes.Equal(a[da:], b[db:])
}

// v1Encoding is the Frame.Enc of a dimage_d encoding.
func v1Encoding(e string) (int, error) {
	switch e {
	case "<":
		return encRaw, nil
	case ">":
		return encRaw | encSwap, nil
	case "lz4<":
		return encLZ4Block, nil
	case "bs8-lz4<":
		return encBSLZ4 | 1<<4, nil
	case "bs16-lz4<":
		return encBSLZ4 | 2<<4, nil
	case "bs32-lz4<":
		return encBSLZ4 | 4<<4, nil
	}
	return 0, errs.New(errs.Format, "dectris: stream v1 encoding %q: stemdot decodes \"<\", \"lz4<\", \"bs8-lz4<\", \"bs16-lz4<\" and \"bs32-lz4<\"", e)
}

// checkBlob checks what can be checked of a frame's blob without decoding it: the
// size of an uncompressed one, and the decoded size in a bitshuffle-LZ4 or HDF5 LZ4
// header (0 where LiberTEM-live's simulator zeroes it).
func (r *Receiver) checkBlob(idx uint64, blob []byte, enc int) error {
	fb := r.hdr.FrameBytes()
	switch enc & 15 {
	case encRaw:
		if len(blob) != fb {
			return live.Ended("frame %d of series %d: %d bytes sent, an uncompressed frame has %d", idx, r.series, len(blob), fb)
		}
	case encBSLZ4, encLZ4HDF5:
		if len(blob) < 12 {
			return live.Ended("frame %d of series %d: a %s blob of %d bytes, fewer than its 12-byte header", idx, r.series, encName(enc), len(blob))
		}
		if n := binary.BigEndian.Uint64(blob); n != 0 && n != uint64(fb) {
			return live.Ended("frame %d of series %d: its %s blob decodes to %d bytes, a frame has %d", idx, r.series, encName(enc), n, fb)
		}
	}
	return nil
}
