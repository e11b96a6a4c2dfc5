package engine

import "github.com/stemdot/stemdot/masks"

// bcast64Kernel sets out[W·f+m] = Σ_{i<n} px_f[i]·w[W·i+m] in float64 for its F frames
// px_f (frame f at px plus f·stride bytes) and the W masks of a float64 broadcast panel
// (packBcast64) at w: one accumulator register per frame and vector of masks, each pixel of
// a frame broadcast to every lane, each vector of weights loaded once for the F frames.
// n ≥ 1 is any pixel count; the kernel reads no frame byte past px_f + 8n. Every 4 pixels
// it prefetches three 64-byte lines from pf into L2 (an x86 prefetch never faults). The
// amd64 assembly kernels (simd_bcast64_amd64.s, written by gen_bcast64.go) implement it
// with AVX-512 (8 lanes, W = 8v for v ≤ 4) and AVX2+FMA (4 lanes, W = 4v for v ≤ 3), for
// F up to 12 and 24/v (AVX-512) or 12/v (AVX2).
type bcast64Kernel func(px *float64, stride, n int, w, pf, out *float64)

// bcast64MaxV is the most vectors of masks of a kernel call and bcast64Frames the most
// frames.
const (
	bcast64MaxV   = 4
	bcast64Frames = 12
)

// bcast64Kernels is one instruction set's float64 broadcast kernels.
type bcast64Kernels struct {
	table  *[bcast64MaxV][bcast64Frames]bcast64Kernel // [v-1][f-1]
	lanes  int                                        // float64 lanes of a vector
	maxV   int                                        // vectors of masks per call at most
	accMax int                                        // accumulator registers
}

// chunk is the most masks of a panel.
func (k *bcast64Kernels) chunk() int { return k.lanes * k.maxV }

// framesFor is the most frames of a call for panels of v vectors.
func (k *bcast64Kernels) framesFor(v int) int { return min(bcast64Frames, k.accMax/v) }

// simdBlock64 is the number of pixels of each frame per pass of the float64 kernel:
// a panel of 32 masks' weights over simdBlock64 pixels (128 KiB) and the tile's frames
// converted to float64 over them (64 KiB for 16 frames, 256 KiB for 64) stay in a core's
// L2 together while every frame of the tile meets every panel.
const simdBlock64 = 512

// convStride is the distance, in float64s, between two frames' converted blocks: a block
// and a 64-byte line, so that the frames of a kernel call, read at the same pixel, fall
// into different sets of the L1 cache (at a stride of 4 KiB, 12 frames' lines would all
// compete for one set).
const convStride = simdBlock64 + 8

// simdDense64 is the dense kernel of float64 runs on the broadcast kernels: for each block
// of simdBlock64 pixels, the tile's frames are converted to float64 (float64 frames are
// used in place), and for each panel of masks every frame of the tile meets the panel's
// weights, framesFor frames per kernel call. The weights are the stack's in float64, the
// float32 weight plus its Lo part (masks.Stack.Lo), packed by packBcast64; every product
// and sum is float64, so 32-bit integer pixels and float64 pixels keep their value.
// Each block's float64 sums are added into the result; each call prefetches a part of
// the next panel's weights into L2 (the first panel again after the last, for the next
// tile): a stack of 64 masks of 256×256 is 32 MiB of float64 weights, read once per tile.
type simdDense64[N native] struct {
	nMasks, pixels int
	k              *bcast64Kernels
	packed         []float64                         // packBcast64 of the stack, for k's chunk and lanes
	conv           []float64                         // tileFrames × convStride converted pixels; nil for float64 frames
	cvt            func(dst *float64, src *N, n int) // SIMD conversion (cvt64KernelFor), or nil
	out            []float64                         // accMax × lanes kernel results
}

// newSIMDDense64 returns the float64 kernel of a stack of nMasks masks of pixels pixels,
// for tiles of at most tileFrames frames; packed is the stack packed by packBcast64 for k.
func newSIMDDense64[N native](k *bcast64Kernels, packed []float64, nMasks, pixels, tileFrames int) *simdDense64[N] {
	d := &simdDense64[N]{nMasks: nMasks, pixels: pixels, k: k, packed: packed, out: make([]float64, k.accMax*k.lanes)}
	if _, ok := any(*new(N)).(float64); !ok {
		d.conv = make([]float64, tileFrames*convStride)
		d.cvt = cvt64KernelFor[N]()
	}
	return d
}

func (d *simdDense64[N]) apply(tile []byte, frames int, acc []float64) {
	px := asNative[N](tile)
	acc = acc[:frames*d.nMasks]
	clear(acc)
	chunk := d.k.chunk()
	for k0 := 0; k0 < d.pixels; k0 += simdBlock64 {
		n := min(simdBlock64, d.pixels-k0)
		var base []float64 // frame f's block at base[f·stride:][:n]
		stride := convStride
		if d.conv == nil {
			base, stride = asNative[float64](tile)[k0:], d.pixels
		} else {
			base = d.conv[:frames*convStride]
			for f := range frames {
				d.convert(base[f*convStride:][:n], px[f*d.pixels+k0:][:n])
			}
		}
		for m0 := 0; m0 < d.nMasks; m0 += chunk {
			off, width := bcast64Panel(d.nMasks, d.pixels, simdBlock64, chunk, d.k.lanes, k0, m0)
			w := d.packed[off : off+n*width]
			masks := min(width, d.nMasks-m0)
			v := width / d.k.lanes
			kernels := &d.k.table[v-1]
			nk0, nm0 := k0, m0+chunk
			if nm0 >= d.nMasks {
				nk0, nm0 = k0+simdBlock64, 0
				if nk0 >= d.pixels {
					nk0 = 0
				}
			}
			poff, pwidth := bcast64Panel(d.nMasks, d.pixels, simdBlock64, chunk, d.k.lanes, nk0, nm0)
			pf := d.packed[poff : poff+min(simdBlock64, d.pixels-nk0)*pwidth]
			perCall := d.k.framesFor(v)
			calls := (frames + perCall - 1) / perCall
			for f0 := 0; f0 < frames; f0 += perCall {
				nf := min(perCall, frames-f0)
				_ = base[(f0+nf-1)*stride+n-1] // every frame of the call is inside base
				q := len(pf) * (f0 / perCall) / calls
				kernels[nf-1](&base[f0*stride], 8*stride, n, &w[0], &pf[q], &d.out[0])
				for i := range nf {
					dst := acc[(f0+i)*d.nMasks+m0:][:masks]
					for m, s := range d.out[i*width:][:masks] {
						dst[m] += s
					}
				}
			}
		}
	}
}

// convert writes src, converted to float64, into dst[:len(src)]: the first len(src)
// rounded down to 8 pixels through the SIMD conversion kernel where there is one.
func (d *simdDense64[N]) convert(dst []float64, src []N) {
	dst = dst[:len(src)]
	i := 0
	if n := len(src) &^ 7; n > 0 && d.cvt != nil {
		d.cvt(&dst[0], &src[0], n)
		i = n
	}
	convert(dst[i:], src[i:])
}

// packBcast64 returns stack s (its float32 weights plus their Lo parts, in float64) laid
// out for the float64 broadcast kernels: block by block of block pixels, in each block
// panel by panel of chunk masks (the last panel narrower, its width rounded up to lanes
// with zero weights), in each panel pixel by pixel the weights of the panel's masks
// (bcast64Panel gives the place of a panel). It holds (s.N rounded up to lanes) × pixels
// float64s.
func packBcast64(s *masks.Stack, block, chunk, lanes int) []float64 {
	nMasks, pixels := s.N, s.Pixels()
	p := make([]float64, lanesUp(nMasks, lanes)*pixels)
	for k0 := 0; k0 < pixels; k0 += block {
		n := min(block, pixels-k0)
		for m0 := 0; m0 < nMasks; m0 += chunk {
			off, width := bcast64Panel(nMasks, pixels, block, chunk, lanes, k0, m0)
			for j := range min(width, nMasks-m0) {
				row := (m0+j)*pixels + k0
				hi := s.Data[row:][:n]
				for i, v := range hi {
					p[off+i*width+j] = float64(v)
				}
				if s.Lo != nil {
					for i, v := range s.Lo[row:][:n] {
						p[off+i*width+j] += float64(v)
					}
				}
			}
		}
	}
	return p
}

// bcast64Panel returns the offset (float64s) and width (masks: a multiple of lanes, at
// most chunk) of the panel of masks from m0 (a multiple of chunk) at pixel k0 (a multiple
// of block) in packBcast64's layout; the panel holds min(block, pixels-k0) × width values.
func bcast64Panel(nMasks, pixels, block, chunk, lanes, k0, m0 int) (off, width int) {
	padded := lanesUp(nMasks, lanes)
	return k0*padded + m0*min(block, pixels-k0), min(chunk, padded-m0)
}

// bcast64Bytes is the size of a stack of nMasks masks of pixels pixels packed by
// packBcast64 for k.
func bcast64Bytes(k *bcast64Kernels, nMasks, pixels int) int64 {
	return 8 * int64(lanesUp(nMasks, k.lanes)) * int64(pixels)
}

// lanesUp is nMasks rounded up to a multiple of lanes: the masks of packBcast64's layout,
// the last panel padded with zero weights.
func lanesUp(nMasks, lanes int) int { return (nMasks + lanes - 1) / lanes * lanes }
