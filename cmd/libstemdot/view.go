package main

/*
#include "shim.h"
*/
import "C"

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/cmd/internal/view"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
)

// kindView is the handle kind of a viewer server (stemdot_view_start).
const kindView = "view"

// viewKeys are stemdot_view_start's own option keys; the others are the plan's
// (stemdot.ParsePlan).
var viewKeys = []string{"listen", "name", "command", "frame_ancestors", "hosts"}

// viewServer is a view handle: stemdot view's server (internal/view) of a dataset,
// serving on a goroutine of its own until stop.
type viewServer struct {
	url    string
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned and the dataset is released
}

// startView starts the server of the dataset of dsHandle with the options of
// stemdot_view_start. The dataset handle is in use (stemdot_dataset_free refuses it)
// until the server stops.
func startView(dsHandle uint64, options string) (*viewServer, error) {
	opt := map[string]string{}
	var plan []string
	err := frontend.ParseKeyValues(options, "view option", func(key, value string) error {
		if slices.Contains(viewKeys, key) {
			opt[key] = strings.TrimSpace(value)
		} else {
			plan = append(plan, key+"="+value) // ParsePlan names unknown keys
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p, err := stemdot.ParsePlan(strings.Join(plan, ";"))
	if err != nil {
		if strings.Contains(err.Error(), "unknown plan option") {
			err = failf(errs.Argument, "%v, or a view option (%s)", err, strings.Join(viewKeys, ", "))
		}
		return nil, err
	}
	apply, err := p.Planner()
	if err != nil {
		return nil, err
	}
	// The first pass (sum, mean, max frames) runs on the CPU workers of the plan, as
	// stemdot view's does.
	p.GPUs = ""
	reduce, err := p.ReducePlanner()
	if err != nil {
		return nil, err
	}
	vo := view.Options{File: opt["name"], Command: opt["command"], Apply: apply, Reduce: reduce, FrameAncestors: opt["frame_ancestors"]}
	if h := opt["hosts"]; h != "" {
		vo.Hosts = strings.Split(h, ",")
	}
	addr := opt["listen"]
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	v, release, err := handles.acquire(dsHandle, kindDataset)
	if err != nil {
		return nil, err
	}
	ds := v.(dataset.Dataset)
	if vo.File == "" {
		vo.File = cmp.Or(ds.Path(), "frames in memory")
	}
	vo.Warnings = stemdot.OpenWarnings(ds)
	srv, err := view.New(ds, vo)
	if err != nil {
		release()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		release()
		return nil, failf(errs.IO, "option listen %q: %v (give another HOST:PORT, with port 0 for any free one)", addr, err)
	}
	a := ln.Addr().(*net.TCPAddr)
	host := a.IP.String()
	if a.IP.IsUnspecified() { // listening on every address: loopback is one of them
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &viewServer{url: fmt.Sprintf("http://%s/%s/", net.JoinHostPort(host, strconv.Itoa(a.Port)), srv.Token()), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer release()
		srv.Serve(ctx, ln) // its only error is the listener's, which ends the server
	}()
	return s, nil
}

// stop stops the server and waits until it no longer reads the dataset: requests in
// progress and the first pass are cancelled (view.Server.Serve).
func (s *viewServer) stop() {
	s.cancel()
	<-s.done
}

//export stemdot_go_view_start
func stemdot_go_view_start(dsHandle C.stemdot_dataset, options *C.stemdot_cchar, out *C.stemdot_view) (st C.stemdot_status) {
	const fn = "stemdot_view_start"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	s, err := startView(uint64(dsHandle), goString(options))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_view(handles.add(kindView, s))
	return succeed()
}

//export stemdot_go_view_url
func stemdot_go_view_url(h C.stemdot_view, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_view_url"
	defer guard(fn, &st)
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	v, err := handles.get(uint64(h), kindView)
	if err != nil {
		return fail(fn, err)
	}
	return copyText(fn, v.(*viewServer).url, "URL", buf, bufLen, needed)
}

//export stemdot_go_view_free
func stemdot_go_view_free(h C.stemdot_view) (st C.stemdot_status) {
	const fn = "stemdot_view_free"
	defer guard(fn, &st)
	v, err := handles.remove(uint64(h), kindView, nil)
	if err != nil {
		return fail(fn, err)
	}
	v.(*viewServer).stop()
	return succeed()
}
