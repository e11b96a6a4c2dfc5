package dectris

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// The source options of dectris://HOST[:PORT] (live.Options.Params), by key.
const (
	ParamStream       = "stream"        // v1 or v2 (default v2)
	ParamAPI          = "dectris_api"   // the SIMPLON REST API, host[:port] (active mode)
	ParamChannel      = "channel"       // the stream v2 channel
	ParamPixelMask    = "pixel_mask"    // false keeps the flagged pixels' values
	ParamTriggerMode  = "trigger_mode"  // ints, inte, exts or exte
	ParamNImages      = "nimages"       // images per trigger
	ParamNTrigger     = "ntrigger"      // triggers
	ParamStartTimeout = "start_timeout" // seconds to wait for the series' header
)

// Params lists the source options, for help texts.
var Params = []string{ParamStream, ParamAPI, ParamChannel, ParamPixelMask, ParamTriggerMode, ParamNImages, ParamNTrigger, ParamStartTimeout}

func init() {
	live.Register(live.Protocol{Params: Params, Scheme: "dectris", Describe: "DECTRIS SIMPLON stream (ARINA, QUADRO, EIGER): dectris://HOST[:PORT] is the ZeroMQ stream (port 31001 for stream v2, 9999 for v1)",
		Open: func(hostPort string, opt live.Options) (live.Receiver, error) {
			o, err := sourceOptions(hostPort, opt)
			if err != nil {
				return nil, err
			}
			return New(o)
		}})
}

// sourceOptions are the receiver's Options for the stream at hostPort ("host" or
// "host:port") and the source options. In active mode without ntrigger and nimages,
// the scan's frames are taken as one image per trigger, ntrigger = opt.Frames, as
// LiberTEM-live arms a STEM scan.
func sourceOptions(hostPort string, opt live.Options) (Options, error) {
	o := Options{Stream: hostPort, Protocol: V2, Active: opt.Active, Shared: opt.Shared}
	bad := func(key, v, want string) error {
		return errs.New(errs.Argument, "dectris source option %s %q: want %s", key, v, want)
	}
	count := func(key, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, bad(key, v, "a positive number")
		}
		return n, nil
	}
	var err error
	for key, v := range opt.Params {
		switch key {
		case ParamStream:
			switch strings.ToLower(v) {
			case "v1", "1", "legacy":
				o.Protocol = V1
			case "v2", "2", "cbor":
				o.Protocol = V2
			default:
				return o, bad(key, v, "v1 or v2")
			}
		case ParamAPI:
			o.API = v
		case ParamChannel:
			o.Channel = v
		case ParamPixelMask:
			on, perr := strconv.ParseBool(v)
			if perr != nil {
				return o, bad(key, v, "true or false")
			}
			o.KeepMaskedPixels = !on
		case ParamTriggerMode:
			if !slices.Contains([]string{"ints", "inte", "exts", "exte"}, v) {
				return o, bad(key, v, "ints, inte, exts or exte")
			}
			o.TriggerMode = v
		case ParamNImages:
			o.NImages, err = count(key, v)
		case ParamNTrigger:
			o.NTrigger, err = count(key, v)
		case ParamStartTimeout:
			s, perr := strconv.ParseFloat(v, 64)
			if perr != nil || s <= 0 || s > 1e6 {
				return o, bad(key, v, "seconds, more than 0")
			}
			o.StartTimeout = time.Duration(s * float64(time.Second))
		default:
			return o, errs.New(errs.Argument, "dectris source option %q is not known: want one of %s", key, strings.Join(Params, ", "))
		}
		if err != nil {
			return o, err
		}
	}
	if o.Active && o.API == "" {
		return o, errs.New(errs.Argument, "dectris: active mode configures and arms the detector through its SIMPLON API: give source option %s HOST[:PORT]", ParamAPI)
	}
	if o.Active && o.NImages == 0 && o.NTrigger == 0 && opt.Frames > 0 {
		o.NImages, o.NTrigger = 1, opt.Frames
	}
	if _, _, err := net.SplitHostPort(o.Stream); err != nil {
		o.Stream = net.JoinHostPort(strings.Trim(o.Stream, "[]"), strconv.Itoa(o.Protocol.Port()))
	}
	return o, nil
}
