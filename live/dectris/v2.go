package dectris

import (
	"encoding/binary"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// Stream v2 (DECTRIS documentation, stream_v2/README.md): each message is one CBOR map
// whose "type" is "start" (the series' configuration: image_size_x, image_size_y,
// image_dtype, number_of_images, channels, with header_detail all pixel_mask: a map of
// channel → multi-dimensional array), "image" (image_id, data: a map of channel → the
// image as a multi-dimensional array) or "end"; each carries series_id. A
// multi-dimensional array is RFC 8746 tag 40 of [[rows, columns], typed array], a typed
// array an RFC 8746 tag (64 uint8, 69 uint16 little-endian, 70 uint32 little-endian, 65
// and 66 big-endian) of a byte string, or of DECTRIS's tag 56500 (cbor/dectris-compression-
// tag.md): [algorithm "bslz4" or "lz4", element size, compressed bytes].

type v2Msg struct {
	Type           string                 `cbor:"type"`
	SeriesID       uint64                 `cbor:"series_id"`
	Channels       []string               `cbor:"channels"`
	ImageDType     string                 `cbor:"image_dtype"`
	ImageSizeX     uint64                 `cbor:"image_size_x"`
	ImageSizeY     uint64                 `cbor:"image_size_y"`
	NumberOfImages uint64                 `cbor:"number_of_images"`
	Description    string                 `cbor:"detector_description"`
	PixelMask      map[string]cbor.RawTag `cbor:"pixel_mask"`
	ImageID        uint64                 `cbor:"image_id"`
	Data           map[string]cbor.RawTag `cbor:"data"`
}

// v2Dec decodes stream v2 messages: CBOR's limits on nesting, arrays and maps as
// fxamacker/cbor's defaults, duplicate map keys refused.
var v2Dec, _ = cbor.DecOptions{DupMapKey: cbor.DupMapKeyEnforcedAPF}.DecMode()

// array is a multi-dimensional array of a v2 message.
type array struct {
	dims    [2]int
	dt      dataset.DType
	enc     int
	payload []byte
}

// typedArray is the dtype of the RFC 8746 typed array of tag number, and encSwap for a
// big-endian one; false for a tag stemdot does not read.
func typedArray(number uint64) (dataset.DType, int, bool) {
	switch number {
	case 64, 68:
		return dataset.Uint8, 0, true
	case 65:
		return dataset.Uint16, encSwap, true
	case 66:
		return dataset.Uint32, encSwap, true
	case 69:
		return dataset.Uint16, 0, true
	case 70:
		return dataset.Uint32, 0, true
	}
	return 0, 0, false
}

// parseArray reads a multi-dimensional array of two dimensions.
func parseArray(t cbor.RawTag) (array, error) {
	var a array
	if t.Number != 40 {
		return a, errs.New(errs.Format, "tag %d where a multi-dimensional array (tag 40) was expected", t.Number)
	}
	var content []cbor.RawMessage
	if err := v2Dec.Unmarshal(t.Content, &content); err != nil || len(content) != 2 {
		return a, errs.New(errs.Format, "a multi-dimensional array that is not [dimensions, typed array]")
	}
	var dims []uint64
	if err := v2Dec.Unmarshal(content[0], &dims); err != nil || len(dims) != 2 || dims[0] == 0 || dims[1] == 0 || dims[0] > 1<<16 || dims[1] > 1<<16 {
		return a, errs.New(errs.Format, "a multi-dimensional array's dimensions are not two sizes of 1 to 65536 (%v)", dims)
	}
	a.dims = [2]int{int(dims[0]), int(dims[1])}
	var typed cbor.RawTag
	if err := v2Dec.Unmarshal(content[1], &typed); err != nil {
		return a, errs.New(errs.Format, "a multi-dimensional array's data is not a typed array: %w", err)
	}
	var ok bool
	if a.dt, a.enc, ok = typedArray(typed.Number); !ok {
		return a, errs.New(errs.DType, "typed array tag %d: stemdot reads 64 (uint8), 69 and 65 (uint16), 70 and 66 (uint32)", typed.Number)
	}
	var comp cbor.RawTag
	if v2Dec.Unmarshal(typed.Content, &a.payload) == nil {
		return a, nil
	}
	if err := v2Dec.Unmarshal(typed.Content, &comp); err != nil || comp.Number != 56500 {
		return a, errs.New(errs.Format, "a typed array holds neither a byte string nor a DECTRIS compressed one (tag 56500)")
	}
	var c struct {
		_    struct{} `cbor:",toarray"`
		Alg  string
		Elem uint64
		Data []byte
	}
	if err := v2Dec.Unmarshal(comp.Content, &c); err != nil {
		return a, errs.New(errs.Format, "DECTRIS compression tag 56500 is not [algorithm, element size, bytes]: %w", err)
	}
	switch {
	case c.Alg == "bslz4" && (c.Elem == 1 || c.Elem == 2 || c.Elem == 4 || c.Elem == 8):
		a.enc |= encBSLZ4 | int(c.Elem)<<4
	case c.Alg == "bslz4":
		return a, errs.New(errs.Format, "bslz4 of %d-byte elements: want 1, 2, 4 or 8", c.Elem)
	case c.Alg == "lz4":
		a.enc |= encLZ4HDF5
	default:
		return a, errs.New(errs.Format, "DECTRIS compression %q: stemdot decodes \"bslz4\" and \"lz4\"", c.Alg)
	}
	a.payload = c.Data
	return a, nil
}

// decodeArray decodes a whole array into dst (of its size).
func decodeArray(dst []byte, a array) error {
	var err error
	switch a.enc & 15 {
	case encRaw:
		if len(a.payload) != len(dst) {
			err = errs.New(errs.Format, "%d bytes, want %d", len(a.payload), len(dst))
		} else {
			copy(dst, a.payload)
		}
	case encBSLZ4:
		err = decodeBSLZ4(dst, a.payload, a.enc>>4&15)
	case encLZ4HDF5:
		err = decodeLZ4(dst, a.payload)
	}
	if err == nil && a.enc&encSwap != 0 {
		swap(dst, a.dt.Size())
	}
	return err
}

// handleV2 takes a v2 message.
func (r *Receiver) handleV2(parts [][]byte, dst *[]live.Frame) error {
	if len(parts) != 1 {
		return r.malformed(errs.New(errs.Format, "dectris: a stream v2 message of %d parts, want 1", len(parts)))
	}
	if im, ok := imageV2Fast(parts[0], r.channel); ok && r.started && v2Fast {
		if r.channel == "" && im.channels == 1 {
			r.channel = im.channel
		}
		return r.imageV2(im.series, im.id, im.a, dst)
	}
	var m v2Msg
	if err := v2Dec.Unmarshal(parts[0], &m); err != nil {
		return r.malformed(errs.New(errs.Format, "dectris: a stream v2 message that is not a CBOR map of the stream's fields: %w", err))
	}
	switch m.Type {
	case "start":
		if r.started {
			return r.malformed(errs.New(errs.Format, "dectris: series %d started before series %d ended (%d frames received)", m.SeriesID, r.series, r.received))
		}
		if r.haveSer && m.SeriesID != r.series {
			return nil
		}
		r.series, r.haveSer = m.SeriesID, true
		r.keepHeader(parts)
		return r.startV2(m)
	case "image":
		if !r.started {
			return r.early(m.SeriesID, parts, func(dst *[]live.Frame) error { return r.handleV2(parts, dst) })
		}
		if m.SeriesID != r.series {
			return r.malformed(errs.New(errs.Format, "dectris: image %d of series %d came during series %d", m.ImageID, m.SeriesID, r.series))
		}
		if r.channel == "" && len(m.Data) == 1 {
			for k := range m.Data {
				r.channel = k
			}
		}
		t, ok := m.Data[r.channel]
		if !ok {
			return r.malformed(errs.New(errs.Format, "dectris: image %d of series %d has no channel %q (it has %q; option channel chooses)", m.ImageID, r.series, r.channel, keys(m.Data)))
		}
		a, err := parseArray(t)
		if err != nil {
			return r.malformed(errs.New(errs.Format, "dectris: image %d of series %d: %w", m.ImageID, r.series, err))
		}
		return r.imageV2(m.SeriesID, m.ImageID, a, dst)
	case "end":
		if !r.started {
			return r.early(m.SeriesID, parts, func(dst *[]live.Frame) error { return r.handleV2(parts, dst) })
		}
		if m.SeriesID != r.series {
			return r.malformed(errs.New(errs.Format, "dectris: the end of series %d came during series %d", m.SeriesID, r.series))
		}
		r.seriesEnd()
		return nil
	}
	return r.malformed(errs.New(errs.Format, "dectris: stream v2 message type %q: want start, image or end", m.Type))
}

// v2Fast enables imageV2Fast (off in the tests that compare it with the general
// decoder).
var v2Fast = true

// imageV2 takes image id of series, its channel's array a.
func (r *Receiver) imageV2(series, id uint64, a array, dst *[]live.Frame) error {
	if series != r.series {
		return r.malformed(errs.New(errs.Format, "dectris: image %d of series %d came during series %d", id, series, r.series))
	}
	if a.dims != r.hdr.SigShape || a.dt != r.hdr.DType {
		return r.malformed(errs.New(errs.Format, "dectris: image %d of series %d is %d×%d %s, its start message says %d×%d %s", id, r.series, a.dims[0], a.dims[1], a.dt, r.hdr.SigShape[0], r.hdr.SigShape[1], r.hdr.DType))
	}
	if err := r.checkBlob(id, a.payload, a.enc); err != nil {
		return err
	}
	return r.frame(id, a.payload, a.enc, dst)
}

func keys(m map[string]cbor.RawTag) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// startV2 reads a start message.
func (r *Receiver) startV2(m v2Msg) error {
	dt := map[string]dataset.DType{"uint8": dataset.Uint8, "uint16": dataset.Uint16, "uint32": dataset.Uint32}[m.ImageDType]
	if dt == dataset.Invalid {
		return errs.New(errs.DType, "dectris: series %d: image_dtype %q: want uint8, uint16 or uint32", r.series, m.ImageDType)
	}
	if m.ImageSizeX == 0 || m.ImageSizeY == 0 || m.ImageSizeX > 1<<16 || m.ImageSizeY > 1<<16 {
		return errs.New(errs.Format, "dectris: series %d: image_size_x %d, image_size_y %d: want sizes of 1 to 65536", r.series, m.ImageSizeX, m.ImageSizeY)
	}
	sig := [2]int{int(m.ImageSizeY), int(m.ImageSizeX)}
	r.channel = r.opt.Channel
	if r.channel == "" && len(m.Channels) > 0 {
		r.channel = m.Channels[0]
	}
	if r.opt.Channel != "" && len(m.Channels) > 0 && !slices.Contains(m.Channels, r.opt.Channel) {
		return errs.New(errs.Argument, "dectris: series %d has no channel %q (its channels: %q)", r.series, r.opt.Channel, m.Channels)
	}
	detector := "dectris " + V2.String()
	if m.Description != "" {
		detector += " (" + m.Description + ")"
	}
	frames := m.NumberOfImages
	if frames == 0 {
		frames = r.asked
	}
	var mask []uint32
	var maskShape [2]int
	if t, ok := m.PixelMask[r.channel]; ok {
		a, err := parseArray(t)
		if err == nil && a.dt != dataset.Uint32 {
			err = errs.New(errs.DType, "of %s, want uint32", a.dt)
		}
		b := make([]byte, 4*a.dims[0]*a.dims[1])
		if err == nil {
			err = decodeArray(b, a)
		}
		if err != nil {
			return errs.New(errs.Format, "dectris: the pixel mask of series %d: %w", r.series, err)
		}
		maskShape = a.dims
		mask = make([]uint32, len(b)/4)
		for i := range mask {
			mask[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
	}
	r.hdr.SigShape, r.hdr.DType = sig, dt
	return r.setHeader(detector, frames, sig, dt, mask, maskShape)
}
