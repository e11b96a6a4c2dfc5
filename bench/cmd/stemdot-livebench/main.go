// Command stemdot-livebench is `make bench-live`: stemdot's live receivers end to end,
// as a user runs them, against the floor of a receiver that only reads the socket and
// against LiberTEM-live, on one machine, the sender on the same cores.
//
// Inputs (written into -scratch once, inputs.go): ARINA-like 192×192 and 96×96 (2×2
// binned) uint16 electron-counting frames as NPY, a Merlin 256×256 12-bit raw (R64) MIB
// file with its .hdr, 4 virtual detectors each. The sender is `stemdot replay FILE --as
// dectris-v2|dectris-v1|merlin` with its SIMPLON API or Merlin control port: it repeats
// the file's frames as a series needs, compressing each DECTRIS frame once (a warm-up
// series first). For each input, in every repeat, in turn (the order reversed every
// other repeat, so that none always runs first):
//
//   - stemdot: `stemdot live SOURCE --masks M.npy --nav-shape N --out R.npy`, active mode
//     (it configures, arms or starts the acquisition): frames/s over the engine's run,
//     from the series' header to the last frame's result (the summary line's seconds),
//     and the CPU seconds of the whole process (rusage);
//   - floor: this program's `floor` subcommand, a receiver that only reads the socket
//     (DECTRIS: a go-zeromq PULL socket on the receiver's own transport; Merlin: a plain
//     TCP reader into a 1 MiB buffer), started the same way, as a process of its own;
//   - LiberTEM-live (bench/peers/libertem_live_peer.py, one process for the run): its
//     DECTRIS receiver on stream v1 (it has no v2) and its Merlin receiver, ApplyMasksUDF
//     of the same masks, against a replay of its own of the same file (LiberTEM-live's
//     connection stays open between its acquisitions, which would take frames of the
//     others' series): frames/s over run_udf, CPU seconds of its process tree.
//
// The sender's CPU seconds over each acquisition come from /proc/PID/stat. Ratios are
// taken pair by pair within a repeat (stemdot/floor, LiberTEM-live/stemdot), then their
// min, median and max. The first repeat checks that stemdot's result and LiberTEM-live's
// agree. Results: -out (bench/results/live.json) and a Markdown table on stdout.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stemdot/stemdot/internal/npy"
)

type options struct {
	stemdot, python, peer, scratch, out string
	repeats                             int
	scale                               float64
	only                                string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := floorMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.stemdot, "stemdot", "bin/stemdot", "the stemdot binary")
	flag.StringVar(&o.python, "python", "python/.venv/bin/python", "Python with libertem-live 0.3.0 (make py-live); none: LiberTEM-live is skipped")
	flag.StringVar(&o.peer, "peer", "bench/peers/libertem_live_peer.py", "the LiberTEM-live driver")
	flag.StringVar(&o.scratch, "scratch", "bench/scratch/live", "where the inputs and results of each run go")
	flag.StringVar(&o.out, "out", "bench/results/live.json", "the report")
	flag.IntVar(&o.repeats, "repeats", 3, "timed runs of each receiver and input")
	flag.Float64Var(&o.scale, "scale", 1, "scales the frames of every acquisition")
	flag.StringVar(&o.only, "only", "", "comma-separated inputs to run (dectris192, dectris96, merlin); default all")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "stemdot-livebench:", err)
		os.Exit(1)
	}
}

// bench is one input's acquisitions: frames each, the protocols stemdot runs.
type bench struct {
	in       *input
	frames   int
	protos   []string // dectris: v2, v1; merlin: tcp
	libertem string   // the protocol LiberTEM-live runs
}

// measured is one acquisition.
type measured struct {
	Input    string `json:"input"`
	Receiver string `json:"receiver"` // stemdot, floor, libertem-live
	Protocol string `json:"protocol"` // v1, v2 (DECTRIS stream), tcp (Merlin)
	Repeat   int    `json:"repeat"`
	Frames   int    `json:"frames"`
	// Seconds is the acquisition's: stemdot from the series' header to the last frame's
	// result (the engine's run), the floor from the header to the last frame, LiberTEM-
	// live run_udf's (arming included).
	Seconds    float64 `json:"seconds"`
	FramesPerS float64 `json:"frames_per_s"`
	// GBPerS is the wire bytes of the frames (compressed blobs; Merlin's MPX messages)
	// per second, 10⁹ bytes.
	GBPerS float64 `json:"gb_per_s"`
	// WallS is the receiver process's start to exit (stemdot, floor); CPUS its user +
	// system seconds (LiberTEM-live: its process tree's over run_udf).
	WallS      float64 `json:"wall_s"`
	CPUS       float64 `json:"cpu_s"`
	CPUPer10k  float64 `json:"cpu_s_per_10k_frames"`
	SenderCPUS float64 `json:"sender_cpu_s"`
}

type stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func stats(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{s[0], m, s[len(s)-1], len(s)}
}

// figure is one receiver's measure over the repeats.
type figure struct {
	Input           string `json:"input"`
	Receiver        string `json:"receiver"`
	Protocol        string `json:"protocol"`
	FramesPerS      stat   `json:"frames_per_s"`
	GBPerS          stat   `json:"gb_per_s"`
	CPUPer10k       stat   `json:"cpu_s_per_10k_frames"`
	SenderCPUPer10k stat   `json:"sender_cpu_s_per_10k_frames"`
}

// ratio is a ratio taken pair by pair over the repeats.
type ratio struct {
	Name  string `json:"name"`
	Input string `json:"input"`
	stat
}

type target struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Ratio    string `json:"ratio"`
	Met      bool   `json:"met"`
	Note     string `json:"note,omitempty"`
}

type report struct {
	Date     string         `json:"date"`
	Machine  map[string]any `json:"machine"`
	Commit   string         `json:"commit"`
	Versions map[string]any `json:"versions"`
	Method   []string       `json:"method"`
	Inputs   []*input       `json:"inputs"`
	Runs     []measured     `json:"runs"`
	Figures  []figure       `json:"figures"`
	Ratios   []ratio        `json:"ratios"`
	Targets  []target       `json:"targets"`
	Checks   []string       `json:"checks"`
	Skipped  []string       `json:"skipped,omitempty"`
}

var method = []string{
	"Every receiver runs in active mode against `stemdot replay FILE --as dectris-v2|dectris-v1|merlin` on loopback (its SIMPLON API or Merlin control port), sender and receiver on the same cores; the replay repeats the file's distinct frames as the series needs and compresses each DECTRIS frame once (warm-up series first).",
	"stemdot: `stemdot live SOURCE --masks M.npy --nav-shape N --out R.npy` (4 float32 masks, CPU workers of the default plan); frames/s = N / the engine's seconds from the series' header to the last frame's result (the summary line); cpu = the whole process's user+system seconds (rusage), start-up included.",
	"floor: a receiver that only reads the socket, a process of its own: DECTRIS a go-zeromq PULL socket on stemdot's tcpbuf transport counting messages, Merlin a plain TCP reader into a 1 MiB buffer; seconds from the header to the last frame.",
	"LiberTEM-live 0.3.0 (LiberTEM 0.16.0): LiveContext (PipelinedExecutor, default workers), make_connection('dectris'|'merlin'), make_acquisition(nav_shape=(N,)) active (DECTRIS: get_active_controller(trigger_mode='exte'); Merlin: NUMFRAMESTOACQUIRE and STARTACQUISITION in Hooks.on_ready_for_data), run_udf(ApplyMasksUDF of the same stack); frames/s = N / run_udf's wall seconds (arming included); cpu = its process tree's user+system seconds over run_udf (psutil); one warm-up acquisition first; a replay of its own (its connection stays open between acquisitions).",
	"Ratios pair by pair within a repeat (the receivers of one input run in turn, the order reversed every other repeat), then min/median/max; GB = 10⁹ bytes of the frames on the wire (DECTRIS: compressed blobs; Merlin: MPX messages, 131,471 bytes a frame).",
}

func run(o options) error {
	ctx := context.Background()
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Method: method, Machine: machineInfo(), Commit: commit(),
		Versions: map[string]any{}}
	if out, err := exec.Command(o.stemdot, "--version").Output(); err == nil {
		rep.Versions["stemdot"] = strings.TrimSpace(string(out))
	}
	logf("writing or reusing the inputs in %s", o.scratch)
	inputs, err := makeInputs(o.scratch)
	if err != nil {
		return err
	}
	n := func(k int) int { return max(1024, int(float64(k)*o.scale)) }
	benches := []*bench{
		{in: inputs["dectris192"], frames: n(60000), protos: []string{"v2", "v1"}, libertem: "v1"},
		{in: inputs["dectris96"], frames: n(120000), protos: []string{"v2", "v1"}, libertem: "v1"},
		{in: inputs["merlin"], frames: n(16000), protos: []string{"tcp"}, libertem: "tcp"},
	}
	if o.only != "" {
		benches = slices.DeleteFunc(benches, func(b *bench) bool { return !slices.Contains(strings.Split(o.only, ","), b.in.Name) })
	}
	for _, b := range benches {
		rep.Inputs = append(rep.Inputs, b.in)
	}
	peer, err := startPeer(o)
	if err != nil {
		rep.Skipped = append(rep.Skipped, "LiberTEM-live: "+err.Error())
		logf("LiberTEM-live skipped: %v", err)
	} else {
		defer peer.close()
		rep.Versions["libertem-live"] = peer.versions
	}
	for _, b := range benches {
		if err := runBench(ctx, o, b, peer, rep); err != nil {
			return fmt.Errorf("%s: %w", b.in.Name, err)
		}
	}
	rep.Machine["loadavg_after"] = loadavg()
	summarise(rep, benches)
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(js, '\n'), 0o644); err != nil {
		return err
	}
	printTables(rep)
	logf("wrote %s", o.out)
	return nil
}

// runBench runs one input's acquisitions: warm-ups, then the repeats.
func runBench(ctx context.Context, o options, b *bench, peer *peer, rep *report) error {
	replays := map[string]*replay{}
	defer func() {
		for _, r := range replays {
			r.stop()
		}
	}()
	as := map[string]string{"v1": "dectris-v1", "v2": "dectris-v2", "tcp": "merlin"}
	for _, p := range b.protos {
		r, err := startReplay(o.stemdot, b.in.File, as[p])
		if err != nil {
			return err
		}
		replays[p] = r
	}
	// A step runs one acquisition of n frames; keep keeps its result for the check.
	type step struct {
		receiver, proto string
		do              func(n int, keep bool) (measured, error)
	}
	var steps []step
	for _, p := range b.protos {
		r := replays[p]
		steps = append(steps,
			step{"floor", p, func(n int, _ bool) (measured, error) { return runFloor(ctx, n, p, r) }},
			step{"stemdot", p, func(n int, _ bool) (measured, error) {
				return runStemdot(ctx, o, b.in, n, p, r, stemdotResult(o, b.in, p))
			}})
	}
	if peer != nil {
		r, err := startReplay(o.stemdot, b.in.File, as[b.libertem])
		if err != nil {
			return err
		}
		replays["libertem"] = r
		steps = append(steps, step{"libertem-live", b.libertem, func(n int, keep bool) (measured, error) {
			save := ""
			if keep {
				save = libertemResult(o, b.in, b.libertem)
			}
			return peer.acquire(b, n, r, save)
		}})
		defer peer.closeConns()
	}
	// Warm-ups: every replay compresses and keeps its blobs, every receiver runs once.
	for _, s := range steps {
		m, err := s.do(2*b.in.Frames, false)
		if err != nil {
			return fmt.Errorf("warm-up %s %s: %w", s.receiver, s.proto, err)
		}
		logf("%s %s %s warm-up: %.0f frames in %.2f s", b.in.Name, s.receiver, s.proto, float64(m.Frames), m.Seconds)
	}
	for repeat := range o.repeats {
		order := slices.Clone(steps)
		if repeat%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			m, err := s.do(b.frames, repeat == 0)
			if err != nil {
				return fmt.Errorf("%s %s, repeat %d: %w", s.receiver, s.proto, repeat, err)
			}
			m.Input, m.Receiver, m.Protocol, m.Repeat = b.in.Name, s.receiver, s.proto, repeat
			m.FramesPerS = float64(m.Frames) / m.Seconds
			m.GBPerS = float64(m.Frames) * b.in.FrameBytes / m.Seconds / 1e9
			m.CPUPer10k = m.CPUS / float64(m.Frames) * 1e4
			rep.Runs = append(rep.Runs, m)
			logf("%s %-13s %s repeat %d: %8.0f frames/s, %.3f GB/s, cpu %.3f s/10k frames, sender cpu %.3f s/10k frames",
				b.in.Name, s.receiver, s.proto, repeat, m.FramesPerS, m.GBPerS, m.CPUPer10k, m.SenderCPUS/float64(m.Frames)*1e4)
		}
	}
	if peer != nil {
		c, err := checkResults(o, b)
		if err != nil {
			return err
		}
		rep.Checks = append(rep.Checks, c)
	}
	return nil
}

func stemdotResult(o options, in *input, proto string) string {
	return filepath.Join(o.scratch, fmt.Sprintf("%s-%s-stemdot.npy", in.Name, proto))
}

func libertemResult(o options, in *input, proto string) string {
	return filepath.Join(o.scratch, fmt.Sprintf("%s-%s-libertem.npy", in.Name, proto))
}

// checkResults compares stemdot's result (its last acquisition: every one of the
// repeats has the same frames) with LiberTEM-live's of the first repeat: a difference
// beyond 1e-5 of the largest value is an error, no figure is reported of wrong results.
func checkResults(o options, b *bench) (string, error) {
	x, err1 := readNPY(stemdotResult(o, b.in, b.libertem))
	y, err2 := readNPY(libertemResult(o, b.in, b.libertem))
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("the results cannot be compared: %w", err)
	}
	if len(x) != len(y) {
		return "", fmt.Errorf("stemdot's result has %d values, LiberTEM-live's %d", len(x), len(y))
	}
	var d, top float64
	for i := range x {
		d, top = max(d, math.Abs(x[i]-y[i])), max(top, math.Abs(y[i]))
	}
	s := fmt.Sprintf("%s: stemdot's result (%s) and LiberTEM-live's differ by at most %g (largest value %g, %d values)",
		b.in.Name, b.libertem, d, top, len(x))
	if d > 1e-5*top {
		return "", errors.New(s)
	}
	return s, nil
}

func readNPY(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	_, d, data, err := npy.ReadArray(f, st.Size(), func(_ npy.Info, d npy.Descr) error {
		if d.Size == 0 {
			return fmt.Errorf("%s: not an array of numbers", path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return npy.Floats(data, d), nil
}

// replay is a `stemdot replay` process: stream and api are its data and control
// addresses (DECTRIS: ZeroMQ stream, SIMPLON API; Merlin: data port, control port).
type replay struct {
	cmd         *exec.Cmd
	stream, api string
}

var (
	dectrisReady = regexp.MustCompile(`stream (\S+), SIMPLON API (\S+);`)
	merlinReady  = regexp.MustCompile(`data port (\S+), control port (\S+);`)
)

func startReplay(bin, file, as string) (*replay, error) {
	args := []string{"replay", file, "--as", as, "--listen", "127.0.0.1:0"}
	re := dectrisReady
	if as == "merlin" {
		args, re = append(args, "--control", "127.0.0.1:0"), merlinReady
	} else {
		args = append(args, "--api", "127.0.0.1:0")
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
					logf("replay %s: %s", as, sc.Text())
				}
			}()
			return &replay{cmd: cmd, stream: m[1], api: m[2]}, nil
		}
		logf("replay %s: %s", as, sc.Text())
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, fmt.Errorf("stemdot %s: it did not say where it listens", strings.Join(args, " "))
}

func (r *replay) stop() {
	r.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
}

// cpu is the replay's user + system seconds so far (/proc/PID/stat, clock ticks of
// 1/100 s).
func (r *replay) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// rusageCPU is a finished process's user + system seconds.
func rusageCPU(ps *os.ProcessState) float64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

var summaryLine = regexp.MustCompile(`(\d+) frames, [\d.]+ GB in ([\d.]+) s .*\((\d+) frames received, (\d+) missing`)

func runStemdot(ctx context.Context, o options, in *input, n int, proto string, r *replay, out string) (measured, error) {
	var args []string
	if proto == "tcp" {
		args = []string{"live", "merlin://" + r.stream, "--control", r.api}
	} else {
		args = []string{"live", "dectris://" + r.stream, "--stream", proto, "--dectris-api", r.api}
	}
	args = append(args, "--nav-shape", strconv.Itoa(n), "--masks", in.Masks, "--out", out)
	stdout, m, err := timed(ctx, r, n, o.stemdot, args...)
	if err != nil {
		return m, err
	}
	s := summaryLine.FindStringSubmatch(stdout)
	if s == nil || s[1] != strconv.Itoa(n) || s[3] != s[1] || s[4] != "0" {
		return m, fmt.Errorf("stemdot live did not receive the %d frames: %q", n, stdout)
	}
	m.Seconds, _ = strconv.ParseFloat(s[2], 64)
	return m, nil
}

func runFloor(ctx context.Context, n int, proto string, r *replay) (measured, error) {
	self, err := os.Executable()
	if err != nil {
		return measured{}, err
	}
	kind := "dectris"
	if proto == "tcp" {
		kind = "merlin"
	}
	stdout, m, err := timed(ctx, r, n, self, "floor", kind, "-stream", r.stream, "-control", r.api, "-frames", strconv.Itoa(n))
	if err != nil {
		return m, err
	}
	var fr floorResult
	if err := json.Unmarshal([]byte(stdout), &fr); err != nil || fr.Frames != n {
		return m, fmt.Errorf("floor: %q", stdout)
	}
	m.Seconds = fr.Seconds
	return m, nil
}

// timed runs a receiver process of an acquisition of n frames to its end: its wall and
// CPU seconds, and the sender's CPU seconds meanwhile.
func timed(ctx context.Context, r *replay, n int, bin string, args ...string) (string, measured, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	s0, t0 := r.cpu(), time.Now()
	err := cmd.Run()
	m := measured{Frames: n, WallS: time.Since(t0).Seconds(), SenderCPUS: r.cpu() - s0}
	if err != nil {
		return "", m, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	m.CPUS = rusageCPU(cmd.ProcessState)
	return stdout.String(), m, nil
}

// peer is the LiberTEM-live driver process.
type peer struct {
	cmd      *exec.Cmd
	stdin    io.Closer
	in       *json.Encoder
	out      *bufio.Scanner
	versions string
}

func startPeer(o options) (*peer, error) {
	if o.python == "" || o.python == "none" {
		return nil, errors.New("no Python given (-python)")
	}
	v, err := exec.Command(o.python, "-c", "import libertem, libertem_live, psutil; print(f'libertem-live {libertem_live.__version__}, libertem {libertem.__version__}')").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s cannot import libertem_live and psutil (make py-live): %s", o.python, strings.TrimSpace(string(v)))
	}
	cmd := exec.Command(o.python, "-u", o.peer)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &peer{cmd: cmd, stdin: stdin, in: json.NewEncoder(stdin), out: bufio.NewScanner(stdout), versions: strings.TrimSpace(string(v))}
	logf("starting LiberTEM-live (%s)", p.versions)
	var ready struct{ Ready bool }
	if err := p.answer(&ready); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *peer) answer(v any) error {
	if !p.out.Scan() {
		return fmt.Errorf("the LiberTEM-live driver ended: %v", p.out.Err())
	}
	var e struct{ Error string }
	if json.Unmarshal(p.out.Bytes(), &e) == nil && e.Error != "" {
		return errors.New(e.Error)
	}
	return json.Unmarshal(p.out.Bytes(), v)
}

func (p *peer) acquire(b *bench, n int, r *replay, save string) (measured, error) {
	det := "dectris"
	if b.libertem == "tcp" {
		det = "merlin"
	}
	if err := p.in.Encode(map[string]any{"detector": det, "stream": r.stream, "api": r.api, "frames": n, "masks": b.in.Masks, "save": save}); err != nil {
		return measured{}, err
	}
	s0 := r.cpu()
	var a struct {
		Frames int
		WallS  float64 `json:"wall_s"`
		CPUS   float64 `json:"cpu_s"`
	}
	if err := p.answer(&a); err != nil {
		return measured{}, err
	}
	return measured{Frames: a.Frames, Seconds: a.WallS, WallS: a.WallS, CPUS: a.CPUS, SenderCPUS: r.cpu() - s0}, nil
}

func (p *peer) closeConns() {
	p.in.Encode(map[string]any{"close": true})
	var v any
	p.answer(&v)
}

// close ends the driver: its input ends, it closes its connections and context.
func (p *peer) close() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func machineInfo() map[string]any {
	m := map[string]any{"cpu": cpuModel(), "cores": runtime.NumCPU(), "loadavg_before": loadavg()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if l, _, ok := strings.Cut(string(b), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(l)[1:], " ")
		}
	}
	if h, err := os.Hostname(); err == nil {
		m["host"] = h
	}
	return m
}

// loadavg is the 1-, 5- and 15-minute load averages: how busy the machine was.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(bytes.TrimSpace(st)) > 0 {
		c += " (modified)"
	}
	return c
}
