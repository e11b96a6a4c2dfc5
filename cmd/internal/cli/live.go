package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/live"
	_ "github.com/stemdot/stemdot/live/detectors" // merlin://, dectris://
	"github.com/stemdot/stemdot/masks"
)

// newLiveCmd is the live command: masks applied to a detector's frames while the scan
// runs.
func newLiveCmd() *cobra.Command {
	var maskSpecs, masksFiles []string
	var outputs stemdot.Outputs
	var navShape, record string
	var float64Result, quiet, passive, allowPartial, continuous bool
	var pf planFlags
	cmd := &cobra.Command{
		Use:   "live SOURCE (--mask SPEC ... | --masks FILE.npy) --out RESULT.npy",
		Short: "Apply virtual detectors to a detector's frames while the scan runs (Merlin, DECTRIS)",
		Long: `live receives one acquisition from a detector as it runs and applies the masks to its
frames as they arrive, on the pinned CPU (and GPU) workers, as apply does for a file: the
same values, bit for bit, written as the same NPY (nav_shape + (n_masks,)), sidecar and
PNGs once the acquisition ends. SOURCE is
  merlin://HOST[:PORT]    Quantum Detectors Merlin, its TCP data port (default 6342)
  dectris://HOST[:PORT]   a DECTRIS detector's SIMPLON stream (ZeroMQ; default port 31001
                          for stream v2, 9999 for --stream v1)
By default the acquisition is started here (active mode: Merlin's control port HOST:6341,
or --control; DECTRIS's SIMPLON API at --dectris-api), with as many frames as
--nav-shape has positions; --passive only listens for an acquisition started by someone
else. The scan shape is the stream's where it gives one (Merlin's acquisition header),
else --nav-shape, else one row of the frames announced.

Progress (on a terminal) shows the frames computed, the rate, and the frames missing,
late and stalled (the receiver waiting for the workers: no frame is dropped). An
acquisition that ends early (aborted, the connection lost, fewer frames than the scan)
ends the run with the frames received: the result has NaN at the positions without a
frame, its sidecar says "partial": true and lists them ("positions_without_frame"), and
live exits with status 2 unless --allow-partial is given (then 0). A malformed stream is
an error: nothing is written.

--record FILE writes what was received, as it was received, to a file stemdot opens
(merlin: a .mib with its .hdr; dectris: an .npy of the frames), so that stemdot apply on
it gives the same result bit for bit; a partial acquisition's record says so (the .hdr's
"Recorded by stemdot" line; dectris: NAME.partial.npy).

--continuous receives scan after scan until interrupted (Ctrl-C) or the stream ends:
acquisition after acquisition, each a scan (in active mode each is started here: Merlin's
CMD,STARTACQUISITION, DECTRIS's arm), and an acquisition of more frames than the scan has
positions, or of no frame count (Merlin's, LiberTEM-live's simulator --continuous; on a
DECTRIS detector, a very large --ntrigger), cut into scans of --nav-shape's positions:
frame i is position i mod n of scan i / n. Each complete scan's result is written to
--out (and --png) as it completes, replacing the last one whole (written under a
temporary name and renamed), so that the latest complete image is always on disk; a scan
that ends early is dropped. At the end the last complete scan is written again, its
sidecar's "continuous" section saying which scan it is, how many were complete and
dropped, and why the run stopped; the scan in progress at Ctrl-C is dropped. Progress
shows the scan in progress and the scans complete. live exits with status 0 after Ctrl-C
or the stream's end, 2 when the stream failed (the last complete scan is written; 0 with
--allow-partial), 1 when no scan was complete (nothing written).

stemdot replay FILE --as merlin|dectris-v1|dectris-v2 serves a file as a detector, on
loopback, to try this without a microscope.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if outputs.NPY == "" {
				return fmt.Errorf("--out RESULT.npy is required")
			}
			if continuous && record != "" {
				return fmt.Errorf("--record records one acquisition: leave it out with --continuous")
			}
			if slices.ContainsFunc(maskSpecs, masks.NeedsCentre) {
				return fmt.Errorf("the auto mask specs need the sum frame of a finished scan: give the centre in the spec, e.g. disk:128,128,20")
			}
			var nav []int
			if navShape != "" {
				var err error
				if nav, err = frontend.ParseShape(navShape, 0); err != nil {
					return fmt.Errorf("--nav-shape: %w", err)
				}
			}
			lo := live.Options{Active: !passive, Frames: product(nav), Params: sourceParams(cmd)}
			if err := checkParams(args[0], lo.Params); err != nil {
				return err
			}
			plan, err := pf.Planner()
			if err != nil {
				return err
			}
			rcv, source, err := live.Open(args[0], lo)
			if err != nil {
				return err
			}
			defer rcv.Close()
			opt := stemdot.LiveOptions{Source: source, NavShape: nav, Float64: float64Result, Record: record, Continuous: continuous}
			if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
				opt.Snapshot = liveProgress(cmd)
			}
			var maskInfo []stemdot.MaskInfo
			masksFor := func(h live.Header) (*masks.Stack, error) {
				stack, info, err := stemdot.MasksInfo(h.SigShape, nil, masksFiles, maskSpecs)
				if err != nil {
					return nil, err
				}
				maskInfo = info
				inputs := slices.Clone(masksFiles)
				if record != "" {
					inputs = append(inputs, record)
				}
				return stack, outputs.Check(stack.MaskNames(), inputs...)
			}
			var saver *latestSaver
			if continuous {
				saver = newLatestSaver(func(lr *stemdot.LiveResult) error { return stemdot.Save(lr.Result, outputs) })
				opt.OnScan = func(lr *stemdot.LiveResult) error {
					lr.Info.SetMasks(maskInfo)
					return saver.put(lr)
				}
			}
			var lr *stemdot.LiveResult
			err = handleInterrupts(func() (err error) {
				lr, err = plan.Live(cmd.Context(), rcv, masksFor, opt)
				if saver != nil {
					if serr := saver.close(); err == nil {
						err = serr
					}
				}
				if err != nil {
					return err
				}
				lr.Info.SetMasks(maskInfo)
				return stemdot.Save(lr.Result, outputs)
			})
			if err != nil {
				return err
			}
			for _, w := range lr.Warnings {
				warn(cmd, w)
			}
			if cont := lr.Info.Live.Continuous; cont != nil {
				if !quiet {
					fmt.Fprintf(cmd.OutOrStdout(), "%s → %s (scan %d, the last complete one: %d complete, %d dropped; %s)\n",
						lr.Stats.Summary(), outputs.NPY, cont.Scan, cont.Complete, cont.Dropped, cont.Stopped)
				}
				if !errors.Is(lr.Stopped, context.Canceled) && !errors.Is(lr.Stopped, io.EOF) && !allowPartial {
					return partialResult{fmt.Errorf("the stream failed after %d complete scans: scan %d, the last complete one, is written to %s; give --allow-partial to exit 0 when the stream fails",
						cont.Complete, cont.Scan, outputs.NPY)}
				}
				return nil
			}
			if !quiet {
				c := lr.Counts
				fmt.Fprintf(cmd.OutOrStdout(), "%s → %s (%d frames received, %d missing, %d late, %d stalls)\n",
					lr.Stats.Summary(), outputs.NPY, c.Received, c.Missing, c.Late, c.Stalls)
				if r := lr.Info.Live.Record; r != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "recorded %s\n", r)
				}
			}
			if lr.Partial && !allowPartial {
				return partialResult{fmt.Errorf("partial result written to %s: %d of %d scan positions have no frame (NaN); give --allow-partial to accept a partial acquisition",
					outputs.NPY, len(lr.Missing), product(lr.NavShape))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	registerMaskFlags(f, &maskSpecs, &masksFiles)
	f.StringVar(&outputs.NPY, "out", "", "result file, ending in .npy: NPY of shape nav_shape + (n_masks,), with its JSON sidecar (same name, .json)")
	f.StringVar(&outputs.PNGPrefix, "png", "", "also write one greyscale PNG per mask, PREFIX_<m>_<name>.png, as apply does")
	f.StringVar(&navShape, "nav-shape", "", "the scan shape Y,X, y first (or N, or Z,Y,X): the stream's where it gives one, else needed unless the stream announces its frames")
	f.BoolVar(&float64Result, "float64", false, "compute and write the result in float64 (default float32)")
	f.StringVar(&record, "record", "", "also write what was received to FILE (merlin: .mib with its .hdr; dectris: .npy), which stemdot apply reads to the same result")
	f.BoolVar(&passive, "passive", false, "only listen for an acquisition someone else starts (default: start it here)")
	f.BoolVar(&allowPartial, "allow-partial", false, "exit 0 after an acquisition that ended early (its result has NaN at the positions without a frame), or a continuous run that the stream's failure ended")
	f.BoolVar(&continuous, "continuous", false, "scan after scan until interrupted or the stream ends, writing each complete scan to --out as it completes (see above)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress and no summary")
	registerSourceFlags(f)
	pf.register(f, false)
	return cmd
}

// registerSourceFlags adds a flag for each source option of the protocols
// (live.Protocol.Params) that fs has no flag of the same name for (stemdot view's
// dataset option --pixel-mask serves as DECTRIS's source option pixel_mask too).
func registerSourceFlags(fs *pflag.FlagSet) {
	for _, p := range live.Protocols() {
		for _, key := range p.Params {
			if name := strings.TrimPrefix(flagOf(key), "--"); fs.Lookup(name) == nil {
				fs.String(name, "", fmt.Sprintf("%s source option %s (see stemdot live --help)", p.Scheme, key))
			}
		}
	}
}

// sourceParams are the source options given on the command line, by key.
func sourceParams(cmd *cobra.Command) map[string]string {
	params := map[string]string{}
	for _, p := range live.Protocols() {
		for _, key := range p.Params {
			if f := cmd.Flags().Lookup(strings.TrimPrefix(flagOf(key), "--")); f != nil && f.Changed {
				params[key] = f.Value.String()
			}
		}
	}
	return params
}

// flagOf is the flag of a source option: "dectris_api" → "--dectris-api".
func flagOf(key string) string { return frontend.FlagName(key) }

// checkParams refuses source options of another protocol than source's.
func checkParams(source string, params map[string]string) error {
	scheme, _, _ := strings.Cut(source, "://")
	for _, p := range live.Protocols() {
		if !strings.EqualFold(p.Scheme, scheme) {
			continue
		}
		for key := range params {
			if !slices.Contains(p.Params, key) {
				return fmt.Errorf("%s is not an option of %s:// sources (they take %s)", flagOf(key), p.Scheme, flagList(p.Params))
			}
		}
	}
	return nil
}

func flagList(keys []string) string {
	var out []string
	for _, k := range keys {
		out = append(out, flagOf(k))
	}
	return strings.Join(out, ", ")
}

func product(s []int) int {
	p := 1
	for _, n := range s {
		p *= n
	}
	if len(s) == 0 {
		return 0
	}
	return p
}

// partialResult is the error of a live run that wrote a partial result: exit status 2.
type partialResult struct{ error }

// liveProgress prints the run's progress on one line of stderr at every snapshot.
func liveProgress(cmd *cobra.Command) func(*stemdot.LiveSnapshot) {
	return func(s *stemdot.LiveSnapshot) {
		total := product(s.NavShape)
		end := "\r"
		if s.Final {
			end = "\n"
		}
		scan := ""
		if s.Scan > 0 {
			scan = fmt.Sprintf("scan %d (%d complete, %d dropped)  ", s.Scan, s.ScansComplete, s.ScansDropped)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%sframes %d/%d  %.1f kHz  missing %d  late %d  stalls %d%s",
			scan, s.Done, total, s.Rate/1000, s.Counts.Missing, s.Counts.Late, s.Counts.Stalls, end)
	}
}

// latestSaver writes the results handed to it (put) on its own goroutine, in order,
// except that one handed over while another is being written replaces any still
// waiting: the newest complete scan is written without holding up the next.
type latestSaver struct {
	pending chan *stemdot.LiveResult
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

func newLatestSaver(save func(*stemdot.LiveResult) error) *latestSaver {
	s := &latestSaver{pending: make(chan *stemdot.LiveResult, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for lr := range s.pending {
			if err := save(lr); err != nil {
				s.mu.Lock()
				s.err = cmp.Or(s.err, err)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// put hands lr over to be written, or returns the error of an earlier write.
func (s *latestSaver) put(lr *stemdot.LiveResult) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-s.pending: // not written yet: lr replaces it
	default:
	}
	s.pending <- lr
	return nil
}

// close waits for the writes and returns the first error.
func (s *latestSaver) close() error {
	close(s.pending)
	<-s.done
	return s.err
}
