package merlin

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// The source options of merlin://HOST[:PORT] (live.Options.Params), by key.
const (
	ParamControl     = "control"      // the control port, host[:port] (active mode; default HOST:6341)
	ParamSoftTrigger = "soft_trigger" // true: CMD,SOFTTRIGGER after the start (TRIGGERSTART 5)
	ParamIdleTimeout = "idle_timeout" // seconds without a frame that end the acquisition
)

// Params lists the source options, for help texts.
var Params = []string{ParamControl, ParamSoftTrigger, ParamIdleTimeout}

func init() {
	live.Register(live.Protocol{Params: Params, Scheme: "merlin", DefaultPort: DataPort,
		Describe: "Quantum Detectors Merlin over TCP: merlin://HOST[:PORT] is the data port (6342); active mode starts the acquisition on the control port (HOST:6341)",
		Open: func(hostPort string, opt live.Options) (live.Receiver, error) {
			o, err := sourceOptions(hostPort, opt)
			if err != nil {
				return nil, err
			}
			return New(o), nil
		}})
}

// sourceOptions are the receiver's Options for the data port at hostPort and the
// source options: in active mode the control port is HOST:6341 unless given, and the
// acquisition takes opt.Frames frames.
func sourceOptions(hostPort string, opt live.Options) (Options, error) {
	o := Options{Addr: hostPort}
	if opt.Shared {
		return o, errs.New(errs.Argument, "merlin: a Merlin's data port is one TCP connection, which cannot be shared by several receivers: leave out option shared")
	}
	bad := func(key, v, want string) error {
		return errs.New(errs.Argument, "merlin source option %s %q: want %s", key, v, want)
	}
	for key, v := range opt.Params {
		switch key {
		case ParamControl:
			if _, _, err := net.SplitHostPort(v); err != nil {
				v = net.JoinHostPort(strings.Trim(v, "[]"), strconv.Itoa(ControlPort))
			}
			o.Control = v
		case ParamSoftTrigger:
			on, err := strconv.ParseBool(v)
			if err != nil {
				return o, bad(key, v, "true or false")
			}
			o.SoftTrigger = on
		case ParamIdleTimeout:
			s, err := strconv.ParseFloat(v, 64)
			if err != nil || s <= 0 || s > 1e6 {
				return o, bad(key, v, "seconds, more than 0")
			}
			o.IdleTimeout = time.Duration(s * float64(time.Second))
		default:
			return o, errs.New(errs.Argument, "merlin source option %q is not known: want one of %s", key, strings.Join(Params, ", "))
		}
	}
	if !opt.Active {
		if o.Control != "" || o.SoftTrigger {
			return o, errs.New(errs.Argument, "merlin: source options %s and %s are for active mode, which starts the acquisition: passive mode only listens", ParamControl, ParamSoftTrigger)
		}
		return o, nil
	}
	if o.Control == "" {
		host, _, err := net.SplitHostPort(hostPort)
		if err != nil {
			return o, errs.New(errs.Argument, "merlin: data port %q is not HOST:PORT", hostPort)
		}
		o.Control = net.JoinHostPort(host, strconv.Itoa(ControlPort))
	}
	o.Frames = opt.Frames
	return o, nil
}
