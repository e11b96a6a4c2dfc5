package cli

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live/dectris"
	"github.com/stemdot/stemdot/live/merlin"
)

func newReplayCmd() *cobra.Command {
	var df datasetFlags
	var as, listen, control, api string
	var rate float64
	cmd := &cobra.Command{
		Use:   "replay FILE --as merlin|dectris-v1|dectris-v2",
		Short: "Send a dataset over a detector's stream protocol, as the detector would, for stemdot live",
		Long: `replay sends a dataset as a detector sends an acquisition over its stream protocol, until
interrupted (Ctrl-C): for testing live processing without a microscope.

--as merlin: Quantum Detectors Merlin's TCP protocol. Each receiver that connects to the
data port (--listen) gets an acquisition: the acquisition header (the .hdr), then one
message per frame. A MIB file opened without dataset options is sent as stored (its
frame headers, raw-packed R64 pixels and .hdr), as LiberTEM-live's simulator sends it;
any other dataset (any format, or a MIB file with --nav-shape, --sync-offset, ...) is
sent as U08/U16/U32 frames of its uint8/uint16/uint32 pixels, with an acquisition header
that gives its nav shape (float and signed data are refused). With --control, a control
port answers GET/SET/CMD as Merlin's does, and an acquisition is sent at each
CMD,STARTACQUISITION (SET,NUMFRAMESTOACQUIRE frames, the dataset's repeated as needed),
for a receiver in active mode.

--as dectris-v1 or dectris-v2: a DECTRIS detector's SIMPLON stream, v1 (multipart JSON and
binary messages) or v2 (CBOR), on a ZeroMQ PUSH socket (--listen; default port 9999 for
v1, 31001 for v2), frames compressed bitshuffle-LZ4 (uint8/uint16/uint32 frames; others
are refused). With --api, a SIMPLON REST API answers config, arm, trigger and disarm, and
each arm sends a series (nimages·ntrigger frames: the dataset's, repeated as needed, so
that a very large --ntrigger on the receiver's side makes a stream without end; at first
ntrigger its frames), for a receiver in active mode; without it, one series goes to the
first receiver that connects, and replay ends.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			proto := map[string]dectris.Protocol{"dectris-v1": dectris.V1, "dectris-v2": dectris.V2}[as]
			if as != "merlin" && proto == 0 {
				return errs.New(errs.Argument, "--as %q: the protocol to speak is merlin, dectris-v1 or dectris-v2", as)
			}
			if rate < 0 {
				return errs.New(errs.Argument, "--rate %g: a frame rate in Hz is 0 (as fast as the receiver reads) or more", rate)
			}
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			if proto != 0 {
				return replayDECTRIS(cmd, ds, args[0], proto, listen, api, rate, cmd.Flags().Changed("listen"))
			}
			if api != "" {
				return errs.New(errs.Argument, "--api is the SIMPLON API of --as dectris-v1 or dectris-v2: Merlin's control port is --control")
			}
			var src *merlin.Source
			how := "as stored"
			if ds.Format() == "mib" && len(df.given()) == 0 {
				src, err = merlin.FromMIB(ds.Path(), nil)
			} else {
				src, err = merlin.FromDataset(ds)
				how = fmt.Sprintf("as %s frames", map[string]string{"uint8": "U08", "uint16": "U16", "uint32": "U32"}[ds.DType().String()])
			}
			if err != nil {
				return err
			}
			defer src.Close()
			data, err := net.Listen("tcp", listen)
			if err != nil {
				return errs.Wrap(errs.IO, fmt.Errorf("--listen %s: %w", listen, err))
			}
			opt := merlin.ServeOptions{Rate: rate}
			ports := "data port " + data.Addr().String()
			if control != "" {
				if opt.Control, err = net.Listen("tcp", control); err != nil {
					data.Close()
					return errs.Wrap(errs.IO, fmt.Errorf("--control %s: %w", control, err))
				}
				ports += ", control port " + opt.Control.Addr().String()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: replaying %s (%d frames %s) as a Merlin on %s; Ctrl-C stops\n",
				prefix, args[0], src.Frames(), how, ports)
			return handleInterrupts(func() error { return merlin.Serve(cmd.Context(), data, src, opt) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&as, "as", "", "the detector protocol to speak: merlin, dectris-v1 or dectris-v2")
	f.Float64Var(&rate, "rate", 0, "frames per second (0: as fast as the receiver reads)")
	f.StringVar(&listen, "listen", "127.0.0.1:6342", "the data port's address, host:port (port 0 picks a free one); dectris: the ZeroMQ stream's, default 127.0.0.1:9999 (v1) or 127.0.0.1:31001 (v2)")
	f.StringVar(&api, "api", "", "dectris: the SIMPLON REST API's address (e.g. 127.0.0.1:8910): a series at each arm (active mode)")
	f.StringVar(&control, "control", "", "the control port's address (e.g. 127.0.0.1:6341): acquisitions at CMD,STARTACQUISITION (active mode)")
	df.register(f)
	return cmd
}

// replayDECTRIS serves ds as a DECTRIS detector of stream protocol proto until
// interrupted (with an API) or until one series is sent.
func replayDECTRIS(cmd *cobra.Command, ds dataset.Dataset, name string, proto dectris.Protocol, listen, api string, rate float64, listenGiven bool) error {
	if !listenGiven {
		listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(proto.Port()))
	}
	opt := dectris.ServeOptions{Protocol: proto, Stream: listen, API: api, Rate: rate,
		Ready: func(stream, api string) {
			where := "stream " + stream
			if api != "" {
				where += ", SIMPLON API " + api
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: replaying %s (%d frames, bitshuffle-LZ4) as a DECTRIS detector, %s, on %s; Ctrl-C stops\n",
				prefix, name, ds.NumFrames(), proto, where)
		}}
	return handleInterrupts(func() error { return dectris.Serve(cmd.Context(), opt, ds) })
}
