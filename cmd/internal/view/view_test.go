package view

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/internal/npy"
)

const ny, nx, sy, sx = 3, 5, 12, 16

// value is pixel (y, x) of frame f of the test scan: whole numbers, a bright spot that
// moves with f.
func value(f, y, x int) float64 {
	v := float64((f*7+y*3+x)%11) + 1
	if y == 5+f%3 && x == 7+f%4 {
		v += 100
	}
	return v
}

// newServer is a server of a float32 NPY scan of ny×nx frames of sy×sx (opened with
// the open options kv: key, value, ...), with the first pass done, and an httptest
// server of it.
func newServer(t *testing.T, kv ...string) (*Server, *httptest.Server) {
	t.Helper()
	s := unstarted(t, kv...)
	s.firstPass(context.Background())
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

// unstarted is the server of newServer before its first pass.
func unstarted(t *testing.T, kv ...string) *Server {
	t.Helper()
	return unstartedAt(t, filepath.Join(t.TempDir(), "scan.npy"), scale(1), kv...)
}

// scale is the test scan with every pixel times k.
func scale(k float32) []float32 {
	data := make([]float32, ny*nx*sy*sx)
	for f := range ny * nx {
		for y := range sy {
			for x := range sx {
				data[(f*sy+y)*sx+x] = k * float32(value(f, y, x))
			}
		}
	}
	return data
}

// unstartedAt is unstarted of the scan data written at path.
func unstartedAt(t *testing.T, path string, data []float32, kv ...string) *Server {
	t.Helper()
	require.NoError(t, npy.WriteFile(path, []int{ny, nx, sy, sx}, data))
	var opt stemdot.Options
	for i := 0; i+1 < len(kv); i += 2 {
		require.NoError(t, stemdot.SetOpenOption(&opt, kv[i], kv[i+1]))
	}
	ds, err := stemdot.Open(path, opt)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	apply, err := stemdot.Plan{CPUs: "1"}.Planner()
	require.NoError(t, err)
	reduce, err := stemdot.Plan{CPUs: "1"}.ReducePlanner()
	require.NoError(t, err)
	s, err := New(ds, Options{File: path, Command: "stemdot apply " + path, Apply: apply, Reduce: reduce, Warnings: []string{"a warning"}})
	require.NoError(t, err)
	return s
}

func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func TestRefused(t *testing.T) {
	s, hs := newServer(t)
	s.opt.Hosts = []string{"scope.lab"}
	base := hs.URL + "/" + s.Token() + "/"
	port := strings.Split(hs.Listener.Addr().String(), ":")[1]
	for _, c := range []struct {
		name, url string
		header    []string
		want      int
	}{
		{"the page", base, nil, 200},
		{"the page without the slash", strings.TrimSuffix(base, "/"), nil, 200}, // redirected
		{"info", base + "api/info", nil, 200},
		{"no token", hs.URL + "/api/info", nil, 403},
		{"no token, root", hs.URL + "/", nil, 403},
		{"a wrong token", hs.URL + "/" + strings.Repeat("0", 32) + "/api/info", nil, 403},
		{"a token's prefix", hs.URL + "/" + s.Token()[:31] + "/api/info", nil, 403},
		{"a foreign Host (DNS rebinding)", base + "api/info", []string{"Host", "attacker.example:" + port}, 403},
		{"Host localhost", base + "api/info", []string{"Host", "localhost:" + port}, 200},
		{"Host [::1]", base + "api/info", []string{"Host", "[::1]:" + port}, 200},
		{"the name of Options.Hosts", base + "api/info", []string{"Host", "Scope.Lab:" + port}, 200},
		{"a foreign Origin", base + "api/info", []string{"Origin", "http://attacker.example"}, 403},
		{"a null Origin", base + "api/info", []string{"Origin", "null"}, 403},
		{"the server's Origin", base + "api/info", []string{"Origin", hs.URL}, 200},
		{"a file that is not the page's", base + "view.go", nil, 404},
		{"a path out of the page", base + "..%2fview.go", nil, 403}, // /TOKEN/../view.go is /view.go
	} {
		resp, body := get(t, c.url, c.header...)
		require.Equal(t, c.want, resp.StatusCode, "%s: %s", c.name, body)
	}
	// A name refused says how to use it (stemdot view --listen NAME:PORT), or an IP address.
	resp, body := get(t, base+"api/info", "Host", "microscope-pc:"+port)
	require.Equal(t, 403, resp.StatusCode)
	require.Contains(t, string(body), "--listen microscope-pc:PORT")
	require.Contains(t, string(body), "IP address")
	resp, body = get(t, base+"api/info")
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	var info map[string]any
	require.NoError(t, json.Unmarshal(body, &info))
	require.Equal(t, []any{float64(ny), float64(nx)}, info["nav_shape"])
	require.Equal(t, []any{float64(sy), float64(sx)}, info["sig_shape"])
	require.Equal(t, []any{"a warning"}, info["warnings"])
}

// array reads a binary array answer.
func array(t *testing.T, url string) (shape string, v []float64) {
	t.Helper()
	resp, body := get(t, url)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	switch resp.Header.Get("X-DType") {
	case "f4":
		for i := 0; i+4 <= len(body); i += 4 {
			v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(body[i:]))))
		}
	case "f8":
		for i := 0; i+8 <= len(body); i += 8 {
			v = append(v, math.Float64frombits(binary.LittleEndian.Uint64(body[i:])))
		}
	default:
		t.Fatalf("X-DType %q", resp.Header.Get("X-DType"))
	}
	return resp.Header.Get("X-Shape"), v
}

func TestArrays(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/"

	shape, sum := array(t, base+"frame?kind=sum")
	require.Equal(t, "12,16", shape)
	for y := range sy {
		for x := range sx {
			want := 0.0
			for f := range ny * nx {
				want += value(f, y, x)
			}
			require.Equal(t, want, sum[y*sx+x], "sum pixel (%d, %d)", y, x)
		}
	}
	for _, kind := range []string{"mean", "max"} {
		shape, got := array(t, base+"frame?kind="+kind)
		require.Equal(t, "12,16", shape)
		for i, v := range got {
			want := 0.0
			for f := range ny * nx {
				if kind == "mean" {
					want += value(f, i/sx, i%sx) / (ny * nx)
				} else {
					want = math.Max(want, value(f, i/sx, i%sx))
				}
			}
			require.InDelta(t, want, v, 1e-12, "%s pixel %d", kind, i)
		}
	}
	shape, fr := array(t, base+"pick?y=2&x=3")
	require.Equal(t, "12,16", shape)
	for i, v := range fr {
		require.Equal(t, value(2*nx+3, i/sx, i%sx), v)
	}

	// A disk: float64 sums over (x−8)² + (y−6)² ≤ 4².
	shape, img := array(t, base+"image?spec=disk:8,6,4")
	require.Equal(t, "3,5", shape)
	for f := range ny * nx {
		want := 0.0
		for y := range sy {
			for x := range sx {
				if (x-8)*(x-8)+(y-6)*(y-6) <= 16 {
					want += value(f, y, x)
				}
			}
		}
		require.Equal(t, want, img[f], "frame %d", f) // whole numbers below 2²⁴: exact
	}
	// CoM about (8, 6): shift y, shift x, magnitude.
	shape, com := array(t, base+"image?spec=com:8,6")
	require.Equal(t, "3,3,5", shape)
	for f := range ny * nx {
		var s0, s1, s2 float64
		for y := range sy {
			for x := range sx {
				v := value(f, y, x)
				s0, s1, s2 = s0+v, s1+float64(y-6)*v, s2+float64(x-8)*v
			}
		}
		require.InDelta(t, s1/s0, com[f], 1e-5, "shift y of frame %d", f)
		require.InDelta(t, s2/s0, com[ny*nx+f], 1e-5, "shift x of frame %d", f)
		require.InDelta(t, math.Hypot(s1/s0, s2/s0), com[2*ny*nx+f], 1e-5, "magnitude of frame %d", f)
	}

	for _, c := range []struct{ url, want string }{
		{"image?spec=disk:8,6", "want disk:CX,CY,R"},
		{"image?spec=disk:8,6,4%3Bring:8,6,1,2", ""},
		{"pick?y=3&x=0", "y=3 is outside the scan's nav shape [3 5]"},
		{"pick?y=a&x=0", "want a whole number"},
		{"frame?kind=std", "want sum, mean or max"},
	} {
		resp, body := get(t, base+c.url)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", c.url, body)
		require.Contains(t, string(body), c.want, c.url)
	}
}

// TestNewestWins: a request cancels the run in progress, and a page's request that
// arrives after a newer one of the same page is refused without cancelling it.
func TestNewestWins(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/image?page=p&spec="
	s.jobs.Lock() // the runs wait here, as behind a long one
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, spec := range []string{"disk:8,6,3&seq=1", "disk:8,6,5&seq=2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + spec)
			require.NoError(t, err)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
		require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.runs["p"].seq == uint64(i+1) }, 10*time.Second, time.Millisecond)
	}
	resp, body := get(t, base+"disk:1,1,1&seq=1") // late: refused at once
	require.Equal(t, http.StatusConflict, resp.StatusCode, "%s", body)
	s.jobs.Unlock()
	wg.Wait()
	require.Equal(t, []int{http.StatusConflict, 200}, codes)
	// Both the newest and the cached image answer again.
	resp, _ = get(t, base+"disk:8,6,5&seq=3")
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, s.cache, 1)
}

// TestRequestNumbers (#33.5): a page's request numbered 2^64−1 blocked every later
// request of that page (409), and one without a number was always refused as stale.
// Numbers are compared with the page's run in progress only; a page's request needs one.
func TestRequestNumbers(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/image?page=p&spec="
	for i, q := range []string{"disk:8,6,3&seq=18446744073709551615", "disk:8,6,4&seq=1", "disk:8,6,5&seq=2"} {
		resp, body := get(t, base+q)
		require.Equal(t, 200, resp.StatusCode, "request %d (%s): %s", i, q, body)
	}
	for _, q := range []string{"disk:8,6,2", "disk:8,6,2&seq=", "disk:8,6,2&seq=-1", "disk:8,6,2&seq=18446744073709551616", "disk:8,6,2&seq=x"} {
		resp, body := get(t, base+q)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", q, body)
		require.Contains(t, string(body), "a page's request needs its number, a whole number from 0 to 2^64-1", q)
	}
	// Without a page, no number is needed (requests without a page are one page).
	resp, body := get(t, hs.URL+"/"+s.Token()+"/api/image?spec=disk:8,6,1")
	require.Equal(t, 200, resp.StatusCode, "%s", body)
}

// TestFileChanged (#33.5): after the dataset's file was rewritten in place at the same
// size, the view served the sum frame and the images of the file as it was. Every
// request for frames and images now answers 410 saying so; the sums before were right.
func TestFileChanged(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/"
	_, sum := array(t, base+"frame?kind=sum")
	want := make([]float64, sy*sx)
	for f := range ny * nx {
		for p := range sy * sx {
			want[p] += value(f, p/sx, p%sx)
		}
	}
	require.Equal(t, want, sum)
	array(t, base+"image?spec=disk:8,6,3&page=p&seq=1") // cached
	path := s.ds.Path()
	before, err := os.Stat(path)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // past the file system clock's tick
	other := filepath.Join(filepath.Dir(path), "other.npy")
	require.NoError(t, npy.WriteFile(other, []int{ny, nx, sy, sx}, scale(2)))
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644)) // in place: truncated and written again
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after) && before.Size() == after.Size(), "rewritten in place at the same size")
	for _, q := range []string{"frame?kind=sum", "frame?kind=max", "image?spec=disk:8,6,3&page=p&seq=2", "image?spec=disk:8,6,4&page=p&seq=3", "pick?y=1&x=2"} {
		resp, body := get(t, base+q)
		require.Equal(t, http.StatusGone, resp.StatusCode, "%s: %s", q, body)
		require.Equal(t, path+" was rewritten (its size, modification or change time differs) since stemdot view opened it: its sum frame and images are of the file as it was; restart stemdot view to read it again\n", string(body), q)
	}
	// Replaced by another file (renamed over it): refused too.
	require.NoError(t, os.Rename(other, path))
	resp, body := get(t, base+"frame?kind=sum")
	require.Equal(t, http.StatusGone, resp.StatusCode)
	require.Contains(t, string(body), path+" was replaced by another file since stemdot view opened it")
}

// TestMessagesEscaped (#33.6): a file name with escape sequences (legal on Linux) reaches
// the page's info, warnings and errors escaped, in JSON and plain text alike.
func TestMessagesEscaped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scan\x1b[31mRED\x1b]0;t\x07\u009b2J.npy")
	shown := filepath.Join(dir, `scan\x1b[31mRED\x1b]0;t\x07\u009b2J.npy`)
	s := unstartedAt(t, path, scale(1))
	s.opt.Warnings = []string{path + ": a note"}
	s.firstPass(t.Context())
	hs := httptest.NewServer(s)
	defer hs.Close()
	base := hs.URL + "/" + s.Token() + "/api/"
	controls := regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]")
	resp, body := get(t, base+"info")
	require.Equal(t, 200, resp.StatusCode)
	var info map[string]any
	require.NoError(t, json.Unmarshal(body, &info))
	require.Equal(t, shown, info["file"])
	require.Equal(t, []any{shown + ": a note"}, info["warnings"])
	require.NoError(t, os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)))
	resp, body = get(t, base+"frame?kind=sum")
	require.Equal(t, http.StatusGone, resp.StatusCode)
	require.True(t, strings.HasPrefix(string(body), shown+" was rewritten"), "%q", body)
	require.False(t, controls.Match(body), "%q", body)
}

// TestPagesTakeTurns: a page's request does not cancel another page's run (two tabs):
// it waits for it. Cancelling it made the other page retry, which cancelled this one's,
// and one page was left showing an older detector's image without an error.
func TestPagesTakeTurns(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/image?spec="
	s.jobs.Lock() // the runs wait here, as behind a long one
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i, q := range []string{"disk:8,6,3&page=a&seq=1", "disk:8,6,4&page=b&seq=1", "disk:8,6,5"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + q)
			require.NoError(t, err)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
		require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.runs) == i+1 }, 10*time.Second, time.Millisecond)
	}
	s.jobs.Unlock()
	wg.Wait()
	require.Equal(t, []int{200, 200, 200}, codes)
	require.Len(t, s.cache, 3)
	require.Empty(t, s.runs)
}

// TestServeStops: Serve ends when the last page's event stream has been closed for
// CloseAfter, after sending the first pass's progress and "ready"; and at once when its
// context is cancelled.
func TestServeStops(t *testing.T) {
	s := unstarted(t)
	s.opt.CloseAfter = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	time.Sleep(2 * s.opt.CloseAfter)
	select {
	case <-done:
		t.Fatal("Serve stopped before a first page connected")
	default:
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/" + s.Token() + "/api/events")
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, e)
			if e == "ready" {
				break
			}
		}
	}
	require.Equal(t, "ready", events[len(events)-1], "events %v", events)
	require.Equal(t, "progress", events[0])
	resp.Body.Close()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not stop after the page went away")
	}

	ctx, cancel := context.WithCancel(context.Background())
	s = unstarted(t)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { done <- s.Serve(ctx, ln) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not stop when its context was cancelled")
	}
}

// TestROI: with an ROI, the images have the whole scan's nav shape, NaN outside it, and
// a click picks the frame of a scan position it selects.
func TestROI(t *testing.T) {
	s, hs := newServer(t, "roi", "rect:1,1,3,2") // columns 1..3 of rows 1..2
	base := hs.URL + "/" + s.Token() + "/api/"
	_, body := get(t, base+"info")
	var info map[string]any
	require.NoError(t, json.Unmarshal(body, &info))
	require.Equal(t, []any{float64(ny), float64(nx)}, info["nav_shape"])
	require.Equal(t, float64(6), info["roi_positions"])
	shape, img := array(t, base+"image?spec=point:3,4")
	require.Equal(t, "3,5", shape)
	for f, v := range img {
		if y, x := f/nx, f%nx; y >= 1 && x >= 1 && x <= 3 {
			require.Equal(t, value(f, 4, 3), v, "position (%d, %d)", y, x)
		} else {
			require.True(t, math.IsNaN(v), "position (%d, %d) outside the ROI: %v", y, x, v)
		}
	}
	_, fr := array(t, base+"pick?y=2&x=3")
	for i, v := range fr {
		require.Equal(t, value(2*nx+3, i/sx, i%sx), v)
	}
	resp, body := get(t, base+"pick?y=0&x=3")
	require.Equal(t, 400, resp.StatusCode)
	require.Contains(t, string(body), "outside the ROI")
}

// TestOneRow: a 3-D input, (n, sig_y, sig_x), has nav shape (n,): images of n values,
// frames picked by x alone.
func TestOneRow(t *testing.T) {
	data := make([]float32, 6*sy*sx)
	for i := range data {
		data[i] = float32(i % 97)
	}
	path := filepath.Join(t.TempDir(), "row.npy")
	require.NoError(t, npy.WriteFile(path, []int{6, sy, sx}, data))
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	pl, err := stemdot.Plan{CPUs: "1"}.Planner()
	require.NoError(t, err)
	s, err := New(ds, Options{Apply: pl, Reduce: pl})
	require.NoError(t, err)
	s.firstPass(context.Background())
	hs := httptest.NewServer(s)
	defer hs.Close()
	base := hs.URL + "/" + s.Token() + "/api/"
	shape, img := array(t, base+"image?spec=point:2,1")
	require.Equal(t, "6", shape)
	for f, v := range img {
		require.Equal(t, float64((f*sy*sx+sx+2)%97), v)
	}
	shape, com := array(t, base+"image?spec=com:8,6")
	require.Equal(t, "3,6", shape)
	require.Len(t, com, 18)
	shape, fr := array(t, base+"pick?x=4")
	require.Equal(t, "12,16", shape)
	require.Equal(t, float64((4*sy*sx+5)%97), fr[5])
}

// TestPNG (#35): api/png is the image as stemdot apply --png draws it: 8-bit grey from
// the minimum (black) to the maximum (white), each scan position a block of k×k pixels,
// k the whole factor that brings the short side to 256 (here 3 rows: k = 86); for com,
// the map asked for.
func TestPNG(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/api/"
	check := func(url string, want []float64) {
		t.Helper()
		resp, body := get(t, url)
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		require.Equal(t, "image/png", resp.Header.Get("Content-Type"))
		img, err := png.Decode(bytes.NewReader(body))
		require.NoError(t, err)
		const k = 86
		require.Equal(t, image.Rect(0, 0, nx*k, ny*k), img.Bounds())
		lo, hi := slices.Min(want), slices.Max(want)
		for y := range ny * k {
			for x := range nx * k {
				g := color.GrayModel.Convert(img.At(x, y)).(color.Gray).Y
				require.Equal(t, uint8(math.Round((want[y/k*nx+x/k]-lo)/(hi-lo)*255)), g, "%s: pixel (%d, %d)", url, x, y)
			}
		}
	}
	disk := make([]float64, ny*nx) // float64 sums over (x−8)² + (y−6)² ≤ 4²
	mag := make([]float64, ny*nx)  // the CoM shift's magnitude about (8, 6)
	for f := range ny * nx {
		var s0, s1, s2 float64
		for y := range sy {
			for x := range sx {
				v := value(f, y, x)
				if (x-8)*(x-8)+(y-6)*(y-6) <= 16 {
					disk[f] += v
				}
				s0, s1, s2 = s0+v, s1+float64(y-6)*v, s2+float64(x-8)*v
			}
		}
		mag[f] = math.Hypot(s1/s0, s2/s0)
	}
	check(base+"png?spec=disk:8,6,4", disk)
	check(base+"png?spec=com:8,6&part=2", mag)
	for _, c := range []struct{ url, want string }{
		{"png?spec=com:8,6", `part="": spec "com:8,6" has maps 0 to 2`},
		{"png?spec=com:8,6&part=3", `part="3"`},
		{"png?spec=disk:8,6,4&part=1", `has maps 0 to 0`},
		{"png?spec=disk:8,6", "want disk:CX,CY,R"},
	} {
		resp, body := get(t, base+c.url)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", c.url, body)
		require.Contains(t, string(body), c.want, c.url)
	}
}

// TestEmbedded: the page may be framed only by Options.FrameAncestors (none by default,
// a value that would break the header refused), and it works under a proxy's path prefix
// as jupyter-server-proxy serves it (/proxy/PORT/ stripped, the browser's Host passed
// on, which Options.Hosts "*" accepts): the redirect to the page stays under the prefix,
// and every URL of the page is relative.
func TestEmbedded(t *testing.T) {
	s, hs := newServer(t)
	base := hs.URL + "/" + s.Token() + "/"
	resp, _ := get(t, base)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "; frame-ancestors 'none'")
	s.opt.FrameAncestors = "http://localhost:8888 http://127.0.0.1:*"
	resp, _ = get(t, base)
	require.True(t, strings.HasSuffix(resp.Header.Get("Content-Security-Policy"), "; frame-ancestors http://localhost:8888 http://127.0.0.1:*"))
	for _, bad := range []string{"* ; script-src *", "a,b", "x\r\nSet-Cookie: a=b"} {
		_, err := New(s.ds, Options{Apply: s.opt.Apply, Reduce: s.opt.Reduce, FrameAncestors: bad})
		require.ErrorContains(t, err, "want CSP sources separated by blanks", "%q", bad)
	}

	// A proxy under /proxy/1234/ that passes on the browser's Host, as jupyter-server-proxy.
	target, err := url.Parse(hs.URL)
	require.NoError(t, err)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, "/proxy/1234")
		r.Out.Host = r.In.Host
	}}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	page := proxy.URL + "/proxy/1234/" + s.Token()
	resp, _ = get(t, page+"/api/info", "Host", "hub.example.org")
	require.Equal(t, 403, resp.StatusCode, "a name not in Options.Hosts")
	s.opt.Hosts = []string{"*"}
	resp, _ = get(t, page+"/api/info", "Host", "hub.example.org")
	require.Equal(t, 200, resp.StatusCode)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := noRedirect.Get(page)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusFound, r.StatusCode)
	loc, err := r.Request.URL.Parse(r.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/proxy/1234/"+s.Token()+"/", loc.Path)

	resp, html := get(t, page+"/")
	require.Equal(t, 200, resp.StatusCode)
	for _, name := range []string{"app.js", "style.css"} {
		require.Contains(t, string(html), `"`+name+`"`)
		resp, _ := get(t, page+"/"+name)
		require.Equal(t, 200, resp.StatusCode, name)
	}
	// No absolute URL in the page or its script: none starts with "/" or a scheme.
	js, err := static.ReadFile("static/app.js")
	require.NoError(t, err)
	abs := regexp.MustCompile("(?:fetch|EventSource|getArray)\\(\\s*['\"`](?:/|[a-z]+:)|(?:src|href)=\"(?:/|[a-z]+:)")
	require.Empty(t, abs.FindAllString(string(js)+string(html), -1))
	require.Regexp(t, "getArray\\(`api/image", string(js), "the pattern above sees the page's requests")
}
