package main

// Browser tests of stemdot view: headless Chromium, driven with chromedp, loads the page
// of a real detector file and of a synthetic scan, drags a disk and a ring with real
// mouse events, clicks a scan position, switches to CoM, and checks what the page holds
// (the arrays it painted, read back through JavaScript) against the CLI's results, bit
// for bit, and the disk against a float64 reference. Chromium: $STEMDOT_CHROMIUM, else
// chromium (Debian's package), chromium-browser, google-chrome; the tests skip without.
//
// Screenshots go to $STEMDOT_VIEW_SHOTS, else $TMPDIR/stemdot-view-screenshots (logged).
// STEMDOT_VIEW_BENCH=1 (make bench-view) runs the latency test on a 1.07 GB scan
// (256×256 positions of 64×128 uint16 frames, page-cached) with more moves;
// STEMDOT_VIEW_BENCH_NAV and STEMDOT_VIEW_BENCH_SIG give other shapes (Y,X).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// chromium is the browser's path, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STEMDOT_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("STEMDOT_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (apt-get install chromium, or set STEMDOT_CHROMIUM): skipping the browser tests of stemdot view")
	return ""
}

// startView runs stemdot view with args and returns its URL; the cleanup stops it with
// SIGTERM and checks that it stopped cleanly (status 0).
func startView(t *testing.T, args ...string) string {
	t.Helper()
	url, _ := startViewCmd(t, append([]string{"--close-after", "0"}, args...)...)
	return url
}

// startViewCmd is startView's: stemdot view with args, its URL and a channel that
// receives its end.
func startViewCmd(t *testing.T, args ...string) (string, <-chan error) {
	t.Helper()
	cmd := exec.Command(stemdotBin, append([]string{"view", "--no-browser"}, args...)...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	urlc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		_, url, _ := strings.Cut(strings.TrimSpace(line), ": ")
		urlc <- url
	}()
	// The process's end goes to the test (ended) and to the cleanup (done), which stops it
	// with SIGTERM if it still runs and checks that it stopped cleanly (status 0).
	done, ended := make(chan error, 1), make(chan error, 1)
	go func() {
		err := cmd.Wait()
		done <- err
		ended <- err
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stemdot view did not stop cleanly: %v\n%s", err, stderr.String())
			}
			require.Contains(t, stderr.String(), "view stopped")
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("stemdot view did not stop within 10 s of SIGTERM")
		}
	})
	select {
	case url := <-urlc:
		require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), "URL %q, stderr: %s", url, stderr.String())
		return url, ended
	case <-time.After(60 * time.Second):
		t.Fatalf("stemdot view printed no URL within 60 s: %s", stderr.String())
	}
	return "", nil
}

// lockedBuffer is a bytes.Buffer that a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// browser is a headless Chromium tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1250, 820))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(cancel3)
	require.NoError(t, chromedp.Do(ctx), "starting Chromium")
	return ctx
}

// page is a loaded view page in a browser tab.
type page struct {
	t     *testing.T
	ctx   context.Context
	shots string
	name  string
	dir   string // for the CLI's outputs
	// downloads is where the browser saves what the page exports.
	downloads string
}

// typeSpec replaces the spec field's text with spec and presses Enter, as a user types a
// detector.
func (p *page) typeSpec(spec string) {
	p.t.Helper()
	eval[bool](p, `(() => { const s = document.getElementById('spec'); s.value = ''; s.focus(); return true; })()`)
	require.NoError(p.t, chromedp.Do(p.ctx, chromedp.KeyEvent(spec+"\r")))
}

// pressKeys focuses the frame view and presses keys there (moving or resizing the
// detector).
func (p *page) pressKeys(keys string, opts ...chromedp.KeyOption) {
	p.t.Helper()
	eval[bool](p, `(() => { document.getElementById('frame').focus(); return true; })()`)
	require.NoError(p.t, chromedp.Do(p.ctx, chromedp.KeyEvent(keys, opts...)))
}

// waitError waits until the page reports an error and returns the text it shows.
func (p *page) waitError() string {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`stemdotView.errors.length > 0`))
	require.NoError(p.t, err)
	return eval[string](p, `document.getElementById('error-text').textContent`)
}

// download clicks the button with id and returns the file the browser saved as name.
func (p *page) download(id, name string) []byte {
	p.t.Helper()
	f := filepath.Join(p.downloads, name)
	os.Remove(f)
	require.NoError(p.t, chromedp.Do(p.ctx, chromedp.Click(chromedp.ID(id))))
	var b []byte
	require.Eventually(p.t, func() bool {
		var err error
		b, err = os.ReadFile(f)
		return err == nil && len(b) > 0
	}, 30*time.Second, 20*time.Millisecond, "the browser saved no %s after a click on #%s", name, id)
	return b
}

func openPage(t *testing.T, url, name string) *page {
	shots := os.Getenv("STEMDOT_VIEW_SHOTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "stemdot-view-screenshots")
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	p := &page{t: t, ctx: browser(t), shots: shots, name: name, dir: t.TempDir(), downloads: t.TempDir()}
	_, err := chromedp.CallBrowser(p.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: p.downloads})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(p.ctx, chromedp.Navigate(url)))
	p.waitPainted()
	return p
}

func eval[T any](p *page, js string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](js))
	require.NoError(p.t, err, "evaluating %s", js)
	return v
}

// waitPainted waits until the page presents the image of its current detector and
// returns the spec.
func (p *page) waitPainted() string {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`(() => { const S = window.stemdotView;
		return S && S.ready && S.painted && S.painted.spec === S.spec && S.presentedSeq === S.painted.seq; })()`,
		chromedp.WithPollingTimeout(2*time.Minute)))
	require.NoError(p.t, err, "waiting for the image; the page: %s", eval[string](p, `JSON.stringify({spec: stemdotView.spec,
		painted: stemdotView.painted && stemdotView.painted.spec, seq: stemdotView.painted && stemdotView.painted.seq,
		presented: stemdotView.presentedSeq, inflight: inflight && inflight.spec, pending: pending && pending.spec, errors: stemdotView.errors})`))
	require.Empty(p.t, eval[[]string](p, `stemdotView.errors`), "errors shown on the page")
	return eval[string](p, `stemdotView.spec`)
}

func (p *page) shot(what string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(p.t, err)
	f := filepath.Join(p.shots, p.name+"_"+what+".png")
	require.NoError(p.t, os.WriteFile(f, png, 0o644))
	p.t.Logf("screenshot %s", f)
}

// framePoint is the client position of sig coordinate (x, y) on the frame.
func (p *page) framePoint(x, y float64) [2]float64 {
	return eval[[2]float64](p, fmt.Sprintf(`stemdotView.framePoint(%g, %g)`, x, y))
}

// drag presses the left button at sig coordinate from, moves in steps to to, releases.
func (p *page) drag(from, to [2]float64, steps int) {
	p.t.Helper()
	a, b := p.framePoint(from[0], from[1]), p.framePoint(to[0], to[1])
	acts := []chromedp.Action[chromedp.Void]{chromedp.MouseEvent(chromedp.MousePressed, a[0], a[1], chromedp.ButtonLeft)}
	for i := 1; i <= steps; i++ {
		f := float64(i) / float64(steps)
		acts = append(acts, chromedp.MouseEvent(chromedp.MouseMoved, a[0]+f*(b[0]-a[0]), a[1]+f*(b[1]-a[1]), chromedp.ButtonLeft))
	}
	acts = append(acts, chromedp.MouseEvent(chromedp.MouseReleased, b[0], b[1], chromedp.ButtonLeft))
	require.NoError(p.t, chromedp.Do(p.ctx, acts...))
}

// bytesOf reads the bytes of a typed array of the page (a JS expression).
func (p *page) bytesOf(js string) []byte {
	p.t.Helper()
	s := eval[string](p, `(() => { const a = `+js+`; const u = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
		let s = ''; for (let i = 0; i < u.length; i += 8192) s += String.fromCharCode.apply(null, u.subarray(i, i + 8192));
		return btoa(s); })()`)
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(p.t, err)
	return b
}

// cli runs stemdot with args in the page's output directory.
func (p *page) cli(args ...string) {
	p.t.Helper()
	cmd := exec.Command(stemdotBin, args...)
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	require.NoError(p.t, err, "stemdot %v: %s", args, out)
}

// runCommand runs the CLI command the page shows for its detector (stemdot replaced by
// the binary under test) in the output directory.
func (p *page) runCommand() string {
	p.t.Helper()
	c := eval[string](p, `stemdotView.command`)
	require.True(p.t, strings.HasPrefix(c, "stemdot apply "), c)
	cmd := exec.Command("sh", "-c", stemdotBin+strings.TrimPrefix(c, "stemdot"))
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	require.NoError(p.t, err, "the page's command %s: %s", c, out)
	return c
}

// npyData is the data of an NPY file written by the CLI, after its header.
func npyData(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, off, err := stemnpy.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err, path)
	return b[off:]
}

// checkImage checks the image the page shows against the NPY its command writes: the
// exported NPY equal to the file byte for byte, the painted float32 values too.
func (p *page) checkImage() string {
	p.t.Helper()
	spec := p.waitPainted()
	p.runCommand()
	name := eval[string](p, `safeName(stemdotView.spec)`) + ".npy"
	want, err := os.ReadFile(filepath.Join(p.dir, name))
	require.NoError(p.t, err)
	require.Equal(p.t, want, p.download("export-npy", name), "exported NPY of %s against stemdot apply's", spec)
	require.Equal(p.t, npyData(p.t, filepath.Join(p.dir, name)), p.bytesOf(`stemdotView.painted.data`), "painted image of %s against stemdot apply's", spec)
	return spec
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// scenario is the walk through the page every dataset gets: the sum frame, a disk
// dragged and resized, a ring resized and moved, a scan position clicked, CoM. It
// returns the page, showing CoM.
func scenario(t *testing.T, file, name string, opts ...string) *page {
	url := startView(t, append([]string{file}, opts...)...)
	p := openPage(t, url, name)
	sig := eval[[2]int](p, `stemdotView.info.sig_shape`)
	nav := eval[[]int](p, `stemdotView.info.nav_shape`)
	cx, cy := float64(sig[1]/2), float64(sig[0]/2)
	r0 := math.Max(1, math.Round(float64(min(sig[0], sig[1]))/8))
	// The default detector: disk:auto, as apply makes it, where the sum frame shows the
	// direct beam; else a disk at the frame's centre.
	if eval[bool](p, `stemdotView.centre !== null`) {
		require.Equal(t, "disk:auto", p.checkImage())
	} else {
		require.Equal(t, fmt.Sprintf("disk:%g,%g,%g", cx, cy, r0), p.waitPainted())
	}
	p.shot("0_start")
	p.typeSpec(fmt.Sprintf("disk:%g,%g,%g", cx, cy, r0))
	p.waitPainted()

	// The sum frame against stemdot sum's, bit for bit (float64).
	p.cli(append([]string{"sum", file, "--out", "sum.npy", "-q"}, opts...)...)
	require.Equal(t, npyData(t, filepath.Join(p.dir, "sum.npy")), p.bytesOf(`stemdotView.frame.data`), "sum frame")

	// A disk dragged from the centre, then its edge dragged out.
	dx, dy := math.Round(float64(sig[1])/6), math.Round(float64(sig[0])/8)
	p.drag([2]float64{cx, cy}, [2]float64{cx - dx, cy - dy}, 6)
	cx, cy = cx-dx, cy-dy
	require.Equal(t, fmt.Sprintf("disk:%g,%g,%g", cx, cy, r0), p.waitPainted())
	r1 := r0 + 5
	p.drag([2]float64{cx + r0, cy}, [2]float64{cx + r1, cy}, 3)
	spec := fmt.Sprintf("disk:%g,%g,%g", cx, cy, r1)
	require.Equal(t, spec, p.checkImage())
	p.shot("1_disk")
	// The PNG export: the PNG of apply --png, scaled up alike.
	p.cli(append([]string{"apply", file, "--mask", spec, "--out", "png.npy", "--png", "png", "-q"}, opts...)...)
	p.checkPNG("", "png_0_disk.png")
	if len(nav) == 2 && strings.HasSuffix(file, ".mib") {
		checkDiskReference(t, file, f32s(p.bytesOf(`stemdotView.painted.data`)), cx, cy, r1)
	}

	// A ring: its outer edge dragged out, then dragged by its inside.
	eval[bool](p, `(() => { const s = document.getElementById('det-type'); s.value = 'ring'; s.dispatchEvent(new Event('change')); return true; })()`)
	ri, ro := math.Max(1, math.Round(float64(min(sig[0], sig[1]))/6)), math.Max(2, math.Round(float64(min(sig[0], sig[1]))/3))
	require.Equal(t, fmt.Sprintf("ring:%g,%g,%g,%g", cx, cy, ri, ro), p.waitPainted())
	p.drag([2]float64{cx + ro, cy}, [2]float64{cx + ro + 4, cy}, 2)
	ro += 4
	mid := math.Round((ri + ro) / 2)
	p.drag([2]float64{cx, cy + mid}, [2]float64{cx + 3, cy + mid + 2}, 3)
	cx, cy = cx+3, cy+2
	require.Equal(t, fmt.Sprintf("ring:%g,%g,%g,%g", cx, cy, ri, ro), p.checkImage())
	p.shot("2_ring")

	// A scan position clicked: its frame on the left, as stemdot pick gives it.
	y, x := 0, 0
	if len(nav) == 2 {
		y, x = nav[0]-1, nav[1]/2
	} else {
		x = nav[0] - 1
	}
	at := eval[[2]float64](p, fmt.Sprintf(`stemdotView.imagePoint(%d, %d)`, y, x))
	seq := eval[int](p, `stemdotView.frameSeq`)
	require.NoError(t, chromedp.Do(p.ctx, chromedp.MouseClickXY(at[0], at[1])))
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](fmt.Sprintf(`stemdotView.frameSeq > %d`, seq)))
	require.NoError(t, err)
	require.Equal(t, []int{y, x}, eval[[]int](p, `[stemdotView.frame.y, stemdotView.frame.x]`))
	pos := fmt.Sprintf("%d,%d", y, x)
	if len(nav) == 1 {
		pos = fmt.Sprint(x)
	}
	p.cli(append([]string{"pick", file, "--at", pos, "--out", "pick.npy"}, opts...)...)
	picked := pickedValues(t, filepath.Join(p.dir, "pick.npy"))
	got := f32s(p.bytesOf(`stemdotView.frame.data`))
	require.Len(t, got, len(picked))
	for i := range picked {
		if float64(got[i]) != picked[i] {
			t.Fatalf("picked frame at (%s), pixel %d: page %v, stemdot pick %v", pos, i, got[i], picked[i])
		}
	}
	p.shot("3_pick")

	// CoM: the shifts as apply --com-shifts writes them, the magnitude as stemdot com's.
	eval[bool](p, `(() => { const s = document.getElementById('det-type'); s.value = 'com'; s.dispatchEvent(new Event('change')); return true; })()`)
	spec = p.waitPainted()
	require.Equal(t, fmt.Sprintf("com:%g,%g", cx, cy), spec)
	p.runCommand()
	shifts := filepath.Join(p.dir, eval[string](p, `safeName(stemdotView.spec)`)+"_shifts.npy")
	want, err := os.ReadFile(shifts)
	require.NoError(t, err)
	require.Equal(t, want, p.download("export-npy", eval[string](p, `safeName(stemdotView.spec)`)+".npy"), "exported CoM shifts against apply --com-shifts")
	if len(nav) == 2 && nav[0] >= 2 && nav[1] >= 2 {
		p.cli("com", shifts, "--magnitude", "mag.npy", "-q")
		eval[bool](p, `(() => { const s = document.getElementById('com-part'); s.value = '2'; s.dispatchEvent(new Event('change')); return true; })()`)
		require.Equal(t, npyData(t, filepath.Join(p.dir, "mag.npy")), p.bytesOf(`stemdotView.painted.data`), "CoM magnitude against stemdot com --magnitude")
		p.cli("com", shifts, "--png", "com", "-q")
		p.checkPNG("_magnitude", "com_magnitude.png")
		eval[bool](p, `(() => { const s = document.getElementById('com-part'); s.value = '0'; s.dispatchEvent(new Event('change')); return true; })()`)
		p.cli(append([]string{"apply", file, "--mask", spec, "--out", "comy.npy", "--com-shifts", "comy_shifts.npy", "--png", "comy", "-q"}, opts...)...)
		p.checkPNG("_y", "comy_com_shift_y.png")
	}
	p.shot("4_com")
	return p
}

// checkPNG checks the PNG the page exports of the image shown (its name safeName(spec)
// + suffix + .png) against the CLI's PNG want in the output directory: the same size,
// the same pixels.
func (p *page) checkPNG(suffix, want string) {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, want))
	require.NoError(p.t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(p.t, err, want)
	got, err := png.Decode(bytes.NewReader(p.download("export-png", eval[string](p, `safeName(stemdotView.painted.spec)`)+suffix+".png")))
	require.NoError(p.t, err)
	require.Equal(p.t, img.Bounds(), got.Bounds(), "exported PNG against %s", want)
	require.GreaterOrEqual(p.t, min(img.Bounds().Dx(), img.Bounds().Dy()), 256, want)
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if a, b := color.GrayModel.Convert(img.At(x, y)), color.GrayModel.Convert(got.At(x, y)); a != b {
				p.t.Fatalf("exported PNG against %s: pixel (%d, %d) is %v, want %v", want, x, y, b, a)
			}
		}
	}
}

// pickedValues reads stemdot pick's NPY of one frame as float64.
func pickedValues(t *testing.T, path string) []float64 {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	info, off, err := stemnpy.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	data := b[off:]
	switch info.Descr {
	case "<u2":
		v := make([]float64, len(data)/2)
		for i := range v {
			v[i] = float64(binary.LittleEndian.Uint16(data[2*i:]))
		}
		return v
	case "|u1":
		v := make([]float64, len(data))
		for i := range v {
			v[i] = float64(data[i])
		}
		return v
	}
	t.Fatalf("pick wrote %s: the test reads uint8 and uint16 frames", info.Descr)
	return nil
}

// checkDiskReference checks a disk image of a MIB file against float64 sums over the
// pixels (x−cx)² + (y−cy)² ≤ r² of frames decoded independently of stemdot.
func checkDiskReference(t *testing.T, file string, got []float32, cx, cy, r float64) {
	frames, sy, sx := mibFrames(t, file)
	require.Len(t, got, len(frames))
	for f, fr := range frames {
		var want float64
		for y := range sy {
			for x := range sx {
				if dx, dy := float64(x)-cx, float64(y)-cy; dx*dx+dy*dy <= r*r {
					want += fr[y*sx+x]
				}
			}
		}
		require.InDelta(t, want, float64(got[f]), 1e-6*math.Abs(want)+1e-9, "frame %d", f)
	}
}

func TestViewRealFile(t *testing.T) {
	file := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib")
	abs, err := filepath.Abs(file)
	require.NoError(t, err)
	p := scenario(t, abs, "mib")

	// A spec typed with a mistake: a clear error on the page, the image unchanged.
	p.typeSpec("disk:10,20")
	require.Contains(t, p.waitError(), "disk takes 3 numbers")
	p.shot("5_error")
	eval[bool](p, `(() => { stemdotView.errors.length = 0; document.getElementById('error').hidden = true; return true; })()`)
	// Auto specs, as the CLI takes them, where the sum frame shows the direct beam.
	if eval[bool](p, `stemdotView.centre !== null`) {
		for _, spec := range []string{"disk:auto,12", "ring:auto,20,40"} {
			p.typeSpec(spec)
			require.Equal(t, spec, p.checkImage())
		}
	}
	p.typeSpec("point:auto")
	require.Contains(t, p.waitError(), "only disk, ring and com take auto")
	eval[bool](p, `(() => { stemdotView.errors.length = 0; document.getElementById('error').hidden = true; return true; })()`)

	// A rect and a point typed as specs, then moved and resized with the keys.
	for _, c := range []struct{ typed, keys, want string }{
		{"rect:10,20,30,40", kb.ArrowRight + kb.ArrowRight + kb.ArrowUp + "+", "rect:12,19,31,41"},
		{"point:100,50", kb.ArrowLeft + kb.ArrowDown + kb.ArrowDown, "point:99,52"},
		{"disk:100,50,20", "--", "disk:100,50,18"},
	} {
		p.typeSpec(c.typed)
		require.Equal(t, c.typed, p.checkImage())
		p.pressKeys(c.keys)
		require.Equal(t, c.want, p.checkImage())
	}
	p.shot("6_keys")

	// A detector that selects no pixel: the server's error on the page, gone with the
	// next image.
	p.typeSpec("disk:-50,-50,3")
	require.Contains(t, p.waitError(), "no pixel")
	require.False(t, eval[bool](p, `document.getElementById('error').hidden`))
	eval[bool](p, `(() => { stemdotView.errors.length = 0; return true; })()`)
	p.typeSpec("disk:20,20,3")
	require.Equal(t, "disk:20,20,3", p.checkImage())
	require.True(t, eval[bool](p, `document.getElementById('error').hidden`))
}

func TestViewSynthetic(t *testing.T) {
	chromium(t)
	nav, sig, moves := "24,32", "96,128", 12
	bench := os.Getenv("STEMDOT_VIEW_BENCH") != ""
	if bench {
		nav, sig, moves = "256,256", "64,128", 40
		if v := os.Getenv("STEMDOT_VIEW_BENCH_NAV"); v != "" {
			nav = v
		}
		if v := os.Getenv("STEMDOT_VIEW_BENCH_SIG"); v != "" {
			sig = v
		}
	}
	file := filepath.Join(t.TempDir(), "synth.npy")
	start := time.Now()
	out, err := exec.Command(stemdotBin, "synth", "--out", file, "--nav-shape", nav, "--sig-shape", sig, "--dtype", "uint16").CombinedOutput()
	require.NoError(t, err, "%s", out)
	st, err := os.Stat(file)
	require.NoError(t, err)
	t.Logf("synthetic scan nav %s, sig %s, uint16: %.3f GB, written in %.1f s", nav, sig, float64(st.Size())/1e9, time.Since(start).Seconds())
	// Page-cache it, as the target says: read it once.
	_, err = os.ReadFile(file)
	require.NoError(t, err)
	p := scenario(t, file, "synth", "--nav-shape", nav) // a dataset option, which the page's command repeats

	// Latency: one mouse move at a time, each waited for until its image is presented.
	eval[bool](p, `(() => { const s = document.getElementById('det-type'); s.value = 'disk'; s.dispatchEvent(new Event('change')); return true; })()`)
	p.waitPainted()
	var sy, sx float64
	fmt.Sscanf(sig, "%g,%g", &sy, &sx)
	cx, cy := eval[float64](p, `stemdotView.det.cx`), eval[float64](p, `stemdotView.det.cy`)
	a := p.framePoint(cx, cy)
	require.NoError(t, chromedp.Do(p.ctx, chromedp.MouseEvent(chromedp.MousePressed, a[0], a[1], chromedp.ButtonLeft)))
	n0 := eval[int](p, `stemdotView.latencies.length`)
	for i := 1; i <= moves; i++ {
		x, y := cx-10+float64(i%21), cy-3+float64(i/21%7) // no position twice (no cached image)
		b := p.framePoint(x, y)
		require.NoError(t, chromedp.Do(p.ctx, chromedp.MouseEvent(chromedp.MouseMoved, b[0], b[1], chromedp.ButtonLeft)))
		_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](fmt.Sprintf(`stemdotView.latencies.length > %d && stemdotView.presentedSeq === stemdotView.painted.seq && stemdotView.painted.spec === stemdotView.spec`, n0), chromedp.WithPollingTimeout(time.Minute)))
		require.NoError(t, err)
		n0 = eval[int](p, `stemdotView.latencies.length`)
	}
	require.NoError(t, chromedp.Do(p.ctx, chromedp.MouseEvent(chromedp.MouseReleased, a[0], a[1], chromedp.ButtonLeft)))
	lat := eval[[]float64](p, `stemdotView.latencies`)
	lat = lat[len(lat)-moves:]
	slices.Sort(lat)
	t.Logf("drag-to-image latency (mouse event to the animation frame presenting its image), 1 disk on CPU, nav %s, sig %s, %d moves: median %.1f ms, min %.1f, max %.1f",
		nav, sig, moves, lat[len(lat)/2], lat[0], lat[len(lat)-1])
	p.checkImage()
	p.shot("6_latency")

	// A continuous drag, the moves not waited for: images follow while it lasts (newest
	// wins), the last one is the final detector's.
	painted0, cancelled0 := eval[int](p, `stemdotView.paintedSeq`), eval[int](p, `stemdotView.cancelled`)
	cx, cy = eval[float64](p, `stemdotView.det.cx`), eval[float64](p, `stemdotView.det.cy`)
	a = p.framePoint(cx, cy)
	acts := []chromedp.Action[chromedp.Void]{chromedp.MouseEvent(chromedp.MousePressed, a[0], a[1], chromedp.ButtonLeft)}
	for i := 1; i <= 3*moves; i++ {
		b := p.framePoint(cx+float64(i%9)-4, cy+float64(i/9%5)-2)
		acts = append(acts, chromedp.MouseEvent(chromedp.MouseMoved, b[0], b[1], chromedp.ButtonLeft), chromedp.Sleep(5*time.Millisecond))
	}
	b := p.framePoint(cx+3, cy+3)
	acts = append(acts, chromedp.MouseEvent(chromedp.MouseReleased, b[0], b[1], chromedp.ButtonLeft))
	start = time.Now()
	require.NoError(t, chromedp.Do(p.ctx, acts...))
	took := time.Since(start)
	require.Equal(t, fmt.Sprintf("disk:%g,%g,%g", cx+3, cy+3, eval[float64](p, `stemdotView.det.r`)), p.checkImage())
	t.Logf("continuous drag of %d moves in %.0f ms: %d images shown, %d runs cancelled for newer ones",
		3*moves, took.Seconds()*1000, eval[int](p, `stemdotView.paintedSeq`)-painted0, eval[int](p, `stemdotView.cancelled`)-cancelled0)

	// STEMDOT_VIEW_README_SHOT=doc/view.png: the README's screenshot, an annular dark
	// field in viridis.
	if f := os.Getenv("STEMDOT_VIEW_README_SHOT"); f != "" && !bench {
		eval[bool](p, `(() => { const s = document.getElementById('cmap'); s.value = 'viridis'; s.dispatchEvent(new Event('change'));
			document.getElementById('spec').value = ''; document.getElementById('spec').focus(); return true; })()`)
		require.NoError(t, chromedp.Do(p.ctx, chromedp.KeyEvent("ring:64,48,20,38\r")))
		p.waitPainted()
		require.NoError(t, chromedp.Do(p.ctx, chromedp.EmulateViewport(1100, 640)))
		png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(f, png, 0o644))
	}
}

// TestViewErrors: bad options end stemdot view at once with status 1 and a message
// naming the option.
func TestViewErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", file, "--nav-shape", "4,4", "--sig-shape", "16,16")
	require.Equal(t, 0, code, stderr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"view", file, "--port", "70000"}, "--port 70000: want 0 (any free port) to 65535"},
		{[]string{"view", file, "--listen", "127.0.0.1:0", "--port", "1"}, "give the port in --listen"},
		{[]string{"view", file, "--close-after", "-1s"}, "--close-after -1s"},
		{[]string{"view", file + ".missing"}, ".missing"},
		{[]string{"view", file, "--gpu", "--gpus", "1"}, "--gpu"},
	} {
		_, stderr, code := run(t, c.args...)
		require.Equal(t, 1, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, "%v", c.args)
	}
	if version, _, _ := run(t, "--version"); strings.Contains(version, "built without CUDA") {
		_, stderr, code := run(t, "view", file, "--gpu")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "--gpu: this stemdot is built without CUDA")
	}
	// A port taken: the error says so and how to get another.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, stderr, code = run(t, "view", file, "--port", fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give another --port")
	// The same with --listen: the error names --listen, not --port (refused with --listen).
	_, stderr, code = run(t, "view", file, "--listen", ln.Addr().String())
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give another --listen HOST:PORT")
	require.NotContains(t, stderr, "--port")
}

// TestViewWarnings: the dataset's warnings are shown on the page (a MIB file without
// its scan shape in its .hdr, read in the rows of its frame timestamps).
func TestViewWarnings(t *testing.T) {
	file := testfiles.File(t, "mib/001_4x2_6bit.mib")
	abs, err := filepath.Abs(file)
	require.NoError(t, err)
	p := openPage(t, startView(t, abs), "warnings")
	require.Contains(t, eval[string](p, `document.getElementById('warnings').textContent`), "give --nav-shape")
	require.Equal(t, []int{2, 4}, eval[[]int](p, `stemdotView.info.nav_shape`))
	p.checkImage()
	p.shot("0_start")
}

// TestViewSmallestRadius: the keys and the mouse shrink a disk, a ring's inner edge and a
// com disk down to a radius of 1 pixel, never to 0, which the mask specs refuse (the page
// would show an error instead of the image).
func TestViewSmallestRadius(t *testing.T) {
	chromium(t)
	file := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", file, "--nav-shape", "4,6", "--sig-shape", "48,48")
	require.Equal(t, 0, code, stderr)
	p := openPage(t, startView(t, file), "radius")
	// check checks the image shown against the page's command: a com spec's shifts as
	// apply --com-shifts writes them, any other image as apply --out writes it.
	check := func() string {
		spec := p.waitPainted()
		if !strings.HasPrefix(spec, "com") {
			return p.checkImage()
		}
		p.runCommand()
		name := eval[string](p, `safeName(stemdotView.spec)`)
		want, err := os.ReadFile(filepath.Join(p.dir, name+"_shifts.npy"))
		require.NoError(t, err)
		require.Equal(t, want, p.download("export-npy", name+".npy"), "exported CoM shifts of %s against apply --com-shifts", spec)
		return spec
	}
	for _, c := range []struct{ typed, keys, want string }{
		{"disk:20,22,2", "---", "disk:20,22,1"},
		{"ring:20,22,2,9", "[[[", "ring:20,22,1,9"},
		{"com:20,22,2", "---", "com:20,22,1"},
	} {
		p.typeSpec(c.typed)
		require.Equal(t, c.typed, check())
		p.pressKeys(c.keys)
		require.Equal(t, c.want, check())
	}
	// The edge dragged onto the centre.
	for _, c := range []struct {
		typed string
		from  [2]float64
		want  string
	}{
		{"disk:20,22,6", [2]float64{26, 22}, "disk:20,22,1"},
		{"ring:20,22,4,9", [2]float64{24, 22}, "ring:20,22,1,9"},
		{"com:20,22,6", [2]float64{26, 22}, "com:20,22,1"},
	} {
		p.typeSpec(c.typed)
		require.Equal(t, c.typed, check())
		p.drag(c.from, [2]float64{20, 22}, 4)
		require.Equal(t, c.want, check())
	}
}

// TestViewKeysKeepDetectorOnFrame: the arrow keys move a detector up to the frame's edge,
// as a drag does, not off it (a detector that selects no pixel is an error).
func TestViewKeysKeepDetectorOnFrame(t *testing.T) {
	chromium(t)
	file := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", file, "--nav-shape", "4,6", "--sig-shape", "40,48")
	require.Equal(t, 0, code, stderr)
	p := openPage(t, startView(t, file), "keys_edge")
	shift := chromedp.KeyModifiers(chromedp.ModifierShift)
	for _, c := range []struct {
		typed string
		keys  string
		shift bool
		want  string
	}{
		{"point:1,1", kb.ArrowLeft + kb.ArrowLeft + kb.ArrowUp + kb.ArrowUp, false, "point:0,0"},
		{"disk:44,35,2", kb.ArrowRight, true, "disk:47,35,2"},
		{"disk:44,35,2", kb.ArrowDown, true, "disk:44,39,2"},
		{"ring:3,20,4,6", kb.ArrowLeft, true, "ring:0,20,4,6"},
		{"com:5,5,3", kb.ArrowUp, true, "com:5,0,3"},
		{"rect:2,30,3,4", kb.ArrowLeft, true, "rect:-2,30,3,4"},
		{"rect:2,30,3,4", kb.ArrowDown, true, "rect:2,39,3,4"},
	} {
		p.typeSpec(c.typed)
		require.Equal(t, c.typed, p.waitPainted())
		if c.shift {
			p.pressKeys(c.keys, shift)
		} else {
			p.pressKeys(c.keys)
		}
		require.Equal(t, c.want, p.waitPainted(), "%s, then %q", c.typed, c.keys)
	}
	p.checkImage()
}

// TestViewClosedTab: with --close-after, stemdot view stops by itself (status 0) once
// the last page showing it is closed.
func TestViewClosedTab(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", file, "--nav-shape", "4,4", "--sig-shape", "16,16")
	require.Equal(t, 0, code, stderr)
	url, ended := startViewCmd(t, file, "--close-after", "1s")
	p := openPage(t, url, "closed")
	p.waitPainted()
	select {
	case err := <-ended:
		t.Fatalf("stemdot view stopped while the page was open: %v", err)
	case <-time.After(2 * time.Second):
	}
	require.NoError(t, chromedp.Cancel(p.ctx)) // closes the tab and the browser
	select {
	case err := <-ended:
		require.NoError(t, err, "stemdot view's exit after the page was closed")
	case <-time.After(30 * time.Second):
		t.Fatal("stemdot view did not stop within 30 s of its page closing (--close-after 1s)")
	}
}

// TestViewDefaultDiskAuto (#35): the page starts with disk:auto, the direct beam's disk
// found in the sum frame, drawn there and computed as stemdot apply --mask disk:auto
// computes it, here on a scan whose beam is far from the frame's centre; the auto specs
// typed are apply's too, and a click on the detector leaves it as it was.
func TestViewDefaultDiskAuto(t *testing.T) {
	chromium(t)
	const cx, cy, r = 12.3, 33.6, 6.2 // on 48×48 frames: the centre (24, 24) is outside the beam
	scan := discScan(t, cx, cy, r)
	p := openPage(t, startView(t, scan), "disk_auto")
	require.Equal(t, "disk:auto", p.waitPainted())
	det := eval[map[string]float64](p, `({cx: stemdotView.det.cx, cy: stemdotView.det.cy, r: stemdotView.det.r})`)
	require.InDelta(t, cx, det["cx"], 0.5)
	require.InDelta(t, cy, det["cy"], 0.5)
	require.InDelta(t, r, det["r"], 0.5)
	require.Contains(t, eval[string](p, `document.getElementById('command').value`), "--mask disk:auto --out")
	p.cli("apply", scan, "--mask", "disk:auto", "--out", "auto.npy", "-q")
	_, auto := readResult(t, filepath.Join(p.dir, "auto.npy"))
	require.Equal(t, npyData(t, filepath.Join(p.dir, "auto.npy")), p.bytesOf(`stemdotView.painted.data`), "the default image against apply --mask disk:auto")
	for f, v := range auto { // the beam: (100+f)·πr² counts
		require.InDelta(t, float64(100+f)*math.Pi*r*r, v, 0.1*v, "frame %d", f)
	}
	p.checkImage()
	p.shot("0_start")

	// A click inside the detector moves nothing: still disk:auto.
	painted := eval[int](p, `stemdotView.paintedSeq`)
	p.drag([2]float64{det["cx"] + 1, det["cy"]}, [2]float64{det["cx"] + 1, det["cy"]}, 0)
	require.Equal(t, "disk:auto", p.waitPainted())
	require.Equal(t, painted, eval[int](p, `stemdotView.paintedSeq`))
	// Moved, it has numbers; typed, the auto specs are apply's.
	p.drag([2]float64{det["cx"], det["cy"]}, [2]float64{det["cx"] + 4, det["cy"]}, 2)
	require.Equal(t, fmt.Sprintf("disk:%g,%g,%g", math.Round(det["cx"]+4), math.Round(det["cy"]), math.Round(det["r"]*100)/100), p.checkImage())
	for _, spec := range []string{"disk:auto,4", "ring:auto,3,9", "com:auto,8"} {
		p.typeSpec(spec)
		require.Equal(t, spec, p.waitPainted())
		p.runCommand() // as in TestViewSmallestRadius: com's export is its shifts
		name := eval[string](p, `safeName(stemdotView.spec)`)
		if strings.HasPrefix(spec, "com") {
			want, err := os.ReadFile(filepath.Join(p.dir, name+"_shifts.npy"))
			require.NoError(t, err)
			require.Equal(t, want, p.download("export-npy", name+".npy"), spec)
		} else {
			require.Equal(t, npyData(t, filepath.Join(p.dir, name+".npy")), p.bytesOf(`stemdotView.painted.data`), spec)
		}
	}
}

// TestViewNoBeam (#35): where the sum frame shows no direct beam, the detector starts at
// the frame's centre, and a note on the page says why; auto specs are refused, naming
// what to give instead.
func TestViewNoBeam(t *testing.T) {
	chromium(t)
	frames := make([]float32, 2*3*32*40)
	for i := range frames {
		frames[i] = 5
	}
	scan := filepath.Join(t.TempDir(), "flat.npy")
	require.NoError(t, stemnpy.WriteFile(scan, []int{2, 3, 32, 40}, frames))
	p := openPage(t, startView(t, scan), "no_beam")
	require.Equal(t, "disk:20,16,4", p.waitPainted())
	require.Contains(t, eval[string](p, `document.getElementById('warnings').textContent`), "no direct beam's disk found in the sum frame")
	p.checkImage()
	p.typeSpec("disk:auto")
	require.Contains(t, p.waitError(), "no direct beam's disk was found in the sum frame for the auto specs: give the centre's numbers")
	// The server refuses them too.
	resp, err := http.Get(eval[string](p, `location.href`) + "api/image?spec=disk:auto")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "no direct beam's disk was found in the sum frame")
}

// TestViewCommandFollowsImage (#35): the command box describes the image shown: after a
// detector the server refuses, it still holds the command of the image on the page, and
// the refusal is in the error banner.
func TestViewCommandFollowsImage(t *testing.T) {
	chromium(t)
	file := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, "synth", "--out", file, "--nav-shape", "4,6", "--sig-shape", "48,48")
	require.Equal(t, 0, code, stderr)
	p := openPage(t, startView(t, file), "command")
	p.typeSpec("disk:20,22,3")
	require.Equal(t, "disk:20,22,3", p.checkImage())
	shown := eval[string](p, `document.getElementById('command').value`)
	require.Contains(t, shown, "--mask disk:20,22,3 --out")
	p.typeSpec("disk:-50,-50,3")
	require.Contains(t, p.waitError(), "no pixel")
	require.Equal(t, "disk:20,22,3", eval[string](p, `stemdotView.painted.spec`))
	require.Equal(t, shown, eval[string](p, `document.getElementById('command').value`), "the command box after a refused detector")
	require.Equal(t, shown, eval[string](p, `stemdotView.command`))
	p.shot("refused")
	// The next image shown brings its command.
	eval[bool](p, `(() => { stemdotView.errors.length = 0; return true; })()`)
	p.typeSpec("disk:24,22,5")
	require.Equal(t, "disk:24,22,5", p.checkImage())
	require.Contains(t, eval[string](p, `document.getElementById('command').value`), "--mask disk:24,22,5 --out")
}
