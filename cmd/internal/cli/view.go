package cli

import (
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/cmd/internal/view"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/planner"
)

func newViewCmd() *cobra.Command {
	var df datasetFlags
	var pf planFlags
	var gpu, noBrowser, liveMode, passive bool
	var port int
	var listen, keep string
	var closeAfter time.Duration
	cmd := &cobra.Command{
		Use:   "view FILE [dataset options] [--port N] [--gpu] | view --live SOURCE [--nav-shape Y,X] [--passive] [source options]",
		Short: "An interactive virtual detector in the browser: drag detectors over the sum frame, see the virtual image (of a file, or while a scan arrives: --live)",
		Long: `view opens the dataset, computes its sum, mean and max frames (one pass, a progress
bar on the page), starts an HTTP server on 127.0.0.1 (--port, 0: any free port) and
prints its URL, which carries a random token; with $BROWSER set it opens the URL there.

The page (served from the binary, nothing fetched from elsewhere) shows on the left the
sum, mean or max frame (or the frame of a scan position clicked on the right), log or
linear, with the detector drawn on it: disk, ring, rect, point or com, moved by dragging
its inside, resized by dragging its edge (a ring's inner or outer edge, a rect's
bottom-right corner), or with the keys (arrows move, Shift ×10; + and − resize), its
spec editable as the CLI's (disk:128,128,20, disk:auto). It starts as disk:auto, the
direct beam's disk found in the sum frame as apply finds it (where none is found, at the
frame's centre, with a note saying why). On the right the virtual image of the
detector as stemdot apply computes it (the same float32 values), updated while it is
dragged, with colour map, contrast limits and colour bar; for com the shift y, shift x
or their magnitude, as apply --com-shifts and stemdot com --magnitude give them. Export:
the image as NPY (as apply --out writes it; com: the shifts as --com-shifts), the image
as PNG as apply --png writes it (grey from the minimum to the maximum, scaled up to a
short side of 256 pixels), and the stemdot apply command of the image shown.

Runs: one at a time, on the workers of --cpus/--gpus (--gpu: one GPU worker, CUDA
builds only); a page's new request cancels its run in progress (newest wins; two pages
take turns); while a run is under way during a drag, only the newest detector waits for
it, and a run still far from done is cancelled at once. The sum frames and the last 16
images are kept.

Safety: the server listens on loopback only unless --listen ADDR is given; it answers
only URLs with its token, only requests whose Host is an IP address, localhost or the
name given to --listen, and whose Origin (if any) is its own (no DNS rebinding), and
serves only this dataset. It
stops at Ctrl-C or SIGTERM (exit status 0), or --close-after (default 30s) after the
last page showing it was closed (0: only at Ctrl-C; never before a first page
connected); a reload reconnects within it.

--live SOURCE views an acquisition while it arrives from a detector (merlin://HOST[:PORT],
dectris://HOST[:PORT], as stemdot live takes them, with its --nav-shape, --passive and
source options): the virtual image of the detector fills in as frames arrive (up to
50 images a second), with the frames received, missing and the rate, beside the sum, mean
or max frame of the frames received so far. A detector moved mid-scan is recomputed
from the frames received so far, then goes on filling in; once the acquisition has
ended, the frames are viewed as a file's are. Every image is stemdot apply's for the
same frames (the same float32 values). To read them again, the frames received are
kept in memory as the stream encodes them, up to --keep bytes (default: half the
memory available when the view starts); a frame received once the budget is spent is
computed for the detector of the moment and shows as NaN (black) in the images of
detectors moved later, which the page counts. Frames are computed 8 at a time and the
image is published every 20 ms: at kHz frame rates a frame is on the page some tens of
milliseconds after it arrives.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if gpu {
				if !stemdot.BuiltWithCUDA() {
					return fmt.Errorf("--gpu: this stemdot is built without CUDA (CPU-only): build it with make where nvcc is found, or leave --gpu out")
				}
				if pf.GPUs != "" {
					return fmt.Errorf("--gpu and --gpus %s: give one of them", pf.GPUs)
				}
				pf.GPUs = "1"
			}
			if closeAfter < 0 {
				return fmt.Errorf("--close-after %s: want a duration of 0 (only Ctrl-C stops the server) or more", closeAfter)
			}
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if listen != "" {
				if cmd.Flags().Changed("port") {
					return fmt.Errorf("--listen %s and --port %d: give the port in --listen (HOST:PORT)", listen, port)
				}
				addr = listen
			} else if port < 0 || port > 65535 {
				return fmt.Errorf("--port %d: want 0 (any free port) to 65535", port)
			}
			if err := checkSourceFlags(cmd, liveMode); err != nil {
				return err
			}
			apply, err := pf.Planner()
			if err != nil {
				if gpu {
					return fmt.Errorf("--gpu: %w", err)
				}
				return err
			}
			var hosts []string
			if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && net.ParseIP(h) == nil {
				hosts = append(hosts, h) // --listen NAME:PORT: pages open it by that name
			}
			opt := view.Options{File: args[0], Apply: apply, CloseAfter: closeAfter, Hosts: hosts}
			if liveMode {
				rcv, lo, err := liveSource(cmd, args[0], &df, passive, keep)
				if err != nil {
					return err
				}
				defer rcv.Close()
				srv, err := view.NewLive(rcv, opt, lo)
				if err != nil {
					return err
				}
				return serveView(cmd, srv, addr, listen, noBrowser, lo.Source)
			}
			if strings.Contains(args[0], "://") {
				return fmt.Errorf("%s is a detector's address: give --live to view its acquisition as it arrives", shellQuote(args[0]))
			}
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			// The command that reproduces the page's images runs on the same kind of
			// workers: GPU products may differ from CPU ones in the last bits.
			var planArgs []string
			if pf.GPUs != "" {
				planArgs = append(planArgs, "--gpus", shellQuote(pf.GPUs))
			}
			if pf.CPUs != "" {
				planArgs = append(planArgs, "--cpus", shellQuote(pf.CPUs))
			}
			rp := pf.Plan
			rp.GPUs = ""
			reduce, err := rp.ReducePlanner()
			if err != nil {
				return err
			}
			opt.Command, opt.Reduce, opt.Warnings = strings.Join(append([]string{applyCommand(args[0], &df)}, planArgs...), " "), reduce, stemdot.OpenWarnings(ds)
			srv, err := view.New(ds, opt)
			if err != nil {
				return err
			}
			return serveView(cmd, srv, addr, listen, noBrowser, args[0])
		},
	}
	f := cmd.Flags()
	f.IntVar(&port, "port", 0, "port on 127.0.0.1 (0: any free port)")
	f.StringVar(&listen, "listen", "", "listen on HOST:PORT instead, e.g. 0.0.0.0:8080 (other machines then reach it: anyone with the URL's token can read the dataset's images)")
	f.BoolVar(&gpu, "gpu", false, "compute the images on one GPU worker (a build with CUDA; else an error)")
	f.BoolVar(&noBrowser, "no-browser", false, "do not open $BROWSER, only print the URL")
	f.DurationVar(&closeAfter, "close-after", 30*time.Second, "stop this long after the last page showing the view was closed (0: only Ctrl-C or SIGTERM stop it)")
	f.BoolVar(&liveMode, "live", false, "view the acquisition of SOURCE (merlin://HOST[:PORT], dectris://HOST[:PORT]) while it arrives, instead of a file")
	f.BoolVar(&passive, "passive", false, "--live: only listen for an acquisition someone else starts (default: start it here)")
	f.StringVar(&keep, "keep", "", "--live: bytes of frames kept (as the stream encodes them) to recompute a detector moved mid-scan, e.g. 8GiB, 0 for none (default: half the memory available)")
	pf.register(f, false)
	df.register(f)
	registerSourceFlags(f)
	return cmd
}

// liveSource opens the receiver of stemdot view --live SOURCE (not started yet) and the
// live mode's options.
func liveSource(cmd *cobra.Command, source string, df *datasetFlags, passive bool, keep string) (live.Receiver, view.LiveOptions, error) {
	var lo view.LiveOptions
	if cmd.Flags().Changed("nav-shape") {
		nav, err := frontend.ParseShape(*df.values["nav_shape"], 0)
		if err != nil {
			return nil, lo, fmt.Errorf("--nav-shape: %w", err)
		}
		lo.NavShape = nav
	}
	lo.Keep = memlimit.RAM().Bytes / 2
	if keep == "0" {
		lo.Keep = 0
	} else if keep != "" {
		b, err := planner.ParseBytes(keep)
		if err != nil || b > math.MaxInt64 {
			return nil, lo, fmt.Errorf("--keep %s: want a size such as 8GiB or 512MiB, or 0 to keep no frame", keep)
		}
		lo.Keep = int64(b)
	}
	params := sourceParams(cmd)
	if err := checkParams(source, params); err != nil {
		return nil, lo, err
	}
	rcv, src, err := live.Open(source, live.Options{Active: !passive, Frames: product(lo.NavShape), Params: params})
	lo.Source = src
	return rcv, lo, err
}

// checkSourceFlags refuses the dataset options that do not apply to --live (all but
// --nav-shape, and the dataset options that are source options too), and the options
// of --live (its source options, --passive, --keep) without it.
func checkSourceFlags(cmd *cobra.Command, liveMode bool) error {
	source := map[string]bool{}
	for _, p := range live.Protocols() {
		for _, key := range p.Params {
			source[strings.TrimPrefix(flagOf(key), "--")] = true
		}
	}
	dataset := map[string]bool{}
	for _, o := range stemdot.OpenOptions() {
		dataset[strings.TrimPrefix(o.FlagName(), "--")] = true
	}
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch {
		case err != nil:
		case liveMode && dataset[f.Name] && !source[f.Name] && f.Name != "nav-shape":
			err = fmt.Errorf("--%s is an option of files: stemdot view --live takes --nav-shape and the source's options (stemdot live --help)", f.Name)
		case !liveMode && (source[f.Name] && !dataset[f.Name] || f.Name == "passive" || f.Name == "keep"):
			err = fmt.Errorf("--%s is an option of stemdot view --live SOURCE", f.Name)
		}
	})
	return err
}

// serveView serves srv on addr (--listen, else --port on loopback) until the command's
// context ends or the last page has gone (--close-after), and prints its URL, opening
// it in $BROWSER unless noBrowser; name is the file or source viewed.
func serveView(cmd *cobra.Command, srv *view.Server, addr, listen string, noBrowser bool, name string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if listen != "" {
			return fmt.Errorf("listening on %s (--listen): %w (give another --listen HOST:PORT, with port 0 for any free one)", addr, err)
		}
		return fmt.Errorf("listening on %s: %w (give another --port, or --port 0 for any free one)", addr, err)
	}
	shown := ln.Addr().String()
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() { // --listen 0.0.0.0:PORT
		shown = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
		warn(cmd, fmt.Sprintf("listening on every address (--listen %s): from another machine, open the URL with this machine's IP address in place of 127.0.0.1 (a name: give it to --listen NAME:PORT)", listen))
	}
	url := fmt.Sprintf("http://%s/%s/", shown, srv.Token())
	fmt.Fprintf(cmd.OutOrStdout(), "stemdot view of %s: %s\n", name, url)
	if f, ok := cmd.OutOrStdout().(interface{ Sync() error }); ok { // a file, escaped (safetext.Writer)
		f.Sync()
	}
	if b := os.Getenv("BROWSER"); b != "" && !noBrowser {
		args, err := browserCommand(b, url)
		var c *exec.Cmd
		if err == nil {
			c = exec.Command(args[0], args[1:]...)
			err = c.Start()
		}
		if err != nil {
			warn(cmd, fmt.Sprintf("$BROWSER %s: %v: open the URL yourself", b, err))
		} else {
			go c.Wait()
		}
	}
	err = handleInterrupts(func() error { return srv.Serve(cmd.Context(), ln) })
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: view stopped\n", prefix)
	return nil
}

// browserCommand is the command line that opens url by $BROWSER value b, read as Python's
// webbrowser and xdg-utils read it: commands separated by colons, the first one whose
// program is found; each a program and its arguments separated by blanks (or a path to a
// program, blanks and all), with %s standing for the URL, else the URL added last. The
// error names the programs not found.
func browserCommand(b, url string) ([]string, error) {
	var missing []string
	for _, entry := range strings.Split(b, ":") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		if p, err := exec.LookPath(entry); err == nil && !strings.Contains(entry, "%s") {
			return []string{p, url}, nil
		}
		args := strings.Fields(entry)
		p, err := exec.LookPath(args[0])
		if err != nil {
			missing = append(missing, strconv.Quote(args[0]))
			continue
		}
		args[0] = p
		subst := false
		for i, a := range args[1:] {
			if strings.Contains(a, "%s") {
				args[i+1] = strings.ReplaceAll(a, "%s", url)
				subst = true
			}
		}
		if !subst {
			args = append(args, url)
		}
		return args, nil
	}
	if len(missing) == 0 {
		return nil, fmt.Errorf("names no program")
	}
	return nil, fmt.Errorf("no program found of %s", strings.Join(missing, ", "))
}

// applyCommand is the stemdot apply command for the dataset at path opened with the
// dataset options given, shell-quoted; the page adds the masks and outputs.
func applyCommand(path string, df *datasetFlags) string {
	parts := []string{"stemdot", "apply", shellQuote(path)}
	for _, o := range stemdot.OpenOptions() {
		name := strings.TrimPrefix(o.FlagName(), "--")
		if df.flags.Changed(name) {
			v := *df.values[o.Key]
			if o.Switch {
				parts = append(parts, "--"+name+"="+shellQuote(v))
			} else {
				parts = append(parts, "--"+name, shellQuote(v))
			}
		}
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell where it holds more than safe characters; with
// terminal control characters, in bash's ANSI-C quoting $'...', escaped as
// safetext.String escapes them, so that the command runs as shown and shows no control
// character raw.
func shellQuote(s string) string {
	if safetext.String(s) != s {
		return "$'" + safetext.String(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)) + "'"
	}
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./,:=+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
