package main

import (
	"encoding/binary"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// viewGet is a GET of url with Host host ("" the URL's), its status and body.
func viewGet(t *testing.T, u, host string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// viewURL is stemdot_view_url of h (a length query, then the text).
func viewURL(t *testing.T, h uint64) string {
	t.Helper()
	var needed uint64
	st, msg := callC(stemdot_go_view_url, h, nil, 0, unsafe.Pointer(&needed))
	require.Equal(t, statusOK, st, msg)
	buf := make([]byte, needed+1)
	st, msg = callC(stemdot_go_view_url, h, unsafe.Pointer(&buf[0]), len(buf)-1, unsafe.Pointer(&needed))
	assert.Equal(t, errShape, st, "no room for the NUL: %s", msg)
	st, msg = callC(stemdot_go_view_url, h, unsafe.Pointer(&buf[0]), len(buf), unsafe.Pointer(&needed))
	require.Equal(t, statusOK, st, msg)
	return string(buf[:needed])
}

// stemdot_view_start serves a dataset from memory on loopback with its token: the page,
// and the virtual image of a detector equal to a float64 sum of the frames' pixels
// inside it; the dataset is in use until stemdot_view_free, which stops the server (its
// port refuses connections then).
func TestViewServer(t *testing.T) {
	const ny, nx, sy, sx = 3, 4, 8, 10
	frames := make([]uint16, ny*nx*sy*sx)
	for i := range frames {
		frames[i] = uint16((i*7919)%1000 + i/(sy*sx))
	}
	nav := []uint64{ny, nx}
	var ds uint64
	st, msg := callC(stemdot_go_dataset_from_memory, unsafe.Pointer(&frames[0]), 2*len(frames), 2, 2, unsafe.Pointer(&nav[0]), sy, sx, unsafe.Pointer(&ds))
	require.Equal(t, statusOK, st, msg)
	t.Cleanup(func() { callC(stemdot_go_dataset_free, ds) })

	var h uint64
	st, msg = callC(stemdot_go_view_start, ds, cstr("cpus=1;name=frames of a test;frame_ancestors=*"), unsafe.Pointer(&h))
	require.Equal(t, statusOK, st, msg)
	u := viewURL(t, h)
	require.Regexp(t, `^http://127\.0\.0\.1:[0-9]+/[0-9a-f]{32}/$`, u)

	resp, page := viewGet(t, u, "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(page), "<title>stemdot view</title>")
	assert.True(t, strings.HasSuffix(resp.Header.Get("Content-Security-Policy"), "; frame-ancestors *"))
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	resp, _ = viewGet(t, parsed.Scheme+"://"+parsed.Host+"/api/info", "")
	assert.Equal(t, 403, resp.StatusCode, "without the token")
	resp, _ = viewGet(t, u+"api/info", "attacker.example")
	assert.Equal(t, 403, resp.StatusCode, "a foreign Host")
	resp, info := viewGet(t, u+"api/info", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(info), `"file":"frames of a test"`)
	assert.Contains(t, string(info), `"command":""`)

	// rect:X,Y,W,H: columns 2..5 of rows 1..3.
	want := make([]float64, ny*nx)
	for f := range want {
		for y := 1; y < 4; y++ {
			for x := 2; x < 6; x++ {
				want[f] += float64(frames[(f*sy+y)*sx+x])
			}
		}
	}
	var body []byte
	deadline := time.Now().Add(time.Minute)
	for {
		resp, body = viewGet(t, u+"api/image?spec=rect:2,1,4,3", "")
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) { // the first pass is running
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	require.Equal(t, "3,4", resp.Header.Get("X-Shape"))
	require.Equal(t, "f4", resp.Header.Get("X-DType"))
	require.Len(t, body, 4*ny*nx)
	for f := range want {
		assert.Equal(t, float32(want[f]), math.Float32frombits(binary.LittleEndian.Uint32(body[4*f:])), "scan position %d", f)
	}

	st, msg = callC(stemdot_go_dataset_free, ds)
	require.Equal(t, errInvalidArgument, st)
	require.Contains(t, msg, "in use by a running apply or a viewer")
	st, msg = callC(stemdot_go_view_free, h)
	require.Equal(t, statusOK, st, msg)
	_, err = http.Get(u)
	require.Error(t, err, "the server stopped")
	require.Contains(t, err.Error(), "connection refused")
	st, msg = callC(stemdot_go_view_free, h)
	require.Equal(t, errBadHandle, st, msg)
	st, msg = callC(stemdot_go_view_url, h, nil, 0, unsafe.Pointer(&nav[0]))
	require.Equal(t, errBadHandle, st, msg)
	st, msg = callC(stemdot_go_dataset_free, ds)
	require.Equal(t, statusOK, st, msg)
}

// Options hosts "*" and listen; the errors of stemdot_view_start, each naming the
// option, leaving no server and the dataset free.
func TestViewOptions(t *testing.T) {
	frames := make([]uint8, 2*4*4)
	nav := []uint64{2}
	var ds uint64
	st, msg := callC(stemdot_go_dataset_from_memory, unsafe.Pointer(&frames[0]), len(frames), 1, 1, unsafe.Pointer(&nav[0]), 4, 4, unsafe.Pointer(&ds))
	require.Equal(t, statusOK, st, msg)
	defer callC(stemdot_go_dataset_free, ds)

	var h uint64
	st, msg = callC(stemdot_go_view_start, ds, cstr("hosts=*;listen=0.0.0.0:0;command=stemdot apply x.npy --nav-shape=2"), unsafe.Pointer(&h))
	require.Equal(t, statusOK, st, msg)
	u := viewURL(t, h)
	require.Regexp(t, `^http://127\.0\.0\.1:`, u, "every address: the URL's is loopback")
	resp, info := viewGet(t, u+"api/info", "hub.example.org")
	require.Equal(t, 200, resp.StatusCode, "%s", info)
	assert.Contains(t, string(info), `"command":"stemdot apply x.npy --nav-shape=2"`)
	assert.Contains(t, string(info), `"file":"frames in memory"`)
	resp, _ = viewGet(t, u, "")
	assert.True(t, strings.HasSuffix(resp.Header.Get("Content-Security-Policy"), "; frame-ancestors 'none'"), "the default")
	st, msg = callC(stemdot_go_view_free, h)
	require.Equal(t, statusOK, st, msg)

	for _, c := range []struct {
		ds       uint64
		options  string
		code     status
		contains string
	}{
		{ds, "colour=red", errInvalidArgument, `unknown plan option "colour"`},
		{ds, "colour=red", errInvalidArgument, "or a view option (listen, name, command, frame_ancestors, hosts)"},
		{ds, "listen", errInvalidArgument, `view option "listen" is not key=value`},
		{ds, "name=a;name=b", errInvalidArgument, "option name given twice"},
		{ds, "cpus=1;cpus=2", errInvalidArgument, "option cpus given twice"},
		{ds, "frame_ancestors=a,b", errInvalidArgument, "want CSP sources separated by blanks"},
		{ds, "listen=256.0.0.1:0", errIO, `option listen "256.0.0.1:0"`},
		{ds, "cpus=lots", errInvalidArgument, "option cpus"},
		{0, "", errBadHandle, "dataset handle is 0"},
		{ds + 1<<40, "", errBadHandle, "is not valid"},
	} {
		h = 1
		st, msg := callC(stemdot_go_view_start, c.ds, cstr(c.options), unsafe.Pointer(&h))
		assert.Equal(t, c.code, st, "%q: %s", c.options, msg)
		assert.Contains(t, msg, "stemdot_view_start: ")
		assert.Contains(t, msg, c.contains, "%q", c.options)
		assert.Zero(t, h, "no stale handle in *out")
	}
	st, msg = callC(stemdot_go_view_start, ds, nil, nil)
	assert.Equal(t, errInvalidArgument, st, msg)
	st, msg = callC(stemdot_go_view_url, ds, nil, 0, unsafe.Pointer(&h))
	assert.Equal(t, errBadHandle, st)
	assert.Contains(t, msg, "is a dataset handle, not a view handle")
}
