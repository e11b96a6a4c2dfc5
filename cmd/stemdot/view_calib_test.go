package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// The view of a calibrated file (BLO: scan step 12.8 nm, 100/6226 cm a detector pixel)
// shows scale bars on the frame and the image, and under the cursor the position in
// pixels and calibrated and the value there: the image's against the CLI's result, the
// sum frame's against the frames decoded here from the file's bytes. An uncalibrated
// file (MIB) shows no scale bar and no calibrated coordinates.
func TestViewCalibration(t *testing.T) {
	file := testfiles.File(t, "blo/test1.blo")
	abs, err := filepath.Abs(file)
	require.NoError(t, err)
	p := openPage(t, startView(t, abs), "calib")
	p.typeSpec("disk:72,72,10")
	require.Equal(t, "disk:72,72,10", p.waitPainted())
	p.cli("apply", abs, "--mask", "disk:72,72,10", "--out", "r.npy", "-q")
	want := f32s(npyData(t, filepath.Join(p.dir, "r.npy"))) // nav (3, 2)

	hover := func(pt [2]float64, which string) string {
		t.Helper()
		require.NoError(t, chromedp.Do(p.ctx, chromedp.MouseEvent(chromedp.MouseMoved, pt[0], pt[1])))
		_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`stemdotView.readout.`+which+` !== ''`))
		require.NoError(t, err)
		return eval[string](p, `stemdotView.readout.`+which)
	}
	fmtVal := func(v float64) string { return eval[string](p, fmt.Sprintf(`fmtVal(%v)`, v)) }

	got := hover(eval[[2]float64](p, `stemdotView.imagePoint(1, 0)`), "image")
	require.Equal(t, "y 1, x 0 (y 12.8 nm, x 0 nm): "+fmtVal(float64(want[2])), got)
	got = hover(eval[[2]float64](p, `stemdotView.imagePoint(0, 1)`), "image")
	require.Equal(t, "y 0, x 1 (y 0 nm, x 12.8 nm): "+fmtVal(float64(want[1])), got)
	require.Equal(t, "5 nm", eval[string](p, `stemdotView.imageBar`)) // about 2 × 12.8 nm / 5

	// The sum frame at pixel (y 70, x 72), from the file: records of 6 bytes and
	// 144×144 uint8 pixels from Data_offset_2 (header byte 12) on.
	b, err := os.ReadFile(abs)
	require.NoError(t, err)
	at := int(binary.LittleEndian.Uint32(b[12:]))
	sum := 0
	for f := range 6 {
		sum += int(b[at+f*(6+144*144)+6+70*144+72])
	}
	got = hover(p.framePoint(72, 70), "frame")
	require.Equal(t, fmt.Sprintf("y 70, x 72 (y %s cm, x %s cm): %s", fmtVal(70*100.0/6226), fmtVal(72*100.0/6226), fmtVal(float64(sum))), got)
	require.Equal(t, "0.2 cm", eval[string](p, `stemdotView.frameBar`)) // about 144 × 0.0161 cm / 5
	require.Equal(t, got, eval[string](p, `document.getElementById('frame-readout').textContent`))
	p.shot("calibrated")

	mib := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib")
	q := openPage(t, startView(t, mib), "uncalibrated")
	require.True(t, eval[bool](q, `stemdotView.frameBar === undefined && stemdotView.imageBar === undefined`))
	require.NoError(t, chromedp.Do(q.ctx, chromedp.MouseEvent(chromedp.MouseMoved, q.framePoint(52, 39)[0], q.framePoint(52, 39)[1])))
	_, err = chromedp.Run(q.ctx, chromedp.Poll[bool](`stemdotView.readout.frame !== ''`))
	require.NoError(t, err)
	require.Regexp(t, `^y 39, x 52: [0-9.e+]+$`, eval[string](q, `stemdotView.readout.frame`))
}
