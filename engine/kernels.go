package engine

import (
	"math"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/stemdot/stemdot/masks"
)

// gonum's [SD]gemm splits C into 64×64 blocks and runs them on new goroutines once there
// are at least 4 blocks (blockSize and minParBlock in gonum.org/v1/gonum/blas/gonum). The
// dense kernel calls Gemm on at most gemmRows frames × gemmMasks masks: 3×1 blocks, so
// every call runs serially on the worker's pinned thread.
const (
	gemmRows  = 192
	gemmMasks = 64
	// pixelChunk is the number of pixels of each frame converted to float and multiplied
	// at once: the masks' chunk (≤ gemmMasks × pixelChunk floats) stays in L2 while
	// every frame of the tile passes over it, and each frame's chunk stays in L1 while
	// it meets every mask. Measured on 256×256 uint16 frames with 4 and 16 masks, 2048
	// was 5-10% faster than 1024 or 4096, 20% faster than 8192.
	pixelChunk = 2048
)

// native are the pixel types a dataset delivers.
type native interface {
	uint8 | uint16 | uint32 | int8 | int16 | int32 | float32 | float64
}

// float are the types a product is computed in.
type float interface{ float32 | float64 }

// asNative reinterprets b (host byte order, aligned for N) as a slice of N.
func asNative[N native](b []byte) []N {
	if len(b) == 0 {
		return nil
	}
	var zero N
	return unsafe.Slice((*N)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// convert writes src, converted to F, into dst[:len(src)].
func convert[N native, F float](dst []F, src []N) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = F(v)
	}
}

// fused is the kernel for a single dense mask: it converts and multiplies in one pass
// over each frame, without a float copy of the tile. Scalar float64 arithmetic costs the
// same as float32 here, so it is used for both result dtypes: the float64 mask is
// shared by the job's workers.
type fused[N native] struct {
	pixels int
	mask   []float64
}

func (k *fused[N]) apply(tile []byte, frames int, acc []float64) {
	px := asNative[N](tile)
	for f := range frames {
		acc[f] = dotFused(px[f*k.pixels:(f+1)*k.pixels], k.mask)
	}
}

// dotFused returns Σ float64(px[i])·w[i] for len(px) ≤ len(w), with 4 independent
// partial sums so that the adds pipeline. On 256×256 uint16 frames this indexed loop
// (no bounds checks inside) ran at 5.3 GB/s per core, 13% faster than a loop re-slicing
// its inputs, 20% faster than converting to float32 and calling blas32.Dot.
func dotFused[N native](px []N, w []float64) float64 {
	w = w[:len(px)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(px); i += 4 {
		p, q := px[i:i+4:i+4], w[i:i+4:i+4]
		s0 += float64(p[0]) * q[0]
		s1 += float64(p[1]) * q[1]
		s2 += float64(p[2]) * q[2]
		s3 += float64(p[3]) * q[3]
	}
	for ; i < len(px); i++ {
		s0 += float64(px[i]) * w[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dense is the kernel for several dense masks: each frame's pixels are converted to F a
// chunk at a time and multiplied by the masks' chunk with Gemm; chunk sums are added in
// float64.
type dense[N native, F float] struct {
	masks          []F // nMasks × pixels
	nMasks, pixels int
	a              []F // float tile: min(tileFrames, gemmRows) × pixelChunk
	c              []F // Gemm result: min(tileFrames, gemmRows) × gemmMasks
	gemm           func(rows, n, k int, a, b []F, ldb int, c []F)
}

func newDense[N native, F float](m []F, nMasks, pixels, tileFrames int, gemm func(rows, n, k int, a, b []F, ldb int, c []F)) *dense[N, F] {
	rows := min(tileFrames, gemmRows)
	return &dense[N, F]{
		masks:  m,
		nMasks: nMasks,
		pixels: pixels,
		a:      make([]F, rows*min(pixelChunk, pixels)),
		c:      make([]F, rows*min(gemmMasks, nMasks)),
		gemm:   gemm,
	}
}

func (d *dense[N, F]) apply(tile []byte, frames int, acc []float64) {
	px := asNative[N](tile)
	acc = acc[:frames*d.nMasks]
	clear(acc)
	for r0 := 0; r0 < frames; r0 += gemmRows {
		rows := min(gemmRows, frames-r0)
		for k0 := 0; k0 < d.pixels; k0 += pixelChunk {
			k := min(pixelChunk, d.pixels-k0)
			a := d.a[:rows*k]
			for r := range rows {
				convert(a[r*k:(r+1)*k], px[(r0+r)*d.pixels+k0:][:k])
			}
			for m0 := 0; m0 < d.nMasks; m0 += gemmMasks {
				n := min(gemmMasks, d.nMasks-m0)
				c := d.c[:rows*n]
				d.gemm(rows, n, k, a, d.masks[m0*d.pixels+k0:], d.pixels, c)
				for r := range rows {
					dst := acc[(r0+r)*d.nMasks+m0:][:n]
					for j, v := range c[r*n : (r+1)*n] {
						dst[j] += float64(v)
					}
				}
			}
		}
	}
}

// gemm32 sets c (rows × n, row stride n) to a·bᵀ, with a rows × k (stride k) and b
// n × k (stride ldb), through gonum's blas32.
func gemm32(rows, n, k int, a, b []float32, ldb int, c []float32) {
	blas32.Gemm(blas.NoTrans, blas.Trans, 1,
		blas32.General{Rows: rows, Cols: k, Stride: k, Data: a},
		blas32.General{Rows: n, Cols: k, Stride: ldb, Data: b},
		0, blas32.General{Rows: rows, Cols: n, Stride: n, Data: c})
}

// gemm64 is gemm32 in float64, through blas64.
func gemm64(rows, n, k int, a, b []float64, ldb int, c []float64) {
	blas64.Gemm(blas.NoTrans, blas.Trans, 1,
		blas64.General{Rows: rows, Cols: k, Stride: k, Data: a},
		blas64.General{Rows: n, Cols: k, Stride: ldb, Data: b},
		0, blas64.General{Rows: rows, Cols: n, Stride: n, Data: c})
}

// useSIMD switches the block kernels (simdKernels) on; tests and benchmarks turn it off
// to run the pure-Go kernels on the same machine.
var useSIMD = true

// simdBlock pixels × simdGroup float32 masks = 32 KiB: one group's weights stay in a
// core's L1 data cache while every frame of the tile passes over them. With the whole
// stack's block in L2 instead (2048 pixels, all masks per frame), 16 masks ran at 2.3 GB/s
// per core, against memory speed for 1 and 4 masks: the weights' L2 traffic bounded it.
const (
	simdBlock = 1024
	simdGroup = 8
	// prefetchMasks is the largest stack, in float32 weights, that simdDense does not
	// prefetch: 1 MiB, half a core's L2 on the machines measured (2 MiB).
	prefetchMasks = 1 << 18
)

// packedKernel sets out[M·f+m] = Σ_{i<n} float32(px_f[i])·w_m[i] for its F frames px_f
// (F = 1, 2 or 3; the pointers past F are ignored) and M masks of a packed group
// (packMasks) at w: the group's first M masks (w at the group's block), or with M = 4
// also its last 4 (w 64 floats further). It prefetches 8·n bytes from pf into L2 (an x86
// prefetch never faults: it may run past the end of pf's slice). n ≥ 1 is any pixel
// count for kernels with tails, else a positive multiple of 16. The amd64 assembly
// kernels (simd_packed_amd64.s) implement it with AVX-512 (M = 8) and AVX2+FMA (M = 4).
type packedKernel[N native] func(px0, px1, px2 *N, n int, w *float32, pf *float32, out *float32)

// bcastKernel sets out[16v·f+m] = Σ_{i<n} px_f[i]·w[16v·i+m] for its F frames px_f (frame
// f at px plus f·stride bytes) and the 16v masks of a broadcast panel (packBcast) at w,
// in float32: one 16-lane accumulator per frame and 16 masks, each pixel of a frame
// broadcast to 16 lanes, each vector of weights loaded once for the F frames (the GEMM
// way: no sums across lanes). n ≥ 1 is any pixel count; the kernel reads no frame byte
// past px_f + 4n. Every 4 pixels it prefetches three 64-byte lines from pf into L2 (an
// x86 prefetch never faults). The amd64 assembly kernels (simd_bcast_amd64.s, written by
// gen_bcast.go) implement it with AVX-512 for v = 1..bcastVectors and F = 1 to
// bcastFramesFor(v).
type bcastKernel func(px *float32, stride, n int, w, pf, out *float32)

// bcastFrames is the most frames of a broadcast kernel call, and bcastFramesFor(v) that
// for v vectors of 16 masks: at most 24 accumulators of the 32 ZMM registers, the other 8
// for the weights and the broadcast pixels; 4 registers of frame bases, 3 frames each.
const bcastFrames = 12

func bcastFramesFor(v int) int { return min(bcastFrames, 24/v) }

// packedKernels are the packed kernels for pixel type N, for 1, 2 and 3 frames.
type packedKernels[N native] struct {
	frames [3]packedKernel[N]
	masks  int  // M: masks per call
	tails  bool // any n (else multiples of 16, the rest through addTail)
}

// blockKernel sets out[m] = Σ_{i<n} float32(px[i])·w[m·ldw+i] for each mask m of its
// group, in float32; n is a positive multiple of 16. The kernels for 2 or more masks
// also prefetch the 4·n bytes from pf into L2, one 64-byte line per 16 pixels (an x86
// prefetch never faults, so they may run past the end of pf's slice); the 1-mask
// kernels, which run with few loads per pixel (a 1-mask stack, 1 mask left over in a
// group), do not: on float32 frames in L2 the prefetch made them 4% slower. The amd64
// assembly kernels (simd_amd64.s) implement it with AVX2 and FMA.
type blockKernel[N native] func(px *N, n int, w *float32, ldw int, pf *float32, out *float32)

// pairKernel is blockKernel for 4 masks and two frames px0 and px1: it sets
// out[4f+m] = Σ_{i<n} float32(px_f[i])·w[m·ldw+i] for f < 2, m < 4. Each weight vector
// it loads serves both frames, which halves the weight loads per multiply-add.
type pairKernel[N native] func(px0, px1 *N, n int, w *float32, ldw int, pf *float32, out *float32)

// quadKernel is blockKernel for 1 mask and four frames px0..px3: it sets
// out[f] = Σ_{i<n} float32(px_f[i])·w[i] for f < 4. Each weight vector it loads serves
// the four frames, and the four frames' streams are in flight at once: on float32 frames
// in place (one Zen 4 core) a probe of this loop ran at 0.86-0.89 of the in-place sweep,
// the one-frame loop at 0.69-0.72.
type quadKernel[N native] func(px0, px1, px2, px3 *N, n int, w *float32, out *float32)

// quad2Kernel is quadKernel for 2 masks (rows w and w+ldw): it sets
// out[2f+m] = Σ_{i<n} float32(px_f[i])·w[m·ldw+i] for f < 4, m < 2.
type quad2Kernel[N native] func(px0, px1, px2, px3 *N, n int, w *float32, ldw int, out *float32)

// groupKernels are the block kernels for pixel type N: for groups of 1, 2, 4 and 8
// masks of one frame, for 4 masks of two frames and for 1 and 2 masks of four frames.
// Stacks of at most quadMasks masks take the quad kernels (quadFrames), larger ones the
// others: 2, or packedMinMasks-1 for float32 frames with the AVX-512 quad kernels. One
// Zen 4 core, float32 frames in place, ×floor of make bench's rows, pair kernels against
// quad kernels: 3 masks 0.74-0.81 → 0.85-0.89 (4 pairs), 4 masks 0.74-0.83 → 0.79-0.96
// (8), 5 masks 0.62-0.73 → 0.71-0.73 (2), 6 masks 0.56-0.62 → 0.66-0.73 (3), 7 masks
// 0.44 → 0.55-0.57 (2).
type groupKernels[N native] struct {
	group     [4]blockKernel[N]
	pair      pairKernel[N]
	quad      quadKernel[N]
	quad2     quad2Kernel[N]
	quadMasks int
}

// simdDense is the float32 dense kernel on the block kernels: for each block of
// simdBlock pixels and each group of at most simdGroup masks, every frame of the tile
// meets the group's block of weights (at most 32 KiB, so it stays in L1 while the tile's
// frames pass over it). With at least packedMinMasks masks and packed kernels for N, each
// whole group of 8 masks goes through the register-blocked packed kernels (packedGroup),
// 3 frames at a time; else, and for the masks left over, two frames at a time against 4
// masks, the rest and an odd last frame 8, 4, 2 or 1 masks per kernel call. A stack of
// at most kernels.quadMasks masks (2; 7 for float32 frames on AVX-512) goes through the
// quad kernels instead, four frames at a time (quadFrames). The float32
// partial sums of a block are added in float64, which bounds the float32 rounding error
// to that of simdBlock-pixel sums. Float32 frames with at least bcastMinMasks masks take
// the broadcast kernels instead (applyBcast), on CPUs with AVX-512.
//
// The stack's weights (nMasks × pixels × 4 bytes: 16 MiB for 64 masks of 256×256) do
// not fit in L2, so each group's block comes from L3 or memory once per tile, and the
// hardware prefetchers stop at its 4 KiB pages. While the tile passes over one group,
// each kernel call therefore prefetches a part of the next group's block (the first
// group again after the last, for the next tile). On 256×256 uint16 frames (8 per
// tile) this made 16 and 64 masks 15-20% faster. Stacks of at most prefetchMasks floats
// stay in L2 between tiles; there the kernels "prefetch" the group they work on, already
// in L1: with 1 mask, streaming frames in place, the L2 prefetches cost 7%.
type simdDense[N native] struct {
	masks          []float32 // nMasks × pixels
	nMasks, pixels int
	kernels        *groupKernels[N]
	part           []float32 // block partial sums: max(nMasks, 24); 24·16 for bk
	packed         []float32 // packMasks(masks), packBcast(masks) when bk is set, or nil
	pk             *packedKernels[N]
	bk             *[bcastVectors][bcastFrames]bcastKernel
	// outMasks, when not 0, is the stack's number of masks, to which a zero mask was
	// added (nMasks = outMasks+1, masks copied) so that every mask meets the pair kernel;
	// padded holds the padded rows of a tile.
	outMasks int
	padded   []float64
	// odd, when set (simdGroup sums), pairs a tile's odd last frame with itself (odd takes
	// the other frame's sums, discarded), so that every frame meets the pair kernels: a
	// frame's sums then do not depend on where the run's claims cut the tiles. Set for jobs
	// whose tiles hold 2 or more frames; with 1-frame tiles every frame takes the one-frame
	// kernels.
	odd []float64
}

// packedMinMasks is the least number of masks that take the packed kernels (whole
// groups of 8). Measured with BenchmarkSIMDDense (256×256 uint16 frames, 64-frame tiles,
// one Zen 4 core of 118 GFLOP/s peak, best of 10 runs on a shared machine), in GFLOP/s,
// packed against the 4-mask × 2-frame kernels: AVX-512, 8 masks 93 / 55, 16 masks 92 /
// 60, 64 masks 85 / 64; AVX2 (GODEBUG=cpu.avx512f=off), 16 masks 51-61 / 39-43, 64
// masks 70-74 / 31-46. With 1 to 4 masks the frames' reading bounds the old kernels.
const packedMinMasks = 8

// newSIMDDense returns the kernel for stack m; pack returns the stack packed by the
// packer it is given (shared by a job's workers: Job.packedMasks), or is nil to pack here.
func newSIMDDense[N native](m []float32, nMasks, pixels int, kernels *groupKernels[N], pack func(packer) []float32) *simdDense[N] {
	d := &simdDense[N]{masks: m, nMasks: nMasks, pixels: pixels, kernels: kernels}
	if pack == nil {
		pack = func(p packer) []float32 { return p(m, nMasks, pixels) }
	}
	if bk := bcastKernelsFor[N](); bk != nil && nMasks >= bcastMinMasks {
		d.bk = bk
		d.packed = pack(packBcast)
		d.part = make([]float32, 24*16) // 24 accumulators of 16 masks
		return d
	}
	if pk := packedKernelsFor[N](); pk != nil && nMasks >= packedMinMasks {
		d.pk = pk
		d.packed = pack(packMasks)
	}
	if padded(nMasks, int(unsafe.Sizeof(*new(N)))) {
		// 3 or 7 masks of 8- or 16-bit frames: a zero mask makes the last 3 a group of 4
		// for the pair kernel (one pass over the frames, where the 2- and 1-mask kernels
		// took two). One core, 256×256 uint16 frames in place: 3 masks 12.0-14.7 →
		// 20.0-21.4 GB/s, 7 masks 9.3-10.2 → 11.3-12.3 (3 pairs); float32 frames were
		// slower padded (3 masks 22.4-25.1 → 20.1-20.6).
		d.outMasks, d.nMasks = nMasks, nMasks+1
		d.masks = pack(padStack) // shared by the job's workers (256 MiB for 3 masks of 4096×4096)
	}
	d.part = make([]float32, max(d.nMasks, 24))
	return d
}

// packer lays out a stack (nMasks × pixels float32) for a family of kernels.
type packer func(m []float32, nMasks, pixels int) []float32

// padded tells whether a stack of nMasks masks on frames of pixelBytes-byte pixels gets a
// zero mask added for the pair kernel (newSIMDDense): 3 or 7 masks of 8- or 16-bit frames.
func padded(nMasks, pixelBytes int) bool {
	return nMasks < packedMinMasks && nMasks%4 == 3 && pixelBytes <= 2
}

// padStack returns stack m with a zero mask added after its nMasks masks.
func padStack(m []float32, nMasks, pixels int) []float32 {
	p := make([]float32, (nMasks+1)*pixels)
	copy(p, m)
	return p
}

func (d *simdDense[N]) apply(tile []byte, frames int, acc []float64) {
	if d.bk != nil {
		d.applyBcast(asNative[float32](tile), frames, acc)
		return
	}
	if d.outMasks == 0 {
		d.applyTile(tile, frames, acc)
		return
	}
	// A padded stack: the rows of its nMasks, the zero mask's dropped.
	if n := frames * d.nMasks; len(d.padded) < n {
		d.padded = make([]float64, n)
	}
	d.applyTile(tile, frames, d.padded)
	for f := range frames {
		copy(acc[f*d.outMasks:(f+1)*d.outMasks], d.padded[f*d.nMasks:])
	}
}

func (d *simdDense[N]) applyTile(tile []byte, frames int, acc []float64) {
	px := asNative[N](tile)
	acc = acc[:frames*d.nMasks]
	clear(acc)
	packedMasks := 0
	if d.pk != nil {
		packedMasks = d.nMasks / packGroup * packGroup
	}
	for k0 := 0; k0 < d.pixels; k0 += simdBlock {
		n := min(simdBlock, d.pixels-k0)
		for g := range packedMasks / packGroup {
			d.packedGroup(px, frames, k0, n, g, acc)
		}
		for m0 := packedMasks; m0 < d.nMasks; m0 += simdGroup {
			nm := min(simdGroup, d.nMasks-m0)
			w := d.masks[m0*d.pixels+k0:]
			if d.nMasks <= d.kernels.quadMasks {
				d.quadFrames(px, frames, k0, n, w, acc)
				continue
			}
			pf := &prefetcher{w: w, ldw: d.pixels, rows: nm} // in L1 already: no traffic
			// (After packed groups, the next group is packed: their calls prefetch it.)
			if len(d.masks) > prefetchMasks && packedMasks == 0 {
				nk0, nm0 := nextStart(k0, m0, simdGroup, d.nMasks, d.pixels)
				pf = &prefetcher{w: d.masks[nm0*d.pixels+nk0:], ldw: d.pixels, rows: min(simdGroup, d.nMasks-nm0)}
			}
			f := 0
			if nm >= 4 { // else no pair kernel applies
				for ; f+2 <= frames; f += 2 {
					dotPair(d.kernels, px[f*d.pixels+k0:][:n], px[(f+1)*d.pixels+k0:][:n], w, d.pixels, pf,
						acc[f*d.nMasks+m0:][:nm], acc[(f+1)*d.nMasks+m0:][:nm], d.part)
				}
				if f < frames && d.odd != nil {
					frame := px[f*d.pixels+k0:][:n]
					dotPair(d.kernels, frame, frame, w, d.pixels, pf, acc[f*d.nMasks+m0:][:nm], d.odd[:nm], d.part)
					f++
				}
			}
			for ; f < frames; f++ {
				dotBlock(d.kernels, px[f*d.pixels+k0:][:n], w, d.pixels, pf, acc[f*d.nMasks+m0:][:nm], d.part)
			}
		}
	}
}

// quadFrames adds the products of pixels [k0, k0+n) of every frame of the tile px with
// the stack's masks (w: their weights from pixel k0) into acc, four frames per call of
// the quad kernels, two masks per call (quad2) and one for an odd last mask (quad); the
// last call of a tile of fewer frames repeats its last frame (the repeats' sums are
// dropped), so that every frame's sums take the same path wherever the run's claims cut
// the tiles.
func (d *simdDense[N]) quadFrames(px []N, frames, k0, n int, w []float32, acc []float64) {
	kn, nm := n&^15, d.nMasks
	part := d.part[:8]
	_ = w[(nm-1)*d.pixels+n-1]
	for f := 0; f < frames; f += 4 {
		nf := min(4, frames-f)
		_ = px[(f+nf-1)*d.pixels+k0+n-1] // every frame's block is inside px
		var p [4]*N
		for i := range p {
			p[i] = &px[(f+min(i, nf-1))*d.pixels+k0]
		}
		for m0 := 0; m0 < nm && kn > 0; m0 += 2 {
			mc := min(2, nm-m0) // masks of this call
			if mc == 1 {
				d.kernels.quad(p[0], p[1], p[2], p[3], kn, &w[m0*d.pixels], &part[0])
			} else {
				d.kernels.quad2(p[0], p[1], p[2], p[3], kn, &w[m0*d.pixels], d.pixels, &part[0])
			}
			for i := range nf {
				for m, v := range part[i*mc : (i+1)*mc] {
					acc[(f+i)*nm+m0+m] += float64(v)
				}
			}
		}
		for i := range nf {
			addTail(px[(f+i)*d.pixels+k0:][:n], w, d.pixels, acc[(f+i)*nm:][:nm])
		}
	}
}

// packedGroup adds the products of pixels [k0, k0+n) of every frame of the tile px with
// the 8 masks of packed group g into acc, through the packed kernels: 3 frames per call
// (1 or 2 for the last), 8 masks per call (ZMM) or 4 (YMM, twice). Each call prefetches a
// quarter of the next group's packed block, the calls of a group taking turns.
func (d *simdDense[N]) packedGroup(px []N, frames, k0, n, g int, acc []float64) {
	off, size := packedBlock(d.nMasks, d.pixels, k0, g)
	w := d.packed[off : off+size]
	pf := w // a stack that stays in L2: prefetch the group in use (no traffic)
	if len(d.masks) > prefetchMasks {
		nk0, nm0 := nextStart(k0, g*packGroup, packGroup, d.nMasks/packGroup*packGroup, d.pixels)
		noff, nsize := packedBlock(d.nMasks, d.pixels, nk0, nm0/packGroup)
		pf = d.packed[noff : noff+nsize]
	}
	kn := n // pixels through the kernels
	if !d.pk.tails {
		kn = n &^ 15
	}
	mpc := d.pk.masks // masks per call
	part := d.part[:3*mpc]
	call := 0
	for f := 0; f < frames; {
		nf := min(3, frames-f)
		var p [3]*N
		for i := range p {
			p[i] = &px[(f+min(i, nf-1))*d.pixels+k0]
		}
		_ = px[(f+nf)*d.pixels-1] // every frame of the call is inside px
		for h := 0; h < packGroup && kn > 0; h += mpc {
			q := len(pf) / 4 * (call % 4)
			call++
			d.pk.frames[nf-1](p[0], p[1], p[2], kn, &w[h*16], &pf[q], &part[0])
			for i := range nf {
				dst := acc[(f+i)*d.nMasks+g*packGroup+h:][:mpc]
				for m, v := range part[i*mpc : (i+1)*mpc] {
					dst[m] += float64(v)
				}
			}
		}
		if kn < n {
			m := d.masks[g*packGroup*d.pixels+k0:]
			for i := range nf {
				addTail(px[(f+i)*d.pixels+k0:][:n], m, d.pixels, acc[(f+i)*d.nMasks+g*packGroup:][:packGroup])
			}
		}
		f += nf
	}
}

// bcastMinMasks is the least number of masks that take the broadcast kernels, and
// bcastChunk the most masks of one call. Measured on 32 float32 frames of 256×256 in
// memory (one Zen 4 core of 118 GFLOP/s, a shared VM), in GFLOP/s, broadcast (panels of
// up to 32 masks) against packed kernels: 16 masks 54-56 / 66-72 (16-mask panels: 12
// broadcasts per 12 FMAs), 24 masks 57-59 / 66-69, 32 masks 78-84 / 64-72, 64 masks
// 72-84 / 65-70, 128 masks 75-85 / 70-71. Panels of up to 64 masks (6 frames × 4 vectors:
// 4 weight loads and 6 broadcasts per 24 FMAs, not 2 and 12) against panels of 32, two
// runs each: 48 masks 97 / 72-82, 64 masks 91-94 / 75-88, 128 masks 92-95 / 84-93.
const (
	bcastMinMasks = 32
	bcastChunk    = 64
	bcastVectors  = bcastChunk / 16
)

// applyBcast is apply through the broadcast kernels: for each block of simdBlock pixels
// and each panel of at most bcastChunk masks (at most 256 KiB, which stays in L2 while
// the tile's frames pass over it), up to bcastFramesFor(v) frames per call; the calls of a
// panel share the prefetching of the next panel (a stack of 64 masks streams 16 MiB from
// L3 or memory per tile). As in apply, the float32 sums of a block are added in float64.
func (d *simdDense[N]) applyBcast(px []float32, frames int, acc []float64) {
	acc = acc[:frames*d.nMasks]
	clear(acc)
	out := d.part[:24*16]
	for k0 := 0; k0 < d.pixels; k0 += simdBlock {
		n := min(simdBlock, d.pixels-k0)
		for m0 := 0; m0 < d.nMasks; m0 += bcastChunk {
			off, width := bcastPanel(d.nMasks, d.pixels, k0, m0)
			w := d.packed[off : off+n*width]
			masks := min(width, d.nMasks-m0)
			kernels := &d.bk[width/16-1]
			pf := d.nextPanel(k0, m0)
			perCall := bcastFramesFor(width / 16)
			calls := (frames + perCall - 1) / perCall
			for f0 := 0; f0 < frames; f0 += perCall {
				nf := min(perCall, frames-f0)
				_ = px[(f0+nf-1)*d.pixels+k0+n-1] // every frame of the call is inside px
				q := len(pf) * (f0 / perCall) / calls
				kernels[nf-1](&px[f0*d.pixels+k0], 4*d.pixels, n, &w[0], &pf[q], &out[0])
				for i := range nf {
					dst := acc[(f0+i)*d.nMasks+m0:][:masks]
					for m, v := range out[i*width:][:masks] {
						dst[m] += float64(v)
					}
				}
			}
		}
	}
}

// nextStart is the group after masks [m0, m0+step) of the pixel block at k0, in the
// order the kernels walk a stack (groups of step masks up to limit within a block of
// simdBlock pixels, block after block): the next group of the block, else the first of
// the next block, else (for the next tile) the first of the first block. The kernels
// prefetch it while they work on (k0, m0).
func nextStart(k0, m0, step, limit, pixels int) (int, int) {
	switch {
	case m0+step < limit:
		return k0, m0 + step
	case k0+simdBlock < pixels:
		return k0 + simdBlock, 0
	}
	return 0, 0
}

// nextPanel returns the panel to prefetch while the tile passes over the panel of masks
// m0 at pixel k0: the next panel, else the next block's first, else (for the next tile)
// the first.
func (d *simdDense[N]) nextPanel(k0, m0 int) []float32 {
	k0, m0 = nextStart(k0, m0, bcastChunk, d.nMasks, d.pixels)
	off, width := bcastPanel(d.nMasks, d.pixels, k0, m0)
	return d.packed[off : off+min(simdBlock, d.pixels-k0)*width]
}

// packBcast returns stack m (nMasks × pixels) laid out for the broadcast kernels: block
// by block of simdBlock pixels, in each block panel by panel of bcastChunk masks (the
// last panel 16, 32, 48 or 64 masks wide, zero-padded to 16), in each panel pixel by
// pixel the weights of the panel's masks (bcastPanel gives the place of a panel).
func packBcast(m []float32, nMasks, pixels int) []float32 {
	p := make([]float32, (nMasks+15)&^15*pixels)
	for k0 := 0; k0 < pixels; k0 += simdBlock {
		n := min(simdBlock, pixels-k0)
		for m0 := 0; m0 < nMasks; m0 += bcastChunk {
			off, width := bcastPanel(nMasks, pixels, k0, m0)
			for j := range min(width, nMasks-m0) {
				w := m[(m0+j)*pixels+k0:][:n]
				for i, v := range w {
					p[off+i*width+j] = v
				}
			}
		}
	}
	return p
}

// bcastPanel returns the offset (floats) and width (masks: 16, 32, 48 or 64) of the
// panel of masks from m0 (a multiple of bcastChunk) at pixel k0 (a multiple of simdBlock)
// in packBcast's layout; the panel holds min(simdBlock, pixels-k0) × width floats.
func bcastPanel(nMasks, pixels, k0, m0 int) (off, width int) {
	padded := (nMasks + 15) &^ 15
	return k0*padded + m0*min(simdBlock, pixels-k0), min(bcastChunk, padded-m0)
}

// packGroup is the number of masks of a packed group.
const packGroup = 8

// packMasks returns the whole groups of 8 masks of stack m (nMasks × pixels) packed for
// the packed kernels: block by block of simdBlock pixels, in each block group by group,
// in each group 16-pixel step by step the 16 weights of each of the 8 masks in turn (one
// 64-byte vector per mask and step), zero-padded to a whole step (packedBlock gives the
// place of a block's group). The masks past the last whole group are left out.
func packMasks(m []float32, nMasks, pixels int) []float32 {
	groups := nMasks / packGroup
	if groups == 0 {
		return nil
	}
	last := pixels - (pixels-1)/simdBlock*simdBlock
	total := (pixels-last)*packGroup*groups + (last+15)&^15*packGroup*groups
	p := make([]float32, total)
	for k0 := 0; k0 < pixels; k0 += simdBlock {
		n := min(simdBlock, pixels-k0)
		for g := range groups {
			off, _ := packedBlock(nMasks, pixels, k0, g)
			for i := range n {
				s, l := i/16, i%16
				for j := range packGroup {
					p[off+s*16*packGroup+j*16+l] = m[(g*packGroup+j)*pixels+k0+i]
				}
			}
		}
	}
	return p
}

// packedBlock returns the offset and length (floats) of group g's block at pixel k0 (a
// multiple of simdBlock) in packMasks's layout.
func packedBlock(nMasks, pixels, k0, g int) (off, size int) {
	size = (min(simdBlock, pixels-k0) + 15) &^ 15 * packGroup
	return k0*packGroup*(nMasks/packGroup) + g*size, size
}

// prefetcher hands the block kernels the rows (masks) of a group's weight block to
// prefetch, one row per call, cycling through its rows.
type prefetcher struct {
	w              []float32 // row r starts at w[r·ldw]
	ldw, rows, row int
}

func (p *prefetcher) next() *float32 {
	r := p.row
	if p.row++; p.row == p.rows {
		p.row = 0
	}
	return &p.w[r*p.ldw]
}

// dotBlock adds Σ_i float64(px[i])·w[m·ldw+i] into acc[m] for every mask m < len(acc):
// the first len(px) rounded down to 16 pixels through the block kernels in float32
// (len(px) ≤ simdBlock keeps their rounding error small), the rest in float64. part
// holds len(acc) float32s of scratch; pf gives the kernels the weights to prefetch.
func dotBlock[N native](k *groupKernels[N], px []N, w []float32, ldw int, pf *prefetcher, acc []float64, part []float32) {
	nm := len(acc)
	_ = w[(nm-1)*ldw+len(px)-1] // every mask's block is inside w
	if n := len(px) &^ 15; n > 0 {
		part = part[:nm]
		for m0 := 0; m0 < nm; {
			g := 3 // group of 1<<g masks: the largest that fits
			for 1<<g > nm-m0 {
				g--
			}
			wm := &w[m0*ldw]
			pfm := wm // the 1-mask kernels do not prefetch
			if g > 0 {
				pfm = pf.next()
			}
			k.group[g](&px[0], n, wm, ldw, pfm, &part[m0])
			m0 += 1 << g
		}
		for m, v := range part {
			acc[m] += float64(v)
		}
	}
	addTail(px, w, ldw, acc)
}

// dotPair is dotBlock for two frames' blocks px0 and px1 of the same length: each
// 4 masks through the pair kernel, the masks left over through dotBlock. part holds
// max(len(acc0), 8) float32s of scratch.
func dotPair[N native](k *groupKernels[N], px0, px1 []N, w []float32, ldw int, pf *prefetcher, acc0, acc1 []float64, part []float32) {
	nm := len(acc0)
	m0 := 0
	if n := len(px0) &^ 15; n > 0 && nm >= 4 {
		px1 = px1[:len(px0)]
		acc1 = acc1[:nm]
		_ = w[(nm-1)*ldw+len(px0)-1] // every mask's block is inside w
		for ; m0+4 <= nm; m0 += 4 {
			k.pair(&px0[0], &px1[0], n, &w[m0*ldw], ldw, pf.next(), &part[0])
			for m := range 4 {
				acc0[m0+m] += float64(part[m])
				acc1[m0+m] += float64(part[4+m])
			}
		}
		addTail(px0, w, ldw, acc0[:m0])
		addTail(px1, w, ldw, acc1[:m0])
	}
	if m0 < nm {
		dotBlock(k, px0, w[m0*ldw:], ldw, pf, acc0[m0:], part)
		dotBlock(k, px1, w[m0*ldw:], ldw, pf, acc1[m0:], part)
	}
}

// addTail adds the products of the pixels past the last multiple of 16 in px, which the
// block kernels leave out, into acc in float64: acc[m] += Σ_i float64(px[i])·w[m·ldw+i].
func addTail[N native](px []N, w []float32, ldw int, acc []float64) {
	for i := len(px) &^ 15; i < len(px); i++ {
		p := float64(px[i])
		for m := range acc {
			acc[m] += p * float64(w[m*ldw+i])
		}
	}
}

// sparse is the kernel for a CSR stack: each mask's nonzero pixels are gathered from the
// native frame and summed in float64 (the float32 weights are exact in float64), or, for
// a mask whose nonzeros are at least spanDensity of the pixels between its first and its
// last (a disk, an annulus: rows of the frame), its weights over that span are applied
// dense through the SIMD block kernels, as simdDense applies a stack. A gather costs a
// few cycles per nonzero, the block kernels a fraction of a cycle per pixel.
type sparse[N native] struct {
	nMasks, pixels int
	rowPtr, col    []int32
	val            []float64
	// spans[m] is mask m's dense span, or nil where it is gathered; kernels, part and pf
	// serve the spans (nil without spans).
	spans   []*maskSpan
	kernels *groupKernels[N]
	part    []float32
	sum     []float64 // one float64: span's sum
}

// maskSpan is a mask's weights over pixels [lo, lo+len(w)), zeros included.
type maskSpan struct {
	lo int
	w  []float32
	pf prefetcher // unused by the 1-mask kernels, which do not prefetch
}

// spanDensity is the least fraction of nonzero pixels in a mask's span for the sparse
// kernel to apply the span dense. On 256×256 uint16 frames (one Zen 4 core, frames in L2)
// the gather took ~5.5 cycles per nonzero and the 1-mask block kernel ~0.3 cycles per
// pixel: dense wins above ~6%; the annulus of the benchmark (60 < r ≤ 72 px) has 13.5%.
const spanDensity = 0.08

// newSparse returns the kernel for c. kernels, when not nil (float32 results on a CPU with
// the SIMD block kernels), applies the spans of masks dense enough in them; only for
// weights exact in float32 (c.Lo nil): the block kernels multiply in float32.
func newSparse[N native](c *masks.CSR, kernels *groupKernels[N]) *sparse[N] {
	s := &sparse[N]{nMasks: c.N, pixels: c.Pixels, rowPtr: c.RowPtr, col: c.Col, val: c.Val64()}
	if kernels == nil || c.Lo != nil {
		return s
	}
	for m := range c.N {
		lo, hi := c.RowPtr[m], c.RowPtr[m+1]
		if hi-lo < 16 {
			continue
		}
		first, last := int(c.Col[lo]), int(c.Col[hi-1])
		if float64(hi-lo) < spanDensity*float64(last-first+1) {
			continue
		}
		if s.spans == nil {
			s.spans, s.kernels, s.part, s.sum = make([]*maskSpan, c.N), kernels, make([]float32, 1), make([]float64, 1)
		}
		sp := &maskSpan{lo: first, w: make([]float32, last-first+1)}
		sp.pf = prefetcher{w: sp.w, ldw: len(sp.w), rows: 1}
		for k := lo; k < hi; k++ {
			sp.w[int(c.Col[k])-first] = c.Val[k]
		}
		s.spans[m] = sp
	}
	return s
}

func (s *sparse[N]) apply(tile []byte, frames int, acc []float64) {
	px := asNative[N](tile)
	for f := range frames {
		frame := px[f*s.pixels : (f+1)*s.pixels]
		for m := range s.nMasks {
			lo, hi := s.rowPtr[m], s.rowPtr[m+1]
			if s.spans != nil && s.spans[m] != nil {
				// A pixel outside the mask but in its span that is NaN or ±Inf (a float
				// frame), or a float32 product that overflows, makes the sum non-finite:
				// such a sum is gathered again, exactly as a mask's nonzeros alone give it.
				if v := s.span(frame, s.spans[m]); !math.IsNaN(v) && !math.IsInf(v, 0) {
					acc[f*s.nMasks+m] = v
					continue
				}
			}
			acc[f*s.nMasks+m] = gather(frame, s.col[lo:hi], s.val[lo:hi])
		}
	}
}

// span returns Σ frame[sp.lo+i]·sp.w[i] through the 1-mask block kernel, simdBlock pixels
// per call, the partial sums added in float64.
func (s *sparse[N]) span(frame []N, sp *maskSpan) float64 {
	s.sum[0] = 0
	for k0 := 0; k0 < len(sp.w); k0 += simdBlock {
		n := min(simdBlock, len(sp.w)-k0)
		dotBlock(s.kernels, frame[sp.lo+k0:][:n], sp.w[k0:], len(sp.w), &sp.pf, s.sum, s.part)
	}
	return s.sum[0]
}

// gather returns Σ frame[col[i]]·val[i], with 4 partial sums.
func gather[N native](frame []N, col []int32, val []float64) float64 {
	val = val[:len(col)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(col); i += 4 {
		c, v := col[i:i+4:i+4], val[i:i+4:i+4]
		s0 += float64(frame[c[0]]) * v[0]
		s1 += float64(frame[c[1]]) * v[1]
		s2 += float64(frame[c[2]]) * v[2]
		s3 += float64(frame[c[3]]) * v[3]
	}
	for ; i < len(col); i++ {
		s0 += float64(frame[col[i]]) * val[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// AutoTileFrames is the default number of frames per tile for frames of frameBytes
// native bytes: about 1 MiB of native tile, so that the tile a worker has just read is
// still in its L2 cache when it converts it, and at least 1 frame. On 256×256 uint16
// frames (8 per tile) tiles of 8 to 64 frames ran at the same speed (within 5%), 192
// frames 10-20% slower.
func AutoTileFrames(frameBytes int) int {
	return max(1, tileBytes/max(frameBytes, 1))
}

// autoTileFrames is the default tile of a job: AutoTileFrames for a sparse stack, larger
// for dense ones. Each tile streams the whole stack's weights from L3 or memory once
// (16 MiB for 64 masks of 256×256), so the weight traffic per frame falls with the tile.
// A stack of at least packedMinMasks masks takes manyMaskTileBytes: on 256×256 uint16
// frames (one Zen 4 core, the packed AVX-512 kernels) 64 masks ran at 0.66 GB/s with
// 8-frame tiles, 1.08 with 32 and 1.45 with 64. Stacks of 2 to packedMinMasks-1 masks
// take fewMaskTileBytes, and at least fewMaskTileFrames frames while those fit in
// manyMaskTileBytes: 4 masks of 256×256 are 1 MiB of weights, a Zen 4 core's whole L2,
// so each tile reads them from L3 again. A stack of 1 mask takes the same: make bench's
// uint16 1-mask row, one worker, ×floor, 1 MiB (8-frame) tiles against 4 MiB
// (32 frames), 16 pairs: 0.75-1.00, under 0.8 in 6, against 0.80-0.97 (medians 0.80-0.83
// → 0.84-0.89); two workers (medians 0.91-0.95 → 0.90-0.91) and float32 (8 pairs): within
// the noise. One core, frames in place, 4 masks, ×sweep
// (BenchmarkCPUWorker, 3 runs): uint16 (128 KiB frames) 0.57 with 8-frame tiles,
// 0.60-0.64 with 16, 0.63-0.66 with 32, 0.63-0.65 with 64, 0.58-0.59 with 128; float32
// (256 KiB frames) 0.69-0.74 with 16, 0.76-0.80 with 32, 0.75-0.78 with 64, 0.72-0.79
// with 128. Beyond 32 frames the frames' blocks prefetched ahead (4 KiB per frame) crowd
// the L2 that the weights share. With the quad kernels (float32 frames on AVX-512), 4
// masks, make bench's row (3 runs): 0.65-0.75 with 4-frame tiles, 0.80-0.81 with 16,
// 0.84-0.86 with 32, 0.80-0.83 with 64.
func autoTileFrames(frameBytes, nMasks int, sparse bool) int {
	fb := max(frameBytes, 1)
	switch {
	case sparse:
		return AutoTileFrames(frameBytes)
	case nMasks < packedMinMasks: // 1 mask too
		return max(1, fewMaskTileBytes/fb, min(fewMaskTileFrames, manyMaskTileBytes/fb))
	}
	return max(1, manyMaskTileBytes/fb)
}

// jobTileFrames is the tile of a job that does not set Options.TileFrames: autoTileFrames,
// with the tile's float64 result rows (8 bytes per frame and mask) within tileBytes too.
func jobTileFrames(frameBytes, nMasks int, sparse bool) int {
	return max(1, min(autoTileFrames(frameBytes, nMasks, sparse), tileBytes/(8*max(nMasks, 1))))
}

const (
	tileBytes         = 1 << 20
	fewMaskTileBytes  = 4 << 20
	fewMaskTileFrames = 32
	manyMaskTileBytes = 8 << 20
)
