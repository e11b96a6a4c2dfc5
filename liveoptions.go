package stemdot

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/live"
)

// liveKeys are the keys of ParseLiveOptions besides the protocols' source options.
var liveKeys = []string{"passive", "nav_shape", "record", "float64", "every", "shared"}

// ParseLiveOptions parses the option string of the C ABI's stemdot_live_start and
// Python's stemdot.live, "key=value;key=value" (keys case-insensitive, as ParseOptions
// reads them), into the receiver's options (live.Open) and Live's, as `stemdot live`
// reads its flags:
//
//	passive    true: only listen for an acquisition someone else starts (default false:
//	           active mode starts it, with as many frames as nav_shape has positions)
//	nav_shape  the scan shape, e.g. 64,64 (LiveOptions.NavShape)
//	record     the file the frames received are recorded to (LiveOptions.Record)
//	float64    true: compute and give the result in float64 (default float32)
//	every      seconds between snapshots (default 0.1)
//	shared     true: receive a share of a stream that several receivers share, each
//	           getting some of its frames (live.Options.Shared, LiveOptions.Shared;
//	           passive mode only)
//
// and the source options of the registered protocols by key (merlin's control,
// soft_trigger, idle_timeout; dectris's stream, dectris_api, ...: live.Protocol.Params),
// which the protocol of the source checks when it is opened. Errors are errs.Argument
// (errs.Shape for nav_shape) naming the option.
func ParseLiveOptions(s string) (live.Options, LiveOptions, error) {
	lo := live.Options{Active: true, Params: map[string]string{}}
	var opt LiveOptions
	err := frontend.ParseKeyValues(s, "live option", func(key, value string) error {
		v := strings.TrimSpace(value)
		var err error
		want := "true or false"
		switch key {
		case "passive":
			var passive bool
			passive, err = parseBool(v)
			lo.Active = !passive
		case "float64":
			opt.Float64, err = parseBool(v)
		case "shared":
			opt.Shared, err = parseBool(v)
			lo.Shared = opt.Shared
		case "nav_shape":
			if opt.NavShape, err = frontend.ParseShape(v, 0); err != nil {
				return errs.New(errs.Shape, "option nav_shape %q: %v", v, err)
			}
			lo.Frames = product(opt.NavShape)
		case "record":
			opt.Record = value
			if v == "" {
				return errs.New(errs.Argument, "option record is empty: give the file to record to, or leave it out")
			}
		case "every":
			sec, perr := strconv.ParseFloat(v, 64)
			if perr != nil || !(sec > 0 && sec <= 3600) {
				return errs.New(errs.Argument, "option every %q: want the seconds between snapshots, more than 0 and at most 3600", v)
			}
			opt.Every = time.Duration(sec * float64(time.Second))
		default:
			if !slices.ContainsFunc(live.Protocols(), func(p live.Protocol) bool { return slices.Contains(p.Params, key) }) {
				return errs.New(errs.Argument, "unknown live option %q (known: %s)", key, strings.Join(liveOptionKeys(), ", "))
			}
			lo.Params[key] = value
		}
		if err != nil {
			return errs.New(errs.Argument, "option %s %q: want %s", key, v, want)
		}
		return nil
	})
	return lo, opt, err
}

// liveOptionKeys lists the keys ParseLiveOptions knows: its own, then each protocol's
// ("stream (dectris)").
func liveOptionKeys() []string {
	keys := slices.Clone(liveKeys)
	for _, p := range live.Protocols() {
		for _, k := range p.Params {
			keys = append(keys, k+" ("+p.Scheme+")")
		}
	}
	return keys
}
