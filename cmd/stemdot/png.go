package main

import (
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"regexp"
	"strings"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// pngName is the PNG file of mask m: PREFIX_<m>_<name>.png, with the characters of name
// other than letters, digits, '_', '.' and '-' replaced by '_'.
func pngName(prefix string, m int, name string) string {
	return fmt.Sprintf("%s_%d_%s.png", prefix, m, strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_"))
}

// writeVirtualImagePNGs writes one 8-bit greyscale PNG per mask, PREFIX_<m>_<name>.png,
// each of shape (nav_y, nav_x) (a 1-D or >2-D nav shape is shown as rows of its last
// axis), linearly scaled so the image's minimum is black and its maximum white (a
// constant image is black). values is frame-major: values(f, m) for f in frames.
func writeVirtualImagePNGs(prefix string, navShape []int, names []string, values func(f, m int) float64) ([]pendingFile, error) {
	width := navShape[len(navShape)-1]
	frames := 1
	for _, n := range navShape {
		frames *= n
	}
	height := frames / width
	var pending []pendingFile
	for m, name := range names {
		lo, hi := math.Inf(1), math.Inf(-1)
		for f := 0; f < frames; f++ {
			v := values(f, m)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		scale := 0.0
		if hi > lo {
			scale = 255 / (hi - lo)
		}
		img := image.NewGray(image.Rect(0, 0, width, height))
		for f := 0; f < frames; f++ {
			img.Pix[f] = uint8(math.Round((values(f, m) - lo) * scale))
		}
		final := pngName(prefix, m, name)
		p, err := writeTemp(final, func(w *os.File) error { return png.Encode(w, img) })
		if err != nil {
			for _, q := range pending {
				q.discard()
			}
			return nil, err
		}
		pending = append(pending, p)
	}
	return pending, nil
}
