package main

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/json"
	"time"
	"unsafe"

	"github.com/stemdot/stemdot/errs"
)

// shareState is stemdot_live_share_state's JSON; shareGive stemdot_live_share_give's.
// A header is the message's parts, each base64 (encoding/json's []byte).
type shareState struct {
	Connected bool     `json:"connected"`
	Header    [][]byte `json:"header"`
	EndSeen   bool     `json:"end_seen"`
}

type shareGive struct {
	Header [][]byte `json:"header"`
	End    bool     `json:"end"`
}

// getShared is the shared run of h (option shared).
func getShared(h C.stemdot_live) (*liveRun, error) {
	l, err := getLive(uint64(h))
	if err != nil {
		return nil, err
	}
	if l.sharer == nil {
		return nil, failf(errs.Argument, "the live run on %s does not share its stream: start it with option shared=true", l.source)
	}
	return l, nil
}

//export stemdot_go_live_share_state
func stemdot_go_live_share_state(h C.stemdot_live, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_share_state"
	defer guard(fn, &st)
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	l, err := getShared(h)
	if err != nil {
		return fail(fn, err)
	}
	b, err := json.Marshal(shareState{Connected: l.sharer.Connected(), Header: l.sharer.HeaderMessage(), EndSeen: l.sharer.EndSeen()})
	if err != nil {
		return fail(fn, errs.Wrap(errs.Internal, err))
	}
	return copyText(fn, string(b), "share state", buf, bufLen, needed)
}

//export stemdot_go_live_share_give
func stemdot_go_live_share_give(h C.stemdot_live, message *C.stemdot_cchar) (st C.stemdot_status) {
	const fn = "stemdot_live_share_give"
	defer guard(fn, &st)
	if message == nil {
		return fail(fn, failf(errs.Argument, "message must not be NULL"))
	}
	l, err := getShared(h)
	if err != nil {
		return fail(fn, err)
	}
	var g shareGive
	if err := json.Unmarshal([]byte(goString(message)), &g); err != nil {
		return fail(fn, failf(errs.Argument, `message: want {"header": [BASE64, ...]} and/or {"end": true}: %v`, err))
	}
	if g.Header != nil {
		if err := l.sharer.GiveHeader(g.Header); err != nil {
			return fail(fn, err)
		}
	}
	if g.End {
		l.sharer.EndShared()
	}
	return succeed()
}

//export stemdot_go_live_take
func stemdot_go_live_take(h C.stemdot_live, timeout C.double, snap *C.stemdot_live_snapshot, rows unsafe.Pointer,
	rowsDType C.stemdot_dtype, maxRows C.size_t, indices *C.uint64_t, nRows *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_take"
	defer guard(fn, &st)
	if snap == nil || nRows == nil || maxRows > 0 && (rows == nil || indices == nil) {
		return fail(fn, failf(errs.Argument, "snap and n_rows must not be NULL, nor rows and indices when max_rows > 0"))
	}
	*nRows = 0
	if !(timeout >= 0 && timeout <= maxPollTimeout) {
		return fail(fn, failf(errs.Argument, "timeout %g: want seconds from 0 to %d", float64(timeout), maxPollTimeout))
	}
	l, err := getLive(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	if _, err := sizeProduct("max_rows", 8, 0, maxRows, C.size_t(max(l.nMasks(), 1))); err != nil {
		return fail(fn, err)
	}
	if _, err := getShared(h); err != nil {
		return fail(fn, err)
	}
	n, err := l.take(time.Duration(float64(timeout)*float64(time.Second)), snap, rows, rowsDType, int(maxRows), indices)
	*nRows = C.size_t(n)
	if err != nil {
		return fail(fn, err)
	}
	return succeed()
}

// nMasks is the run's mask count, 0 before its first snapshot.
func (l *liveRun) nMasks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap.NMasks
}

// take waits up to timeout for rows computed and not taken yet (none once the run has
// ended), then moves at most maxRows of them, in the order they were computed, into rows
// (maxRows × n_masks values of the run's dtype) and their frame indices into indices,
// and fills snap as poll does; snap.final is set only once the run has ended and every
// row has been taken. Returns the rows taken, and the run's error when it failed.
func (l *liveRun) take(timeout time.Duration, snap *C.stemdot_live_snapshot, rows unsafe.Pointer, rowsDType C.stemdot_dtype,
	maxRows int, indices *C.uint64_t) (int, error) {
	deadline := time.Now().Add(timeout)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.rows) == 0 && !l.done() && time.Now().Before(deadline) {
		changed := l.changed
		l.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-l.ended:
		case <-t.C:
		}
		t.Stop()
		l.mu.Lock()
	}
	if err := l.fillLocked(snap, nil); err != nil {
		return 0, err
	}
	nm := l.snap.NMasks
	if maxRows == 0 || nm == 0 {
		if len(l.rows) > 0 {
			snap.final = 0
		}
		return 0, nil
	}
	want, name := C.stemdot_dtype(C.STEMDOT_FLOAT32), "STEMDOT_FLOAT32"
	if l.float64 {
		want, name = C.STEMDOT_FLOAT64, "STEMDOT_FLOAT64 (option float64)"
	}
	if rowsDType != want {
		return 0, failf(errs.DType, "rows_dtype %d is not the run's result dtype, %s", rowsDType, name)
	}
	idx := unsafe.Slice((*uint64)(unsafe.Pointer(indices)), maxRows)
	n := 0
	for n < maxRows && len(l.rows) > 0 {
		r := &l.rows[0]
		m := min(r[1]-r[0], maxRows-n)
		if l.float64 {
			copy(unsafe.Slice((*float64)(rows), maxRows*nm)[n*nm:], l.snap.F64[r[0]*nm:(r[0]+m)*nm])
		} else {
			copy(unsafe.Slice((*float32)(rows), maxRows*nm)[n*nm:], l.snap.F32[r[0]*nm:(r[0]+m)*nm])
		}
		for i := range m {
			idx[n+i] = uint64(l.indices[r[0]+i])
		}
		n += m
		if r[0] += m; r[0] == r[1] {
			l.rows = l.rows[1:]
		}
	}
	if len(l.rows) > 0 {
		snap.final = 0
	}
	return n, nil
}
