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
