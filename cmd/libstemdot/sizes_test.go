package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/live/merlin"
)

// callC calls the exported function fn (a stemdot_go_*) as C would, with args converted
// to its parameter types, cgo's C types that a test file cannot name: integers to the C
// integer types, unsafe.Pointer to the C pointer types, nil to NULL. It returns the
// status and the calling thread's last error (the goroutine stays on its thread).
func callC(fn any, args ...any) (status, string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := reflect.ValueOf(fn)
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		t := f.Type().In(i)
		switch v := a.(type) {
		case nil:
			in[i] = reflect.Zero(t)
		case unsafe.Pointer:
			if t.Kind() == reflect.UnsafePointer {
				in[i] = reflect.ValueOf(v)
			} else {
				in[i] = reflect.NewAt(t.Elem(), v)
			}
		default:
			in[i] = reflect.ValueOf(v).Convert(t)
		}
	}
	st := status(f.Call(in)[0].Convert(reflect.TypeOf(0)).Int())
	return st, lastError()
}

// abi is what the C ABI's entry points are called with in the size tests: a buffer of
// zeros (1 MiB) for every input array (in), one for every output (buf), a C string mask
// spec, and handles of a memory dataset
// of 1×2 frames of 2×2 uint8 pixels, of a prepared 2×2 mask, of a default plan and of
// a live run that received those frames (served as a Merlin) and ended.
type abi struct {
	in, buf, spec         unsafe.Pointer
	ds, masks, plan, live uint64
	view                  uint64 // a viewer of a memory dataset of its own (ds stays free)
	out                   uint64 // where an entry point stores a handle it makes
	keep                  [][]byte
	frames                []byte
}

var (
	abiOnce sync.Once
	theABI  abi
)

func testABI(t testing.TB) *abi {
	abiOnce.Do(func() {
		a := &theABI
		in, buf := make([]uint64, 1<<17), make([]uint64, 1<<17)
		spec := []byte("disk:1,1,1\x00")
		a.frames = []byte{1, 2, 3, 4, 5, 6, 7, 8}
		a.in, a.buf, a.spec = unsafe.Pointer(&in[0]), unsafe.Pointer(&buf[0]), unsafe.Pointer(&spec[0])
		a.keep = [][]byte{unsafe.Slice((*byte)(a.in), 8*len(in)), unsafe.Slice((*byte)(a.buf), 8*len(buf)), spec}
		nav := []uint64{1, 2}
		if st, msg := callC(stemdot_go_dataset_from_memory, unsafe.Pointer(&a.frames[0]), 8, 1, 2, unsafe.Pointer(&nav[0]), 2, 2, unsafe.Pointer(&a.ds)); st != statusOK {
			panic(msg)
		}
		if st, msg := callC(stemdot_go_plan_new_options, nil, unsafe.Pointer(&a.plan)); st != statusOK {
			panic(msg)
		}
		if st, msg := callC(stemdot_go_masks_new, a.in, 7, 1, 2, 2, unsafe.Pointer(&a.masks)); st != statusOK {
			panic(msg)
		}
		a.live = endedLive(a)
		var vds uint64
		if st, msg := callC(stemdot_go_dataset_from_memory, unsafe.Pointer(&a.frames[0]), 8, 1, 2, unsafe.Pointer(&nav[0]), 2, 2, unsafe.Pointer(&vds)); st != statusOK {
			panic(msg)
		}
		if st, msg := callC(stemdot_go_view_start, vds, cstr("cpus=1"), unsafe.Pointer(&a.view)); st != statusOK {
			panic(msg)
		}
	})
	return &theABI
}

// endedLive is the handle of a live run of a's dataset, served as a Merlin on loopback
// (for the rest of the process), that has ended.
func endedLive(a *abi) uint64 {
	ds, err := memoryDataset(a.frames, 1, []int{1, 2}, 2, 2)
	if err != nil {
		panic(err)
	}
	src, err := merlin.FromDataset(ds)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go merlin.Serve(context.Background(), ln, src, merlin.ServeOptions{})
	var h uint64
	if st, msg := callC(stemdot_go_live_start, cstr("merlin://"+ln.Addr().String()), cstr("passive=true"), a.in, 7, 1, 2, 2, 0, unsafe.Pointer(&h)); st != statusOK {
		panic(msg)
	}
	if st, msg := callC(stemdot_go_live_wait, h, a.buf, nil, 7, 0); st != statusOK {
		panic(msg)
	}
	return h
}

// sizeCase is an entry point of the C ABI called with sizes s (its size_t arguments, in
// order, as many as sizes): sizes are those of a call whose sizes agree (it succeeds, or
// fails for the zeros of abi.buf, e.g. no disk in a flat frame, not for its sizes).
type sizeCase struct {
	name  string
	sizes []uint64
	call  func(a *abi, s []uint64) (status, string)
	// free, when set, frees the handle a success made (in abi.out).
	free any
	// not says the sizes that are not counts of elements (an index), with the status a
	// huge one gets, or capacities that may exceed what is written (statusOK).
	not map[int]status
}

func sizeCases() []sizeCase {
	const f32, f64, u8 = 7, 8, 1 // STEMDOT_FLOAT32, STEMDOT_FLOAT64, STEMDOT_UINT8
	return []sizeCase{
		{"stemdot_find_centre", []uint64{2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_find_centre, a.in, s[0], s[1], a.buf)
		}, nil, nil},
		{"stemdot_mask_parse", []uint64{2, 2, 4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_mask_parse, a.spec, s[0], s[1], a.buf, s[2], a.buf)
		}, nil, map[int]status{2: statusOK}},
		{"stemdot_mask_parse_centred", []uint64{2, 2, 4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_mask_parse_centred, a.spec, s[0], s[1], a.buf, a.buf, s[2], a.buf)
		}, nil, map[int]status{2: statusOK}},
		{"stemdot_centre", []uint64{2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_centre, a.ds, 0, a.in, s[0], a.buf)
		}, nil, nil},
		{"stemdot_com_products", []uint64{2, 2, 64}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_com_products, a.in, s[0], s[1], 0.0, 0, a.buf, a.buf, a.buf, a.buf, a.buf, a.buf, s[2])
		}, nil, map[int]status{2: statusOK}},
		{"stemdot_dataset_from_memory", []uint64{8, 2, 1, 2, 2, 2}, func(a *abi, s []uint64) (status, string) {
			nav := []uint64{s[2], s[3], 1, 1, 1, 1, 1, 1} // as many as nav_ndim may be
			return callC(stemdot_go_dataset_from_memory, unsafe.Pointer(&a.frames[0]), s[0], u8, s[1], unsafe.Pointer(&nav[0]), s[4], s[5], unsafe.Pointer(&a.out))
		}, stemdot_go_dataset_free, map[int]status{1: errInvalidArgument}},
		{"stemdot_plan_describe", []uint64{1 << 16}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_plan_describe, a.plan, a.ds, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
		{"stemdot_dataset_run_notes", []uint64{0, 2, 64}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_dataset_run_notes, a.ds, s[0], s[1], a.buf, s[2], a.buf)
		}, nil, map[int]status{2: statusOK}},
		{"stemdot_dataset_path", []uint64{1}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_dataset_path, a.ds, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
		{"stemdot_mask_stack", []uint64{0, 1, 2, 2, 4, 64}, func(a *abi, s []uint64) (status, string) {
			specs := []unsafe.Pointer{a.spec, a.spec, a.spec, a.spec} // as many as n_specs may be
			return callC(stemdot_go_mask_stack, a.in, s[0], unsafe.Pointer(&specs[0]), s[1], s[2], s[3], nil, a.buf, f32, s[4], a.buf, a.buf, s[5], a.buf)
		}, nil, map[int]status{4: statusOK, 5: statusOK}},
		{"stemdot_apply", []uint64{1, 2, 2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_apply, a.ds, a.in, s[0], s[1], s[2], 0, 0, nil, nil, a.buf, f64, s[3])
		}, nil, nil},
		{"stemdot_apply64", []uint64{1, 2, 2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_apply64, a.ds, a.in, s[0], s[1], s[2], 0, 0, nil, nil, a.buf, f32, s[3])
		}, nil, nil},
		{"stemdot_apply_shifted", []uint64{1, 2, 2, 2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_apply_shifted, a.ds, a.in, f32, s[0], s[1], s[2], a.in, s[3], 0, 0, nil, nil, a.buf, f64, s[4])
		}, nil, nil},
		{"stemdot_descan_fit", []uint64{4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_descan_fit, a.ds, nil, 0, a.buf, a.buf, s[0], a.buf)
		}, nil, nil},
		{"stemdot_com_shifts", []uint64{2, 3, 0}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_com_shifts, a.in, f64, s[0], s[1], s[2], a.buf)
		}, nil, map[int]status{2: errInvalidArgument}},
		{"stemdot_masks_new", []uint64{1, 2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_masks_new, a.in, f32, s[0], s[1], s[2], unsafe.Pointer(&a.out))
		}, stemdot_go_masks_free, nil},
		{"stemdot_apply_masks", []uint64{2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_apply_masks, a.ds, a.masks, a.in, s[0], 0, 0, nil, nil, a.buf, f32, s[1])
		}, nil, nil},
		{"stemdot_reduce", []uint64{4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_reduce, a.ds, 0, 0, nil, nil, a.buf, a.buf, nil, nil, s[0])
		}, nil, nil},
		{"stemdot_pick", []uint64{1, 2, 4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_pick, a.ds, a.in, s[0], s[1], a.buf, s[2])
		}, nil, nil},
		{"stemdot_dataset_scan", []uint64{2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_dataset_scan, a.ds, a.buf, a.buf, a.buf, a.buf, s[0])
		}, nil, nil},
		{"stemdot_live_start", []uint64{1, 2, 2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_start, cstr("merlin://127.0.0.1:1"), cstr("passive=true"), a.in, f32, s[0], s[1], s[2], 0, unsafe.Pointer(&a.out))
		}, stemdot_go_live_free, nil},
		{"stemdot_live_poll", []uint64{2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_poll, a.live, 0.0, a.buf, a.buf, f32, s[0])
		}, nil, nil},
		{"stemdot_live_wait", []uint64{2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_wait, a.live, a.buf, a.buf, f32, s[0])
		}, nil, nil},
		{"stemdot_live_missing", []uint64{4}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_missing, a.live, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
		{"stemdot_live_warnings", []uint64{1}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_warnings, a.live, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
		{"stemdot_live_info", []uint64{1 << 16}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_info, a.live, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
		{"stemdot_live_take", []uint64{2}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_take, a.live, 0.0, a.buf, a.buf, f32, s[0], a.buf, a.buf)
		}, nil, nil},
		{"stemdot_live_share_state", []uint64{1}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_live_share_state, a.live, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: errInvalidArgument}},
		{"stemdot_view_url", []uint64{64}, func(a *abi, s []uint64) (status, string) {
			return callC(stemdot_go_view_url, a.view, a.buf, s[0], a.buf)
		}, nil, map[int]status{0: statusOK}},
	}
}

// hugeSizes cannot be a count of elements of any buffer: past maxBytes, the product
// with another size overflowing 64 bits, ... (#33.4: 2^61+1 positions was INTERNAL).
var hugeSizes = []uint64{maxBytes + 1, 1<<61 + 1, 1 << 62, 1 << 63, math.MaxUint64}

// Every size argument of every entry point: a valid value is not refused; a huge one, with
// the others valid, is refused as SHAPE naming the argument, not INTERNAL (a recovered
// panic of overflowing arithmetic or unsafe.Slice), nor a crash.
func TestSizeArguments(t *testing.T) {
	a := testABI(t)
	for _, c := range sizeCases() {
		st, msg := c.call(a, c.sizes)
		require.NotContains(t, []status{errShape, errInternal}, st, "%s%v: %s", c.name, c.sizes, msg)
		if st == statusOK && c.free != nil {
			callC(c.free, a.out)
		}
		for i := range c.sizes {
			for _, huge := range hugeSizes {
				s := append([]uint64(nil), c.sizes...)
				s[i] = huge
				st, msg := c.call(a, s)
				want, ok := c.not[i]
				if !ok {
					want = errShape
				}
				assert.Equal(t, want, st, "%s%v: %s", c.name, s, msg)
				if want == errShape {
					assert.Regexp(t, "^"+c.name+": ", msg)
					assert.Contains(t, msg, fmt.Sprint(huge), "%s%v: the message names the size", c.name, s)
				}
			}
		}
	}
}

// FuzzSizes calls the entry points of sizeCases with sizes of the fuzzer's: each at most
// maxBytes taken modulo 4 (0 to 3: within abi's buffers, whatever the entry point reads
// or writes), each larger as it is (no buffer is that large). No status may be INTERNAL
// (a recovered panic), and nothing may crash.
func FuzzSizes(f *testing.F) {
	for i, c := range sizeCases() {
		f.Add(uint8(i), c.sizes[0], uint64(3), uint64(1<<61+1), uint64(math.MaxUint64), uint64(2), uint64(0))
	}
	a := testABI(f)
	f.Fuzz(func(t *testing.T, entry uint8, v0, v1, v2, v3, v4, v5 uint64) {
		cases := sizeCases()
		c := cases[int(entry)%len(cases)]
		s := []uint64{v0, v1, v2, v3, v4, v5}[:len(c.sizes)]
		for i, v := range s {
			if v <= maxBytes {
				s[i] = v % 4
			}
		}
		st, msg := c.call(a, s)
		if st == statusOK && c.free != nil {
			callC(c.free, a.out)
		}
		require.NotEqual(t, errInternal, st, "%s%v: %s", c.name, s, msg)
	})
}
