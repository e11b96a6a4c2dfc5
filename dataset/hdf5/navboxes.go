//go:build !nohdf5

package hdf5

// navBoxes splits frames [start, end) of a row-major nav shape dims into boxes (first
// index and count per axis) in frame order, calling yield for each until it returns
// false: the frames of each box are consecutive. A range gives at most 2·len(dims)-1
// boxes.
func navBoxes(dims []int, start, end int, yield func(first, count []int) bool) {
	if start >= end {
		return
	}
	if len(dims) == 1 {
		yield([]int{start}, []int{end - start})
		return
	}
	inner := product(dims[1:])
	sub := func(lead, s, e int) bool { // frames [s, e) within leading index lead
		ok := true
		navBoxes(dims[1:], s, e, func(first, count []int) bool {
			ok = yield(append([]int{lead}, first...), append([]int{1}, count...))
			return ok
		})
		return ok
	}
	lo, hi := start/inner, (end-1)/inner
	if lo == hi {
		sub(lo, start-lo*inner, end-lo*inner)
		return
	}
	if start%inner != 0 {
		if !sub(lo, start-lo*inner, inner) {
			return
		}
		lo++
	}
	full := end / inner // leading indices [lo, full) are whole
	if full > lo {
		first := make([]int, len(dims))
		count := append([]int{full - lo}, dims[1:]...)
		first[0] = lo
		if !yield(first, count) {
			return
		}
	}
	if end%inner != 0 {
		sub(full, 0, end-full*inner)
	}
}

// product is the product of the sizes s (1 for none).
func product(s []int) int {
	p := 1
	for _, n := range s {
		p *= n
	}
	return p
}

// frameBoxes splits frames [start, end) into boxes of the dataset (first element and
// size on every axis) whose elements in row-major order are the frames in frame order
// (navBoxes, with whole frames); a frames-last stack (h5File.framesLast) gives one box
// (sig_y, sig_x, end-start) whose elements are frame-minor, for unstackLast to reorder.
func (d *h5File) frameBoxes(start, end int, yield func(lo, count []int) bool) {
	if d.framesLast {
		yield([]int{0, 0, start}, []int{d.sig[0], d.sig[1], end - start})
		return
	}
	rank := len(d.fileNav) + 2
	navBoxes(d.fileNav, start, end, func(first, count []int) bool {
		lo, n := make([]int, rank), make([]int, rank)
		copy(lo, first)
		copy(n, count)
		n[rank-2], n[rank-1] = d.sig[0], d.sig[1]
		return yield(lo, n)
	})
}

// unstackLast writes the frames of a box of a frames-last stack, src (sig_y·sig_x
// pixels, each the frames' elements of size bytes one after the other), to dst in frame
// order (frame, sig_y·sig_x pixels).
func unstackLast(dst, src []byte, frames, size int) {
	pixels := len(src) / (frames * size)
	for p := range pixels {
		px := src[p*frames*size : (p+1)*frames*size]
		for f := range frames {
			copy(dst[(f*pixels+p)*size:(f*pixels+p+1)*size], px[f*size:(f+1)*size])
		}
	}
}

// axisOrder is the dataset's axes in the order nav axes, then sig_y, sig_x: a
// frames-last stack's frame axis first.
func (d *h5File) axisOrder() []int {
	if d.framesLast {
		return []int{2, 0, 1}
	}
	order := make([]int, len(d.fileNav)+2)
	for i := range order {
		order[i] = i
	}
	return order
}

// toNavOrder is the box [lo, hi) of the dataset with its axes in axisOrder.
func (d *h5File) toNavOrder(box [2][]int) [2][]int {
	var lo, hi []int
	for _, a := range d.axisOrder() {
		lo, hi = append(lo, box[0][a]), append(hi, box[1][a])
	}
	return [2][]int{lo, hi}
}
